"""MMQA reader: the real dev file (skipped when ../shared/data is absent) and bad input."""

import collections
import gzip
import json
import pathlib

import pytest

from graphloom_jax.data import mmqa

MMQA_DIR = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "mmqa"
needs_dev = pytest.mark.skipif(not (MMQA_DIR / "MMQA_dev.jsonl.gz").exists(),
                               reason="real MMQA dev file absent (../shared/data/mmqa)")


@needs_dev
def test_real_dev_file():
  qs, report = mmqa.read_questions(MMQA_DIR / "MMQA_dev.jsonl.gz")
  assert report.read == 2441 and report.skipped == 0
  families = collections.Counter(q.family for q in qs)
  assert families == {"Compose": 701, "Compare": 183, "Intersect": 96, "TextQ": 721,
                      "TableQ": 369, "ImageQ": 230, "ImageListQ": 141}
  # Quirks documented in ../shared/data/README.md.
  assert sum(len(q.supporting_context) != len(q.supporting_doc_ids) for q in qs) == 315
  outside = [q for q in qs if q.gold_outside_candidates]
  assert len(outside) == 1
  q = qs[0]
  assert q.qid == "a33985b1e8b2502fc18cc8147dc27db8"
  assert q.answer_texts == ["Mask"] and q.answers[0].table_indices == ((12, 1),)
  assert q.type == "TableQ" and q.table_id == "8513db80c11ea439ab11eba406ec00d9"
  assert q.supporting_doc_ids == ["8513db80c11ea439ab11eba406ec00d9"]
  assert all(q.answers for q in qs)
  composed = [q for q in qs if q.family == "Compose"]
  assert all(q.intermediate_answers for q in composed)


@needs_dev
def test_real_images_file_and_folder_loader():
  data = mmqa.MMQA.load(MMQA_DIR, "dev")
  assert len(data.images) == 57058 and not data.texts and not data.tables
  img = data.images["35b31d9b4f723f806fd32662ef29edf7"]
  assert img.title == "Republican Party (United States)"
  assert img.path == "35b31d9b4f723f806fd32662ef29edf7.jpg"
  covered = sum(all(d in data.images for d in q.image_doc_ids) for q in data.questions)
  assert covered == len(data.questions)


def test_texts_and_tables(tmp_path):
  texts = [{"title": "Taipei", "url": "u", "id": "t1", "text": "Taipei is a city."}]
  tables = [{"title": "Dutch Ruppersberger", "url": "u", "id": "tb1", "table": {
      "table_rows": [[{"text": "1994", "links": []}, {"text": "Baltimore", "links": [
          {"text": "Baltimore", "wiki_title": "Baltimore", "url": "u"}]}]],
      "table_name": "Electoral history",
      "header": [{"column_name": "Year", "metadata": {}}, {"column_name": "Office",
                                                        "metadata": {}}]}}]
  with gzip.open(tmp_path / "MMQA_texts.jsonl.gz", "wt") as f:
    f.write("\n".join(json.dumps(t) for t in texts) + "\n")
  (tmp_path / "MMQA_tables.jsonl").write_text("\n".join(json.dumps(t) for t in tables) + "\n")
  q = {"qid": "q1", "question": "Which year?", "metadata": {"type": "TableQ",
                                                            "table_id": "tb1"}}
  (tmp_path / "MMQA_test.jsonl").write_text(json.dumps(q) + "\n")
  data = mmqa.MMQA.load(tmp_path, "test")
  assert data.texts["t1"].text == "Taipei is a city."
  tb = data.tables["tb1"]
  assert tb.header == ("Year", "Office") and tb.rows == (("1994", "Baltimore"),)
  assert data.questions[0].answers == []  # the test split has no answers


@pytest.mark.parametrize("bad,match", [
    ({"question": "x", "metadata": {"type": "TextQ"}}, "missing key 'qid'"),
    ({"qid": "q9", "question": "x", "metadata": {}}, r"qid q9.*missing key 'type'"),
    ({"qid": "q9", "question": "x", "metadata": {"type": "TextQ"}, "answers": [{"type": "s"}]},
     r"answers\[0\].*'answer'"),
    ({"qid": "q9", "question": "x", "metadata": {"type": "TextQ"},
      "supporting_context": [{"doc_part": "text"}]}, r"supporting_context\[0\]"),
    ({"qid": "q9", "question": 3, "metadata": {"type": "TextQ"}}, "'question' must be str"),
])
def test_bad_question_records(tmp_path, bad, match):
  good = {"qid": "q0", "question": "ok?", "metadata": {"type": "TextQ"},
          "answers": [{"answer": "yes", "type": "yesno", "modality": "text"}]}
  path = tmp_path / "MMQA_dev.jsonl"
  path.write_text("\n".join(json.dumps(r) for r in (good, bad, {**good, "qid": "q1"})) + "\n")
  with pytest.raises(mmqa.MMQAFormatError, match=f"MMQA_dev.jsonl:2.*{match}"):
    mmqa.read_questions(path)
  qs, report = mmqa.read_questions(path, strict=False)
  assert [q.qid for q in qs] == ["q0", "q1"] and report.skipped == 1


def test_missing_split(tmp_path):
  with pytest.raises(FileNotFoundError, match="MMQA_train"):
    mmqa.MMQA.load(tmp_path, "train")
