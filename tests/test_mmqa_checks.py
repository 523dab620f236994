"""MMQA records that would be read as wrong data: duplicate ids, NaN or bool answers, null doc
ids and ragged tables are refused (strict) or skipped and reported (lenient)."""

import json

import pytest

from graphloom_jax.data import mmqa


def _question(qid, **changes):
  record = {"qid": qid, "question": "What colour is the cup?",
            "answers": [{"answer": "red", "type": "string"}],
            "metadata": {"type": "ImageQ", "modalities": ["image"], "image_doc_ids": ["img1"],
                         "text_doc_ids": [], "table_id": None},
            "supporting_context": [{"doc_id": "img1", "doc_part": "image"}]}
  for key, value in changes.items():
    if key.startswith("meta_"):
      record["metadata"][key[5:]] = value
    else:
      record[key] = value
  return record


def _write(path, records):
  path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in records))
  return path


def test_duplicate_qids_refused_or_reported(tmp_path):
  path = _write(tmp_path / "MMQA_dev.jsonl", [_question("a"), _question("b"), _question("a")])
  with pytest.raises(mmqa.MMQAFormatError, match="MMQA_dev.jsonl:3: duplicate qid 'a' "
                     r"\(first on line 1\)"):
    mmqa.read_questions(path)
  got, report = mmqa.read_questions(path, strict=False)
  assert [q.qid for q in got] == ["a", "b"] and report.skipped == 1


def test_duplicate_doc_ids_refused(tmp_path):
  path = _write(tmp_path / "MMQA_texts.jsonl", [{"id": "t1", "text": "x"},
                                                 {"id": "t1", "text": "y"}])
  with pytest.raises(mmqa.MMQAFormatError, match=":2: duplicate id 't1'"):
    mmqa.read_texts(path)


@pytest.mark.parametrize("value,match", [
    (float("nan"), "answer must be a string or a finite number, got nan"),
    (float("inf"), "answer must be a string or a finite number, got inf"),
    (True, "answer must be a string or a finite number, got True"),
])
def test_bad_answer_values_refused(tmp_path, value, match):
  path = _write(tmp_path / "MMQA_dev.jsonl", [_question("a", answers=[{"answer": value}])])
  with pytest.raises(mmqa.MMQAFormatError, match=f"qid a.*answers\\[0\\].*{match}"):
    mmqa.read_questions(path)


@pytest.mark.parametrize("changes,match", [
    ({"supporting_context": [{"doc_id": None}]}, r"supporting_context\[0\].doc_id must be a "
     "non-empty string, got None"),
    ({"meta_image_doc_ids": ["img1", None]}, r"metadata.image_doc_ids\[1\] must be a non-empty "
     "string, got None"),
    ({"meta_text_doc_ids": [""]}, r"metadata.text_doc_ids\[0\] must be a non-empty string"),
    ({"meta_table_id": 7}, "metadata.table_id must be a string or null, got 7"),
])
def test_null_or_bad_doc_ids_refused(tmp_path, changes, match):
  path = _write(tmp_path / "MMQA_dev.jsonl", [_question("a", **changes)])
  with pytest.raises(mmqa.MMQAFormatError, match=f"qid a.*{match}"):
    mmqa.read_questions(path)
  got, report = mmqa.read_questions(path, strict=False)
  assert got == [] and report.skipped == 1


def _table(rows):
  return {"id": "tab1", "title": "t", "table": {
      "table_name": "n", "header": [{"column_name": "a"}, {"column_name": "b"}],
      "table_rows": [[{"text": c} for c in row] for row in rows]}}


def test_ragged_table_refused(tmp_path):
  path = _write(tmp_path / "MMQA_tables.jsonl", [_table([["1", "2"], ["3"]])])
  with pytest.raises(mmqa.MMQAFormatError, match=r"id tab1.*table_rows\[1\] has 1 cell\(s\), "
                     "the header has 2 columns"):
    mmqa.read_tables(path)
  path = _write(tmp_path / "ok.jsonl", [_table([["1", "2"], ["3", "4"]])])
  assert mmqa.read_tables(path)[0][0].rows == (("1", "2"), ("3", "4"))


def test_non_string_cell_refused(tmp_path):
  path = _write(tmp_path / "MMQA_tables.jsonl", [_table([["1", None]])])
  with pytest.raises(mmqa.MMQAFormatError, match=r"table_rows\[0\]\[1\].text must be a string"):
    mmqa.read_tables(path)
