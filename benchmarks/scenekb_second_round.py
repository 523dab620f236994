"""What the interleaved second retrieval round changes in the subgraph GraphLoom reads, on the
questions of a SceneKB row (the "-interleaved" component row compares answers; this compares
the evidence).

  python -m benchmarks.scenekb_second_round --root=runs/scenekb_v3 --num_examples=100 \
    --out=benchmarks/results/scenekb_v3/second_round.json

For each question: the retrieved subgraph with the configured second round and with none
(`retrieval.second_round="none"`), both ranked as GraphLoom ranks them (by the question's
score); where in the ranking the two first differ, how many triples each has that the other
lacks, and the gold supporting triples each holds in its top 5 and overall. Prints the totals
and writes them with the per-question figures.
"""

import json
import pathlib
import statistics

from absl import app, flags

from graphloom_jax import atomic
from graphloom_jax.configs import smollm2
from graphloom_jax.data import scenekb
from graphloom_jax.evaluation import scenekb_rows as rows_lib

_ROOT = flags.DEFINE_string("root", None, "benchmark folder (build_benchmark --out)",
                            required=True)
_SPLIT = flags.DEFINE_enum("split", "test", ["test", "validation"], "split")
_NUM = flags.DEFINE_integer("num_examples", 100, "questions (round-robin over families, as the "
                            "rows take them)")
_OUT = flags.DEFINE_string("out", None, "JSON to write", required=True)


def compare(with_round: list, without: list, gold: set) -> dict:
  """One question's two subgraphs (triple keys, ranked) compared."""
  first_diff = next((i for i, (a, b) in enumerate(zip(with_round, without)) if a != b),
                    min(len(with_round), len(without)))
  a, b = set(with_round), set(without)
  return {"size": [len(with_round), len(without)], "first_difference": first_diff,
          "only_with_round": len(a - b), "only_without": len(b - a),
          "gold_top5": [len(gold & set(with_round[:5])), len(gold & set(without[:5]))],
          "gold_all": [len(gold & a), len(gold & b)], "gold": len(gold)}


def main(argv):
  del argv
  root = pathlib.Path(_ROOT.value)
  kb = scenekb.load(_SPLIT.value, root=root)
  questions = scenekb.round_robin(kb.questions, _NUM.value)
  base = smollm2.get_config()
  system = rows_lib.base_system(base, None, root)
  plain = rows_lib.variant(system, rows_lib.configured(base, {"retrieval.second_round": "none"}),
                           None)
  rows = []
  for q in questions:
    i = q.extra["instance_id"]
    graph = system.instance_graph(kb.scene_graph(i), instance_id=i)
    ranked = [[t.key() for t in s.prepare([q.question], [graph])[0].subgraph.edges]
              for s in (system, plain)]
    gold = {tuple(t) for t in q.extra["gold_triples"]}
    rows.append({"qid": q.qid, "family": q.family, **compare(*ranked, gold)})
  n = len(rows)
  changed = [r for r in rows if r["only_with_round"]]
  summary = {
      "questions": n, "second_round": base.retrieval.second_round,
      "n_max": base.retrieval.n_max, "seeds": base.retrieval.seeds,
      "subgraphs_that_differ": len(changed),
      "first_difference_min": min((r["first_difference"] for r in changed), default=None),
      "first_difference_median": (statistics.median(r["first_difference"] for r in changed)
                                  if changed else None),
      "triples_swapped_mean": (statistics.mean(r["only_with_round"] for r in changed)
                               if changed else 0.0),
      "gold_top5": [sum(r["gold_top5"][k] for r in rows) for k in (0, 1)],
      "gold_all": [sum(r["gold_all"][k] for r in rows) for k in (0, 1)],
      "gold": sum(r["gold"] for r in rows)}
  out = pathlib.Path(_OUT.value)
  out.parent.mkdir(parents=True, exist_ok=True)
  atomic.atomic_write_text(out, json.dumps({"summary": summary, "questions": rows}, indent=1)
                           + "\n")
  print(json.dumps(summary, indent=1))


if __name__ == "__main__":
  app.run(main)
