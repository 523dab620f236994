"""GraphLoom vs Flat-RAG vs no retrieval on MMQA dev (benchmarks/graphloom_mmqa.py is the command
line): every mode through `GraphLoom.answer_batch` over each question's instance graph
(`data.mmqa.question_triples`), scored with the official MultimodalQA EM / F1
(evaluation/answers.py). Questions whose candidate documents are all absent from the folder have
no graph and are left out of the sample (and counted).
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import time

import numpy as np
from absl import logging

from graphloom_jax.data import mmqa
from graphloom_jax.evaluation import answers, sharded
from graphloom_jax.pipeline import MODES, GraphLoom


def sample(questions, n: int) -> list:
  """The first n questions in the order of the SHA-1 of their qid (a fixed pseudo-random
  sample of the split)."""
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
  """The system to answer with and its description: the embedded default (config None), or
  the config's decoder with `heads` (a folder or "random")."""
  if config is None:
    return GraphLoom.from_pretrained("embedded"), "embedded (SmolLM2-135M-Instruct + shipped heads)"
  return (sharded.build_system(config, heads, "graphloom" if heads else "no_retrieval"),
          f"{config.model.weights} decoder, heads {heads}")


def _scores(texts, golds) -> dict:
  m = answers.mean_answer_metrics(texts, golds)
  return {"em": m["em"], "f1": m["f1"], "count": m["count"]}


def _summarise(result: dict, questions, t0: float, out) -> None:
  """Scores of the answers so far into `result` (and the file `out`, when given)."""
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


def run(folder, num_questions: int, config=None, heads=None, modes=MODES, batch_size: int = 8,
        text_sentences: int = 8, table_rows: int = 30, out=None, log=logging.info) -> dict:
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
  triples = {q.qid: mmqa.question_triples(q, data, text_sentences, table_rows)
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
    _summarise(result, questions, t0, out)
    log(f"{s + len(qs)}/{len(questions)} questions, {time.time() - t0:.0f}s, load "
        f"{os.getloadavg()[0]:.1f}: " + ", ".join(
            f"{m} EM {r['em']:.1f} F1 {r['f1']:.1f}" for m, r in result["modes"].items()))
  _summarise(result, questions, t0, out)
  return result
