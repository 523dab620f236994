"""The scalability setting on PathQuestion / WorldCup2014 (docs/pathqa.md): the scored questions'
instance graphs mixed with distractor triples into one pool of N rows, embedded once, indexed,
and each question retrieved from the whole pool.

- Instance rows: the union of the scored questions' instance graphs (`PathQA.instance_triples`),
  one row per distinct fact key.
- Distractors (`distractors`): every fact of the given KBs (the release's other KBs, the
  WordNet facts of `graph.kb.wordnet_facts`) whose key is not an instance row, deduplicated,
  in a fixed shuffled order; tier N keeps the first N - (instance rows) of them.
- Scores per question (`retrieval_scores`), the gold triples being the answer path's hops:
  Recall@5 (share of the gold triples in the top 5), MRR@10 (1 / rank of the first gold triple
  in the top 10, 0 when none) and Hits@1 (the top triple is a gold triple); a retrieved row is a
  hit when its fact key equals a gold triple's.
- Answers from the pool (`answer_report`): a system's answer records (`evaluation.pathqa_rows`)
  per pool, each pool's Hits@1 paired with the same seeds' run on the questions' own instance
  graphs; online seconds are every stage after the instance graph, retrieval seconds the
  question's embedding, seeds, expansion and second round.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import time
from typing import Iterable, Sequence

import numpy as np

from graphloom_jax.evaluation import pathqa_rows
from graphloom_jax.evaluation.retrieval_metrics import recall_at_k, reciprocal_rank
from graphloom_jax.graph.triples import Triple


def instance_rows(ds, questions) -> list[Triple]:
  """The distinct facts (by key) of the questions' instance graphs, first seen first."""
  rows = {}
  for q in questions:
    for t in ds.instance_triples(q):
      rows.setdefault(t.key(), t)
  return list(rows.values())


def distractors(sources: Iterable[Sequence[Triple]], exclude: set, seed: int = 0
                ) -> list[Triple]:
  """The facts of `sources` whose key is not in `exclude`, one per key (the first source's
  triple wins), in an order shuffled with `seed` from the keys' sorted order (stable under the
  sources' own order)."""
  seen = {}
  for source in sources:
    for t in source:
      if t.key() not in exclude:
        seen.setdefault(t.key(), t)
  keys = sorted(seen)
  order = np.random.default_rng(seed).permutation(len(keys))
  return [seen[keys[i]] for i in order]


def pool(instance: Sequence[Triple], extra: Sequence[Triple], size: int) -> list[Triple]:
  """The tier of `size` rows: every instance row, then the first distractors up to `size`."""
  if size < len(instance):
    raise ValueError(f"a pool of {size} rows cannot hold the {len(instance)} instance rows")
  if size - len(instance) > len(extra):
    raise ValueError(f"a pool of {size} rows needs {size - len(instance)} distractors, "
                     f"{len(extra)} are available")
  return list(instance) + list(extra[:size - len(instance)])


def retrieval_scores(ranked_keys: Sequence[Sequence], gold_keys: Sequence[set]) -> dict:
  """Mean Recall@5, MRR@10 and Hits@1 (in percent) over questions, from each question's ranked
  fact keys (best first, at least 10 when the pool has them) and its gold keys."""
  r5, mrr, hits = [], [], []
  for ranked, gold in zip(ranked_keys, gold_keys, strict=True):
    r5.append(recall_at_k(list(ranked), gold, 5))
    mrr.append(reciprocal_rank(list(ranked)[:10], gold))
    hits.append(float(bool(ranked) and ranked[0] in gold))
  return {"recall5": 100.0 * float(np.mean(r5)), "mrr10": 100.0 * float(np.mean(mrr)),
          "hits1": 100.0 * float(np.mean(hits)), "questions": len(r5)}


def search_all(index, rows: Sequence[Triple], query_vectors: np.ndarray, k: int = 10
               ) -> tuple[list[list], float, float]:
  """Each query's top-k fact keys from `index` (ids = row numbers of `rows`), with the seconds
  per query of one batched call and the median of one query at a time (after one warm-up call
  of each shape: compilation is not search time)."""
  index.search(query_vectors, k)
  index.search(query_vectors[:1], k)
  t0 = time.perf_counter()
  ids, _ = index.search(query_vectors, k)
  batched = (time.perf_counter() - t0) / max(1, len(query_vectors))
  single = []
  for q in query_vectors:
    t0 = time.perf_counter()
    index.search(q[None], k)
    single.append(time.perf_counter() - t0)
  ranked = [[rows[i].key() for i in row if i >= 0] for row in ids]
  return ranked, batched, float(np.median(single)) if single else 0.0


def _pool_order(name: str) -> tuple:
  return (0, 0) if name == "instance" else (1, int(name))


def answer_report(folder) -> list[str]:
  """Markdown lines: per answering row and pool (folder/<pool>/seed<s>/<row>.json, pool
  "instance" or a size), the mean over seeds of Hits@1 / EM / F1 / R@5, the median online and
  retrieval seconds per question, and the paired difference in Hits@1 against the own-graph
  run [95% bootstrap interval over questions, each question's Hits@1 averaged over the seeds
  both runs have]."""
  runs: dict[str, dict[str, dict[int, dict]]] = {}
  for p in sorted(pathlib.Path(folder).glob("*/seed*/*.json")):
    r = json.loads(p.read_text())
    runs.setdefault(r["row"], {}).setdefault(r["pool"], {})[r["seed"]] = r
  lines = ["## Answers from the pool", "",
           "Hits@1 / EM / F1 / R@5 in points (mean over seeds); seconds: median per question; "
           "Δ: paired difference in Hits@1 against the same row on the questions' own instance "
           "graphs [95% bootstrap interval over questions].", "",
           "| row | pool | seeds | Hits@1 | EM | F1 | R@5 | online s | retrieval ms | Δ Hits@1 |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for row, pools in runs.items():
    own = pools.get("instance", {})
    for name in sorted(pools, key=_pool_order):
      by_seed = pools[name]
      recs = [x for r in by_seed.values() for x in r["records"]]
      mean = lambda k: np.mean([x[k] for x in recs if x.get(k) is not None])  # noqa: E731
      ret = [x["retrieval_seconds"] for x in recs if x.get("retrieval_seconds") is not None]
      delta = "-"
      if name != "instance" and own:
        d = pathqa_rows.seed_paired(list(by_seed.values()), list(own.values()))
        if d is not None:
          delta = f"{d['delta']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}]"
      label = "own instance graph" if name == "instance" else f"{int(name):,}"
      lines.append(
          f"| {row} | {label} | {len(by_seed)} | {mean('hits'):.1f} | {mean('em'):.1f} | "
          f"{mean('f1'):.1f} | {mean('recall5'):.1f} | "
          f"{statistics.median(x['seconds'] for x in recs):.2f} | "
          f"{1e3 * statistics.median(ret) if ret else float('nan'):.1f} | {delta} |")
  return lines

