r"""How much the covered evidence alone points to the missing last hop of an answer path
(benchmarks/results/grail_paths/README.md): in the raw embedder space, the cosine of the missing
fact with the last covered fact against a random pool fact, and R@k of the missing fact ranked
by the last covered fact alone against ranked by the question (covered facts skipped).

  python -m benchmarks.grail_paths_context --pathqa_dir=DIR \
      --configs=PQ-2H,PQ-3H,PQL-2H,PQL-3H --cache_dir=runs/grail/emb
"""

import numpy as np
from absl import app, flags

from graphloom_jax.data import grail_sets
from graphloom_jax.models import load_embedder
from graphloom_jax.retrieval import grail_data

_DATA = flags.DEFINE_enum("data", "pathquestion", list(grail_sets.PATH_READERS), "data set")
_DIR = flags.DEFINE_string("pathqa_dir", None, "the release folder", required=True)
_CONFIGS = flags.DEFINE_string("configs", "PQ-2H,PQ-3H,PQL-2H,PQL-3H", "datasets")
_CACHE = flags.DEFINE_string("cache_dir", "", "embedding cache folder")
_SPLIT = flags.DEFINE_string("split", "test", "split")


def main(argv):
  del argv
  es = grail_sets.load_evidence_set(_DATA.value, pathqa_dir=_DIR.value,
                                    pathqa_configs=_CONFIGS.value)
  emb = es.embed(load_embedder(None), _CACHE.value or None)
  inst = grail_data.completion_instances(es, es.select([_SPLIT.value]), 8)
  pool = emb.pool
  rng = np.random.default_rng(0)
  by_ctx, by_q, cos_miss, cos_rand = [], [], [], []
  for qi, ctx, miss in zip(inst.question, inst.context, inst.missing):
    covered = ctx[ctx >= 0]
    for ranks, query in ((by_ctx, pool[covered[-1]]), (by_q, emb.questions[qi])):
      s = pool @ query
      s[covered] = -np.inf
      ranks.append(1 + int((s > s[miss]).sum()))
    cos_miss.append(float(pool[miss] @ pool[covered[-1]]))
    cos_rand.append(float(pool[rng.integers(len(pool))] @ pool[covered[-1]]))
  by_ctx, by_q = np.asarray(by_ctx), np.asarray(by_q)
  print(f"{es.name} {_SPLIT.value}: {len(inst)} instances, pool {len(pool)}")
  print(f"cosine(missing, last covered) {np.mean(cos_miss):.3f}; "
        f"cosine(random pool fact, last covered) {np.mean(cos_rand):.3f}")
  for k in (1, 5, 20):
    print(f"R@{k}: ranked by the last covered fact {100 * np.mean(by_ctx <= k):.1f}, "
          f"by the question {100 * np.mean(by_q <= k):.1f}")


if __name__ == "__main__":
  app.run(main)
