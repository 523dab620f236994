"""GraphLoom vs Flat-RAG vs no retrieval on MMQA dev, all three through `GraphLoom.answer_batch`,
scored with the official MultimodalQA EM / F1 (graphloom_jax.evaluation.answers).

  python -m benchmarks.graphloom_mmqa --mmqa_dir=FOLDER --num_examples=60
  python -m benchmarks.graphloom_mmqa --mmqa_dir=FOLDER --config=configs/tiny.py --heads=random

FOLDER holds the official files: MMQA_dev.jsonl(.gz) and whichever of MMQA_images, MMQA_texts
and MMQA_tables (.jsonl or .jsonl.gz) are available. The default model is
`GraphLoom.from_pretrained("embedded")` (SmolLM2-135M-Instruct, MiniLM, the shipped heads);
with --config the decoder is the config's and --heads a folder or "random".

Instance graph of a question (one per question: MMQA's candidate documents are per question),
from the documents of the folder the question lists (`question_triples`):
  images   "image k depicts TITLE" for the k-th candidate image: its Wikipedia title from
           MMQA_images (the pixels are not part of the release files)
  texts    "TITLE says SENTENCE" for the first `--text_sentences` sentences of each candidate
           text (MMQA_texts, when present)
  tables   "ROW KEY COLUMN CELL" for every cell of the first `--table_rows` rows (the row key is
           the key column's cell, else the first cell), and "TITLE has table NAME" (MMQA_tables,
           when present)
Nothing from the answers (no text_instances, table indices, intermediate answers or answer
entities) enters a graph. Retrieval is the pipeline's bounded retrieval (K seeds, 2 hops, d_max,
N_max, the configured second round) and corrective retrieval over that graph. Questions whose
candidate documents are all absent from the folder have no graph; they are left out of the
sample (and counted).

The sample: `--num_examples` dev questions in the order of the SHA-1 of their qid (a fixed
pseudo-random sample of the whole split). Answers are scored as one span each (the official
scorer aligns it with the best gold span of list questions). Per mode: EM, F1, the share of
answers the verifier supports, and EM / F1 per question family; results go to --output as the
batches finish.
"""

import collections
import hashlib
import json
import os
import pathlib
import re
import time

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from graphloom_jax.data import mmqa
from graphloom_jax.evaluation import answers
from graphloom_jax.graph.triples import Provenance, Triple
from graphloom_jax.pipeline import MODES


def _define_flags():
  """The command line's flags, defined only when this file runs as a script: importing it
  (tests do) defines none, so it never collides with other modules' flags."""
  global _CONFIG, _MMQA_DIR, _NUM, _HEADS, _MODES, _BATCH, _SENTENCES, _ROWS, _OUT
  _CONFIG = config_flags.DEFINE_config_file("config", None, "configuration (default: the shipped "
                                            "model, GraphLoom.from_pretrained('embedded'))")
  _MMQA_DIR = flags.DEFINE_string("mmqa_dir", None, "folder with the official MMQA files "
                                  "(MMQA_dev.jsonl(.gz), MMQA_images, and MMQA_texts / "
                                  "MMQA_tables when available)")
  _NUM = flags.DEFINE_integer("num_examples", 60, "dev questions (a fixed pseudo-random sample)")
  flags.DEFINE_alias("num_questions", "num_examples")
  _HEADS = flags.DEFINE_string("heads", None, "with --config: a heads folder or 'random'")
  _MODES = flags.DEFINE_list("modes", list(MODES), "conditions to run")
  _BATCH = flags.DEFINE_integer("batch_size", 8, "questions answered together")
  _SENTENCES = flags.DEFINE_integer("text_sentences", 8, "sentences per text document")
  _ROWS = flags.DEFINE_integer("table_rows", 30, "rows per table")
  _OUT = flags.DEFINE_string("output", "runs/graphloom_mmqa/benchmark.json", "results (JSON)")
  flags.DEFINE_alias("out", "output")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _clean(text: str) -> str:
  return " ".join(str(text).split())


