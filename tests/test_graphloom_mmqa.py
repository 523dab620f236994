"""The MMQA rows (evaluation/mmqa_rows.py; benchmarks/graphloom_mmqa.py is their command line):
the instance graphs come from the documents a folder holds (image titles; texts and tables when
present; nothing from the answers), a missing --mmqa_dir is an error naming the flag, and a run
on the committed dev sample (tiny random decoder, the text modes) reports what is available
offline and scores with the official scorer."""

import pathlib
import subprocess
import sys

import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import mmqa
from graphloom_jax.evaluation import answers, mmqa_rows

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def test_missing_folder_is_an_error_naming_the_flag():
  run = subprocess.run([sys.executable, "-m", "benchmarks.graphloom_mmqa"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert run.returncode != 0 and "--mmqa_dir is required" in run.stderr, run.stderr[-2000:]
  with pytest.raises(ValueError, match="--mmqa_dir"):
    mmqa_rows.run("", 1)


def test_graphs_hold_the_folders_documents_and_nothing_from_the_answers():
  data = mmqa.MMQA.load(DATA / "mmqa", "dev")  # images, texts and tables (written by us)
  by_type = {q.type: q for q in data.questions}
  for q in data.questions:
    triples = mmqa.question_triples(q, data)
    images = [t for t in triples if t.source == "scene"]
    assert [t.object for t in images] == [data.images[d].title for d in q.image_doc_ids
                                          if d in data.images]
    assert [t.subject for t in images] == [f"image {k + 1}" for k, d in
                                           enumerate(q.image_doc_ids) if d in data.images]
    for t in triples:
      kind, doc = t.provenance.ref.split(":")[:2]
      assert doc in q.candidate_doc_ids and kind in ("MMQA_images", "MMQA_texts", "MMQA_tables")
  table_q = by_type["TableQ"]
  table = data.tables[table_q.table_id]
  cells = {(t.subject, t.relation, t.object) for t in
           mmqa.question_triples(table_q, data) if t.source == "table"}
  assert (table.title, "has table", table.name) in cells
  assert (table.rows[6][0], table.header[1], table.rows[6][1]) in cells
  text_q = by_type["TextQ"]
  says = [t for t in mmqa.question_triples(text_q, data) if t.source == "text"]
  assert says and all(t.relation == "says" for t in says)
  assert any("2000" in t.object for t in says)  # the answer is in the document itself
  # the real dev sample: image metadata only
  sample = mmqa.MMQA.load(DATA / "mmqa_dev", "dev")
  for q in sample.questions:
    assert {t.source for t in mmqa.question_triples(q, sample)} <= {"scene"}


def test_run_on_the_committed_dev_sample(tmp_path):
  config = tiny.get_config()
  config.model.max_seq_len = 1024
  config.model.arch.max_position_embeddings = 1024
  out = tmp_path / "benchmark.json"
  result = mmqa_rows.run(DATA / "mmqa_dev", 2, config=config, heads=None,
                              modes=["flat_rag", "no_retrieval"], batch_size=2, out=out,
                              log=lambda *_: None)
  assert out.exists() and result["answered"] == result["num_questions"] == 2
  assert result["documents"] == {"images": 122, "texts": 0, "tables": 0}
  assert {"MMQA_texts", "MMQA_tables"} <= set(result["not_available"])
  assert any("pixels" in x for x in result["not_available"])
  sample = mmqa.MMQA.load(DATA / "mmqa_dev", "dev")
  with_docs = [q for q in sample.questions if mmqa.question_triples(q, sample)]
  golds = [q.answer_texts for q in mmqa_rows.sample(with_docs, 2)]
  for mode, r in result["modes"].items():
    want = answers.mean_answer_metrics(r["texts"], golds)
    assert (r["em"], r["f1"], r["count"]) == (want["em"], want["f1"], 2), mode
