"""MMQA reader: real dev records (a committed sample of the official files, tests/data/mmqa_dev)
checked against their raw JSON, and bad input."""

import collections
import gzip
import json
import pathlib

import pytest

from graphloom_jax.data import mmqa

MMQA_DIR = pathlib.Path(__file__).parent / "data" / "mmqa_dev"


def _raw(name):
  """The fixture's records parsed with json alone (the independent reference)."""
  with gzip.open(MMQA_DIR / name, "rt", encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_real_dev_records():
  qs, report = mmqa.read_questions(MMQA_DIR / "MMQA_dev.jsonl.gz")
  assert report.read == 22 and report.skipped == 0
  families = collections.Counter(q.family for q in qs)
  # tests/data/mmqa_dev/README.md: the first 3 of each family + the gold-outside question.
  assert families == {"Compose": 3, "Compare": 3, "Intersect": 3, "TextQ": 3, "TableQ": 3,
                      "ImageQ": 3, "ImageListQ": 4}
  # The dev file's quirks: duplicated supporting documents, one gold doc outside candidates.
  assert sum(len(q.supporting_context) != len(q.supporting_doc_ids) for q in qs) == 3
  outside = [q for q in qs if q.gold_outside_candidates]
  assert [q.qid for q in outside] == ["3b3793152347552aea6d81cf2d24a82b"]
  assert outside[0].gold_outside_candidates == ["e51e7755477179a20eab8310a1c25559"]
  q = qs[0]
  assert q.qid == "a33985b1e8b2502fc18cc8147dc27db8"
  assert q.answer_texts == ["Mask"] and q.answers[0].table_indices == ((12, 1),)
  assert q.type == "TableQ" and q.table_id == "8513db80c11ea439ab11eba406ec00d9"
  assert q.supporting_doc_ids == ["8513db80c11ea439ab11eba406ec00d9"]
  assert all(q.answers for q in qs)
  composed = [q for q in qs if q.family == "Compose"]
  assert all(q.intermediate_answers for q in composed)
  # Every field against the raw records.
  raw = _raw("MMQA_dev.jsonl.gz")
  assert [q.qid for q in qs] == [r["qid"] for r in raw]
  for q, r in zip(qs, raw):
    m = r["metadata"]
    assert q.question == r["question"] and q.type == m["type"]
    assert q.answer_texts == [str(a["answer"]) for a in r["answers"]]
    assert q.image_doc_ids == m["image_doc_ids"] and q.text_doc_ids == m["text_doc_ids"]
    assert q.table_id == (m.get("table_id") or None)
    assert q.supporting_context == [(c["doc_id"], c["doc_part"]) for c in r["supporting_context"]]
    seen = []
    for c in r["supporting_context"]:
      if c["doc_id"] not in seen:
        seen.append(c["doc_id"])
    assert q.supporting_doc_ids == seen
    assert [[a.answer for a in step] for step in q.intermediate_answers] == \
        [[str(a["answer"]) for a in step] for step in m.get("intermediate_answers", [])]


def test_real_images_file_and_folder_loader():
  data = mmqa.MMQA.load(MMQA_DIR, "dev")
  assert len(data.images) == 122 and not data.texts and not data.tables
  img = data.images["39b35178165c4a5e874d012773193712"]
  assert img.title == "Celine Dion"
  assert img.path == "39b35178165c4a5e874d012773193712.jpg"
  assert {i: (d.title, d.url, d.path) for i, d in data.images.items()} == \
      {r["id"]: (r["title"], r["url"], r["path"]) for r in _raw("MMQA_images.jsonl.gz")}
  covered = sum(all(d in data.images for d in q.image_doc_ids) for q in data.questions)
  assert covered == len(data.questions) == 22


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
