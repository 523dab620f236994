"""Per-query latency of GRAIL steering against plain query search (the reference), one query at
a time as an online retriever sees them.

  python benchmarks/bench_grail_steering.py [--pools=3513,59143,200000] [--queries=200]

For each pool size P (the defaults are SceneKB's and MMQA's pools and a larger one) and each
method: the median milliseconds of steering alone and of steering + exact top-20 search, and
the ratio of the method's total to Query-only's. Vectors are random unit rows (latency does not
depend on their content); E = 8 context items; the selector of Hybrid is random too.
"""

import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from graphloom_jax.retrieval import grail

_POOLS = flags.DEFINE_list("pools", ["3513", "59143", "200000"], "Pool sizes P.")
_QUERIES = flags.DEFINE_integer("queries", 200, "Queries timed per (pool, method).")
_EVIDENCE = flags.DEFINE_integer("evidence", 8, "Context items per query (E).")


def _unit(rng, n, d):
  x = rng.standard_normal((n, d)).astype(np.float32)
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  cfg = grail.GrailConfig()
  params = grail.init_params(jax.random.key(0), cfg)
  f = cfg.num_features
  params["selector"] = {"mean": jnp.zeros(f), "std": jnp.ones(f),
                        "w": jnp.asarray(rng.standard_normal(f), jnp.float32),
                        "b": jnp.zeros(())}
  print(f"device: {jax.devices()[0].device_kind}; E = {_EVIDENCE.value}, top-20, "
        f"{_QUERIES.value} queries one at a time")
  print(f"{'pool P':>8s} {'method':>9s} {'steer ms':>9s} {'total ms':>9s} {'x query':>8s}")
  for p in (int(x) for x in _POOLS.value):
    pool = _unit(rng, p, cfg.dim)
    r = grail.GrailRetriever(params, cfg, pool, np.full((p,), 1, np.int32))
    q = r.encode_queries(_unit(rng, _QUERIES.value, cfg.dim))
    ctx = rng.integers(0, p, (_QUERIES.value, _EVIDENCE.value)).astype(np.int32)
    steer_t = {m: [] for m in grail.METHODS}
    total_t = {m: [] for m in grail.METHODS}
    for method in grail.METHODS:
      r.search(q[:1], ctx[:1], method, 20)  # compile
      r.steer(q[:1], ctx[:1], method).block_until_ready()
    # Methods take turns on each query so that load from other processes falls on all of them.
    for i in range(_QUERIES.value):
      for method in grail.METHODS:
        t0 = time.perf_counter()
        r.steer(q[i:i + 1], ctx[i:i + 1], method).block_until_ready()
        t1 = time.perf_counter()
        r.search(q[i:i + 1], ctx[i:i + 1], method, 20)
        t2 = time.perf_counter()
        steer_t[method].append(t1 - t0)
        total_t[method].append(t2 - t1)
    base = 1e3 * float(np.median(total_t["query"]))
    for method in grail.METHODS:
      total = 1e3 * float(np.median(total_t[method]))
      print(f"{p:8d} {method:>9s} {1e3 * float(np.median(steer_t[method])):9.3f} {total:9.3f} "
            f"{total / base:8.2f}")


if __name__ == "__main__":
  app.run(main)