def question_triples(q: mmqa.Question, data: mmqa.MMQA, text_sentences: int = 8,
                     table_rows: int = 30) -> list[Triple]:
  """The triples of q's candidate documents that `data` holds (see the module docstring)."""
  out = []
  for k, doc in enumerate(q.image_doc_ids):
    image = data.images.get(doc)
    if image is not None and _clean(image.title):
      out.append(Triple(f"image {k + 1}", "depicts", _clean(image.title), source="scene",
                        provenance=Provenance(instance=q.qid, ref=f"MMQA_images:{doc}")))
  for doc in q.text_doc_ids:
    text = data.texts.get(doc)
    if text is None or not _clean(text.title):
      continue
    sentences = [s for s in (_clean(x) for x in _SENTENCE_END.split(text.text)) if s]
    for s in sentences[:text_sentences]:
      out.append(Triple(_clean(text.title), "says", s, source="text",
                        provenance=Provenance(instance=q.qid, ref=f"MMQA_texts:{doc}")))
  table = data.tables.get(q.table_id) if q.table_id else None
  if table is not None:
    title = _clean(table.title) or "the table"
    if _clean(table.name):
      out.append(Triple(title, "has table", _clean(table.name), source="table",
                        provenance=Provenance(instance=q.qid, ref=f"MMQA_tables:{table.id}")))
    key = _key_column(table)
    for r, row in enumerate(table.rows[:table_rows]):
      subject = _clean(row[key]) if key < len(row) else ""
      subject = subject or f"row {r + 1} of {title}"
      for c, cell in enumerate(row):
        cell = _clean(cell)
        if c == key or not cell or c >= len(table.header) or not _clean(table.header[c]):
          continue
        out.append(Triple(subject, _clean(table.header[c]), cell, source="table",
                          provenance=Provenance(instance=q.qid,
                                                ref=f"MMQA_tables:{table.id}:{r},{c}")))
  return out


def _key_column(table: mmqa.TableDoc) -> int:
  for c, col in enumerate(table.raw.get("table", {}).get("header", [])):
    if isinstance(col, dict) and col.get("metadata", {}).get("is_key_column"):
      return c
  return 0


def sample(questions, n: int) -> list:
  return sorted(questions, key=lambda q: hashlib.sha1(q.qid.encode()).hexdigest())[:n]


def availability(data: mmqa.MMQA, folder) -> dict:
  """What the folder holds offline, and what MMQA has that is not here."""
  have = {name: len(getattr(data, name)) for name in ("images", "texts", "tables")}
  missing = [f"MMQA_{name}" for name, n in have.items() if n == 0]
  missing.append("image pixels (MMQA_images lists file names; the images are not in the "
                 "release's JSONL files)")
  if mmqa.find_file(folder, "MMQA_train") is None:
    missing.append("MMQA_train")
  return {"documents": have, "not_available": missing}


def build_system(config, heads):
  from graphloom_jax.evaluation import sharded
  from graphloom_jax.pipeline import GraphLoom
  if config is None:
    return GraphLoom.from_pretrained("embedded"), "embedded (SmolLM2-135M-Instruct + shipped heads)"
  return (sharded.build_system(config, heads, "graphloom" if heads else "no_retrieval"),
          f"{config.model.weights} decoder, heads {heads}")


def _scores(texts, golds) -> dict:
  m = answers.mean_answer_metrics(texts, golds)
  return {"em": m["em"], "f1": m["f1"], "count": m["count"]}


