"""The non-learned baselines on PathQuestion and WorldCup2014 (graph/path_reader.py): Hits@1 of
each reader on every dataset's validation and test split under both split protocols, with 95%
bootstrap intervals, the split statistics (how much of a test path train already holds), and
the published results beside them (`ANCHORS`). benchmarks/pathqa_tables.py is the command line;
docs/pathqa.md defines the splits and readers.
"""

from __future__ import annotations

import time

import numpy as np

from graphloom_jax.data import pathqa
from graphloom_jax.evaluation import intervals
from graphloom_jax.graph.path_reader import READERS, PathReader


# Published Hits@1, as collected by the KGQA leaderboard (github.com/KGQA/leaderboard,
# freebase/path_question.md), with who reported each figure. All use random splits by line.
ANCHORS = {
    "PQ-2H": [("QAGCN", 98.5, "Wang et al. 2022, arXiv:2206.01818"),
              ("SRN", 96.3, "Wang et al. 2022"), ("IRN", 91.9, "Wang et al. 2022"),
              ("MINERVA", 75.9, "Wang et al. 2022")],
    "PQ-3H": [("QAGCN", 90.6, "Wang et al. 2022"), ("SRN", 89.2, "Wang et al. 2022"),
              ("IRN", 83.3, "Wang et al. 2022"), ("MINERVA", 71.2, "Wang et al. 2022")],
    "PQL-2H": [("Edge-aware GNN", 85.6, "Zhang 2022, Comput. Intell. Neurosci. 4734179"),
               ("IRN", 72.5, "Zhang 2022"), ("KV-MemNN", 62.2, "Zhang 2022")],
    "PQL-3H": [("GlobalGraph", 94.1, "Zhang 2022"), ("IRN", 71.0, "Zhang 2022"),
               ("KV-MemNN", 67.4, "Zhang 2022")],
}


def split_statistics(ds: pathqa.PathQA, protocol: str) -> dict:
  """How much of each test question train already holds: the same path, every fact of its
  path, its answer."""
  train, test = ds.split("train", protocol), ds.split("test", protocol)
  paths = {q.paths for q in train}
  facts = {f for q in train for f in q.path_facts()}
  answers = {a for q in train for a in q.answer_ids}
  n = len(test)
  share = lambda k: round(100 * k / n, 1) if n else None  # noqa: E731
  return {
      "questions": {s: len(ds.split(s, protocol)) for s in pathqa.SPLITS},
      "paths": {s: len({q.paths for q in ds.split(s, protocol)}) for s in pathqa.SPLITS},
      "test_path_in_train": share(sum(q.paths in paths for q in test)),
      "test_facts_all_in_train_paths": share(
          sum(all(f in facts for f in q.path_facts()) for q in test)),
      "test_answer_is_a_train_answer": share(sum(q.answer_ids[0] in answers for q in test)),
  }


def evaluate(ds: pathqa.PathQA, resamples: int) -> dict:
  out = {"kb_facts": len(ds.kb), "questions": len(ds.questions), "protocols": {}}
  for protocol in pathqa.PROTOCOLS:
    start = time.perf_counter()
    reader = PathReader(ds.kb).fit(ds.split("train", protocol))
    entry = {"statistics": split_statistics(ds, protocol), "readers": {}}
    for split in ("validation", "test"):
      questions = ds.split(split, protocol)
      if not questions:  # small files can leave a split empty
        continue
      for name in READERS:
        hits = np.array([100.0 * (reader.read(q, name).answer in q.answer_ids)
                         for q in questions])
        lo, hi = intervals.bootstrap_interval(hits, resamples)
        entry["readers"].setdefault(name, {})[split] = {
            "hits_at_1": round(float(hits.mean()), 1), "lo": round(lo, 1), "hi": round(hi, 1),
            "questions": len(questions)}
    entry["seconds"] = round(time.perf_counter() - start, 2)
    out["protocols"][protocol] = entry
  return out


def report(results: dict) -> str:
  lines = ["# PathQuestion and WorldCup2014: non-learned baselines", "",
           "Hits@1 on test [95% bootstrap interval over questions] (validation in parentheses).",
           "Written by `python -m benchmarks.pathqa_tables`; readers: "
           "`graphloom_jax/graph/path_reader.py`; splits: `graphloom_jax/data/pathqa.py`.", "",
           "| dataset | split protocol | test q | oracle path | lexicon (naive Bayes) | "
           "answer prior | topic entity | one hop | published (line split) |",
           "|---|---|---|---|---|---|---|---|---|"]
  for name, r in results.items():
    for protocol, e in r["protocols"].items():
      cells = []
      if "test" not in e["readers"].get("oracle", {}):
        continue
      for reader in READERS:
        t = e["readers"][reader]["test"]
        v = e["readers"][reader].get("validation", {"hits_at_1": float("nan")})
        cells.append(f"{t['hits_at_1']:.1f} [{t['lo']:.1f}, {t['hi']:.1f}] "
                     f"({v['hits_at_1']:.1f})")
      anchors = ", ".join(f"{m} {x}" for m, x, _ in ANCHORS.get(name, [])) \
          if protocol == "line" else ""
      label = "by path" if protocol == "path" else "random by line (published)"
      lines.append(f"| {name} | {label} | {e['readers']['oracle']['test']['questions']} | "
                   + " | ".join(cells) + f" | {anchors or '-'} |")
  lines += ["", "## Split statistics (test questions)", "",
            "| dataset | protocol | questions train/val/test | paths train/val/test | "
            "same path in train | every path fact in train paths | answer seen in train |",
            "|---|---|---|---|---|---|---|"]
  for name, r in results.items():
    for protocol, e in r["protocols"].items():
      s = e["statistics"]
      q = "/".join(str(s["questions"][x]) for x in pathqa.SPLITS)
      p = "/".join(str(s["paths"][x]) for x in pathqa.SPLITS)
      lines.append(f"| {name} | {protocol} | {q} | {p} | {s['test_path_in_train']} | "
                   f"{s['test_facts_all_in_train_paths']} | {s['test_answer_is_a_train_answer']} |")
  lines += ["", "## Sources of the published figures", ""]
  for name, rows in ANCHORS.items():
    lines.append(f"- {name}: " + "; ".join(f"{m} {x} ({src})" for m, x, src in rows))
  return "\n".join(lines) + "\n"