def run(folder, num_questions: int, config=None, heads=None, modes=MODES, batch_size: int = 8,
        text_sentences: int = 8, table_rows: int = 30, out=None, log=print) -> dict:
  """The benchmark (see the module docstring); returns (and writes to `out`) the results."""
  if not folder:
    raise ValueError("--mmqa_dir is required: the folder with the official MMQA_dev.jsonl(.gz) "
                     "and MMQA_images.jsonl(.gz) (texts and tables when available)")
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise ValueError(f"--mmqa_dir={folder}: not a folder")
  for mode in modes:
    if mode not in MODES:
      raise ValueError(f"mode {mode!r}; expected some of {MODES}")
  t0 = time.time()
  data = mmqa.MMQA.load(folder, "dev")
  triples = {q.qid: question_triples(q, data, text_sentences, table_rows)
             for q in data.questions}
  with_docs = [q for q in data.questions if triples[q.qid]]
  questions = sample(with_docs, num_questions)
  system, model = build_system(config, heads)
  log(f"MMQA dev: {len(data.questions)} questions, {len(with_docs)} with offline documents; "
      f"{len(questions)} sampled; model {model}; loaded in {time.time() - t0:.0f}s")
  result = {"mmqa_dir": str(folder), "model": model,
            "dev_questions": len(data.questions),
            "questions_without_offline_documents": len(data.questions) - len(with_docs),
            "num_questions": len(questions), **availability(data, folder),
            "triples_per_question": float(np.mean([len(triples[q.qid]) for q in questions])),
            "triple_sources": dict(collections.Counter(
                t.source for q in questions for t in triples[q.qid])),
            "families": dict(collections.Counter(q.family for q in questions)),  # sampled
            "modes": {m: {"texts": [], "supported": [], "seconds": 0.0} for m in modes}}

  def summary():
    golds = [q.answer_texts for q in questions]
    for mode, r in result["modes"].items():
      n = len(r["texts"])
      if n == 0:
        continue
      r.update(_scores(r["texts"], golds[:n]))
      r["supported_share"] = 100 * float(np.mean(r["supported"]))
      by = collections.defaultdict(list)
      for q, text in zip(questions, r["texts"]):
        by[q.family].append((text, q.answer_texts))
      r["by_family"] = {f: _scores(*zip(*pairs)) for f, pairs in sorted(by.items())}
    result["answered"] = min(len(r["texts"]) for r in result["modes"].values())
    result["load_average"] = os.getloadavg()
    result["seconds"] = time.time() - t0
    if out is not None:
      path = pathlib.Path(out)
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(json.dumps(result, indent=1))

  graphs = {}
  for s in range(0, len(questions), batch_size):
    qs = questions[s:s + batch_size]
    for q in qs:
      graphs[q.qid] = system.instance_graph(triples[q.qid], instance_id=q.qid)
    for mode in modes:
      t1 = time.time()
      got = system.answer_batch([q.question for q in qs], [graphs[q.qid] for q in qs],
                                mode=mode)
      r = result["modes"][mode]
      r["seconds"] += time.time() - t1
      r["texts"] += [a.text for a in got]
      r["supported"] += [bool(a.supported) for a in got]
    summary()
    log(f"{s + len(qs)}/{len(questions)} questions, {time.time() - t0:.0f}s, load "
        f"{os.getloadavg()[0]:.1f}: " + ", ".join(
            f"{m} EM {r['em']:.1f} F1 {r['f1']:.1f}" for m, r in result["modes"].items()))
  summary()
  return result


def main(argv):
  del argv
  config = _CONFIG.value
  if config is None and _HEADS.value:
    raise app.UsageError("--heads needs --config (the default model has its shipped heads)")
  try:
    result = run(_MMQA_DIR.value, _NUM.value, config=config, heads=_HEADS.value,
                 modes=_MODES.value, batch_size=_BATCH.value, text_sentences=_SENTENCES.value,
                 table_rows=_ROWS.value, out=_OUT.value)
  except (ValueError, FileNotFoundError) as e:
    raise app.UsageError(str(e)) from None
  print(f"\nMMQA dev, {result['num_questions']} questions, {result['model']}")
  print(f"{'mode':13s} {'EM':>6s} {'F1':>6s} {'supported':>9s}")
  for mode, r in result["modes"].items():
    print(f"{mode:13s} {r['em']:6.1f} {r['f1']:6.1f} {r['supported_share']:8.1f}%")
  print(f"load average {result['load_average']}; wrote {_OUT.value}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
