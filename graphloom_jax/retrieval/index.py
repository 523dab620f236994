"""Vector indexes over triple embeddings: exact (the recall oracle) and ScaNN (large pools).

Shapes: N pool size, D embedding width, Q queries, k neighbours, C pool chunk rows.

Both score by inner product, which is the cosine for the unit rows the embedder returns, and
both speak in external integer ids (given at construction, default 0..N-1):
`search(queries [Q, D], k) -> (ids int64 [Q, k], scores float32 [Q, k])`, best first.
`upsert(ids, vectors)` replaces the rows of known ids and appends new ones; `delete(ids)`
removes them (unknown, repeated or non-integer ids are an error, raised before anything
changes). `save(dir)` and `load_index(dir)` round-trip either kind through a folder with an
`index.json` describing it and the external ids in `ids.npy`.

Saved folders are data, never code: nothing is unpickled (ScaNN's own `serialize` pickles its id
list to `scann_docids.pkl`; we write `ids.npy` instead, load it with `allow_pickle=False` and
rebuild ScaNN's id map from it), and every asset path ScaNN's files name must resolve inside the
folder. A save builds the whole folder beside the target and swaps it in (`atomic.atomic_dir`),
so a kill leaves the previous index loadable; a save holds the index's lock, so an upsert from
another thread waits for it instead of tearing the snapshot; and `load_index` re-reads
`index.json` after loading and retries if a concurrent save replaced the folder meanwhile, so it
returns the old or the new index, never a mix.

ExactIndex runs one jitted function per (query batch, k): the pool is padded to whole chunks and
scanned chunk by chunk, keeping a running top-k, so a 1M x 384 pool never materialises a
[Q, N] score matrix (with the defaults the peak is one [256, 65536] block, 64 MiB).

ScannIndex wraps ScaNN's numpy searcher. `scann_defaults(n)` is the shipped build: brute force
below 20k rows (partitioning buys nothing there); above, a k-means tree of about sqrt(N) leaves
(trained on at most 100k rows) with anisotropic 2-dim-block hashing (threshold 0.2). How many
leaves to search and how many candidates to re-score exactly is not a fixed fraction (one tuned
on some distributions does not transfer: on wide clusters 4% of the leaves reached recall@10
0.69): the build holds 500 rows out, builds on the rest, measures recall@10 against exact search
for the held-out rows over a grid of (leaves_to_search, reorder), keeps the cheapest pair that
reaches target_recall (default 0.95) plus a 0.01 margin, then adds the held-out rows
(`ScannIndex.calibrate`, which also takes real queries and their exact answers). The pair and
the measurements are saved with the index. `benchmarks/scaling.md` reports recall and speed
against exact search at 100k, 300k and 1M on several distributions. When the leaves searched
hold fewer than k points ScaNN pads its answer; those slots come back as id -1 and score -inf.
"""

import functools
import json
import math
import pathlib
import threading
import time
import uuid
from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from graphloom_jax import atomic, optional

INDEX_FILE = "index.json"
IDS_FILE = "ids.npy"
SCANN_DIR = "scann"
SCANN_ASSETS = "scann_assets.pbtxt"
SCANN_CONFIG = "scann_config.pb"
# A concurrent save swaps the folder in two renames; a load that meets the gap retries for up to
# LOAD_RETRIES * LOAD_RETRY_S seconds before it treats the folder as left by a killed save.
LOAD_RETRIES = 20
LOAD_RETRY_S = 0.05


@runtime_checkable
class Index(Protocol):
  dim: int

  def __len__(self) -> int:
    ...

  def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    ...

  def upsert(self, ids, vectors) -> None:
    ...

  def delete(self, ids) -> None:
    ...

  def save(self, directory) -> None:
    ...


def _check_matrix(x, name: str, dim: int | None = None) -> np.ndarray:
  x = np.asarray(x)
  if x.ndim != 2:
    raise ValueError(f"{name} must be a 2-D array [rows, D], got shape {x.shape}"
                     + (" (use x[None] for a single vector)" if x.ndim == 1 else ""))
  if not np.issubdtype(x.dtype, np.floating):
    raise ValueError(f"{name} must hold floats, got dtype {x.dtype}")
  if dim is not None and x.shape[1] != dim:
    raise ValueError(f"{name} has dimension {x.shape[1]}, the index holds {dim}-dim vectors")
  x = np.ascontiguousarray(x, np.float32)
  bad = ~np.isfinite(x).all(axis=1)
  if bad.any():
    rows = np.flatnonzero(bad)
    raise ValueError(f"{name} has non-finite values (NaN/inf) in {len(rows)} row(s), first "
                     f"rows {rows[:5].tolist()}")
  return x


def _check_ids(ids, n: int | None, name: str = "ids") -> np.ndarray:
  """ids as int64 [n] (any length when n is None): integers, unique, non-negative."""
  ids = np.asarray(ids)
  if ids.ndim != 1 or (n is not None and len(ids) != n):
    raise ValueError(f"{name} must be a 1-D array of {n if n is not None else 'the'} ids, got "
                     f"shape {ids.shape}")
  if len(ids) and not np.issubdtype(ids.dtype, np.integer):
    # bools are refused too: np.bool_ is not an integer dtype, and True as id 1 hides a bug
    raise ValueError(f"{name} must be integers, got dtype {ids.dtype}")
  ids = ids.astype(np.int64)
  uniq, counts = np.unique(ids, return_counts=True)
  if (counts > 1).any():
    raise ValueError(f"{name} holds duplicates: {uniq[counts > 1][:5].tolist()}")
  if (ids < 0).any():
    raise ValueError(f"{name} must be non-negative (-1 marks missing results), got "
                     f"{ids[ids < 0][:5].tolist()}")
  return ids


def _check_delete_ids(ids, known: np.ndarray) -> np.ndarray:
  ids = _check_ids(np.asarray(ids).reshape(-1), None, "delete ids")
  unknown = np.setdiff1d(ids, known)
  if len(unknown):
    raise KeyError(f"delete: ids not in the index: {unknown[:10].tolist()}")
  return ids


def _check_k(k, size: int):
  if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
    raise ValueError(f"k must be a positive int, got {k!r}")
  if k > size:
    raise ValueError(f"k={k} exceeds the number of indexed vectors ({size})")


def _save_folder(directory) -> pathlib.Path:
  """The target of a save, refused when it is a folder of something other than an index (the
  save replaces the whole folder)."""
  directory = pathlib.Path(directory)
  if directory.exists() and not directory.is_dir():
    raise NotADirectoryError(f"cannot save an index to {directory}: it is a file")
  if directory.is_dir() and any(directory.iterdir()) and not (directory / INDEX_FILE).is_file():
    raise FileExistsError(f"refusing to save an index to {directory}: the folder holds other "
                          f"files and no {INDEX_FILE}, and a save replaces the whole folder")
  return directory


def _write_meta(directory: pathlib.Path, meta: dict):
  # save_id makes every save's index.json unique, which is how load_index notices a swap.
  meta = {**meta, "save_id": uuid.uuid4().hex}
  (directory / INDEX_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))


def _load_ids(directory: pathlib.Path, count: int) -> np.ndarray:
  path = directory / IDS_FILE
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: a saved index must hold its ids (row numbers "
                            "are never used in their place); re-save the index")
  try:
    ids = np.load(path, allow_pickle=False)
  except ValueError as e:
    raise ValueError(f"{path}: not a plain integer .npy array ({e})") from None
  try:
    return _check_ids(ids, count, str(path))
  except ValueError as e:
    raise ValueError(f"{e} ({INDEX_FILE} says count {count})") from None


@functools.partial(jax.jit, static_argnames=("k", "chunk"))
def exact_top_k(pool, n_valid, queries, *, k: int, chunk: int):
  """Top-k inner products of queries against the first n_valid pool rows.

  pool [N_pad, D] with N_pad a multiple of chunk; n_valid int32 scalar; queries [Q, D].
  Returns (scores [Q, k] float32, rows [Q, k] int32), best first; ties go to the lower row.
  """
  q = queries.shape[0]
  blocks = pool.reshape(-1, chunk, pool.shape[1])  # [N_pad / C, C, D]
  starts = jnp.arange(blocks.shape[0], dtype=jnp.int32) * chunk

  def step(carry, block_and_start):
    best_s, best_i = carry  # [Q, k] each
    block, start = block_and_start
    s = jnp.dot(queries, block.T, precision=jax.lax.Precision.HIGHEST)  # [Q, C]
    rows = start + jnp.arange(chunk, dtype=jnp.int32)
    s = jnp.where(rows[None, :] < n_valid, s, -jnp.inf)
    cs, ci = jax.lax.top_k(s, min(k, chunk))
    ms = jnp.concatenate([best_s, cs], axis=1)
    mi = jnp.concatenate([best_i, start + ci], axis=1)
    ts, ti = jax.lax.top_k(ms, k)
    return (ts, jnp.take_along_axis(mi, ti, axis=1)), None

  init = (jnp.full((q, k), -jnp.inf, jnp.float32), jnp.full((q, k), -1, jnp.int32))
  (scores, rows), _ = jax.lax.scan(step, init, (blocks, starts))
  return scores, rows


class ExactIndex:
  """Brute-force inner-product search on the default JAX device (the recall oracle)."""

  def __init__(self, vectors, ids=None, *, query_batch: int = 256, chunk: int = 65536):
    vectors = _check_matrix(vectors, "vectors")
    self.dim = vectors.shape[1]
    self.query_batch = query_batch
    self.chunk = chunk
    self._vectors = vectors.copy()  # upsert writes rows in place; never into the caller's array
    self._ids = (np.arange(len(vectors), dtype=np.int64) if ids is None
                 else _check_ids(ids, len(vectors)))
    self._pool = None
    self._lock = threading.RLock()

  def __len__(self) -> int:
    return len(self._ids)

  @property
  def ids(self) -> np.ndarray:
    return self._ids.copy()

  def _device_pool(self):
    if self._pool is None:
      # Small pools get one chunk of their own (rounded to 8 rows) instead of a mostly empty
      # 65536-row block.
      c = min(self.chunk, max(8, -(-len(self._vectors) // 8) * 8))
      n_pad = -(-max(len(self._vectors), 1) // c) * c
      padded = np.zeros((n_pad, self.dim), np.float32)
      padded[:len(self._vectors)] = self._vectors
      self._pool = (jnp.asarray(padded), c)
    return self._pool

  def search(self, queries, k: int) -> tuple[np.ndarray, np.ndarray]:
    queries = _check_matrix(queries, "queries", self.dim)
    _check_k(k, len(self))
    pool, c = self._device_pool()
    n_valid = jnp.int32(len(self))
    chunk = c if k <= c else pool.shape[0]
    scores, rows = [], []
    for s in range(0, len(queries), self.query_batch):
      qb = queries[s:s + self.query_batch]
      # Query batches are padded to powers of two so a stream of odd sizes compiles few times.
      pad = min(self.query_batch, 1 << (len(qb) - 1).bit_length()) - len(qb)
      sc, r = exact_top_k(pool, n_valid, np.pad(qb, ((0, pad), (0, 0))), k=k, chunk=chunk)
      scores.append(np.asarray(sc)[:len(qb)])
      rows.append(np.asarray(r)[:len(qb)])
    if not scores:
      return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    return self._ids[np.concatenate(rows)], np.concatenate(scores)

  def upsert(self, ids, vectors) -> None:
    vectors = _check_matrix(vectors, "vectors", self.dim)
    ids = _check_ids(ids, len(vectors))
    with self._lock:
      pos = {int(e): i for i, e in enumerate(self._ids)}
      known = np.array([int(e) in pos for e in ids], bool)
      # A new array, never in-place writes: a save snapshotting the old one stays consistent.
      updated = np.concatenate([self._vectors, vectors[~known]])
      updated[[pos[int(e)] for e in ids[known]]] = vectors[known]
      self._vectors = updated
      self._ids = np.concatenate([self._ids, ids[~known]])
      self._pool = None

  def delete(self, ids) -> None:
    with self._lock:
      ids = _check_delete_ids(ids, self._ids)
      keep = ~np.isin(self._ids, ids)
      self._vectors, self._ids = self._vectors[keep], self._ids[keep]
      self._pool = None

  def save(self, directory) -> None:
    directory = _save_folder(directory)
    with self._lock:
      vectors, ids = self._vectors, self._ids
    with atomic.atomic_dir(directory) as tmp:
      np.save(tmp / "vectors.npy", vectors)
      np.save(tmp / IDS_FILE, ids)
      _write_meta(tmp, {"kind": "exact", "dim": self.dim, "count": len(ids),
                        "query_batch": self.query_batch, "chunk": self.chunk})

  @classmethod
  def load(cls, directory) -> "ExactIndex":
    directory = pathlib.Path(directory)
    meta = _read_meta(directory, "exact")
    path = directory / "vectors.npy"
    try:
      vectors = np.load(path, allow_pickle=False)
    except ValueError as e:
      raise ValueError(f"{path}: not a plain float .npy array ({e})") from None
    if vectors.shape != (meta["count"], meta["dim"]):
      raise ValueError(f"{path}: shape {vectors.shape} disagrees with {INDEX_FILE} (count "
                       f"{meta['count']}, dim {meta['dim']})")
    return cls(_check_matrix(vectors, str(path)), _load_ids(directory, meta["count"]),
               query_batch=meta["query_batch"], chunk=meta["chunk"])


# The fixed tree search a build with target_recall=None keeps (calibrated builds replace it):
# the share of the sqrt(N) leaves searched, and the candidates
# re-scored exactly: at least REORDER_MIN, and N / REORDER_DIVISOR for big pools (more rows crowd
# the hashing's error band; re-scoring N / 2000 rows costs 1/2000 of an exact search).
# Measured with benchmarks/bench_scaling.py --clustered (benchmarks/scaling.md).
LEAVES_FRACTION = 0.04
# 4% of a 100k pool's leaves; smaller pools search at least as many (exact search is cheap
# there, and a blob of neighbours spans a bigger share of their fewer leaves).
LEAVES_MIN = 13
REORDER_MIN = 250
REORDER_DIVISOR = 2000


def scann_defaults(n: int) -> dict:
  """The shipped ScaNN settings for a pool of n vectors (see the module docstring).

  leaves_to_search and reorder are the fixed tuning a build with target_recall=None keeps; with
  the default target_recall the build replaces them by the cheapest pair that meets the target
  on held-out rows of the pool (`ScannIndex.calibrate`)."""
  if n < 20_000:
    return {"mode": "brute_force"}
  num_leaves = int(round(math.sqrt(n)))
  return {"mode": "tree_ah", "num_leaves": num_leaves,
          "leaves_to_search": max(LEAVES_MIN, int(math.ceil(LEAVES_FRACTION * num_leaves))),
          "training_sample_size": min(n, 100_000), "dims_per_block": 2,
          "quantization_threshold": 0.2,
          "reorder": max(REORDER_MIN, -(-n // REORDER_DIVISOR)),
          "target_recall": TARGET_RECALL, "calibration_queries": CALIBRATION_QUERIES}


# Calibration (ScannIndex.calibrate): recall@CALIBRATION_K against exact search for
# CALIBRATION_QUERIES pool rows held out of the build (drawn with CALIBRATION_SEED, added once
# calibrated), met with CALIBRATION_MARGIN to spare so that fresh queries meet the target
# despite the sample's error (500 queries x 10 neighbours: a standard error of about 0.003 at
# recall 0.95).
TARGET_RECALL = 0.95
CALIBRATION_QUERIES = 500
CALIBRATION_K = 10
CALIBRATION_MARGIN = 0.01
CALIBRATION_SEED = 0
# The grid searched: shares of the leaves, and re-scoring depths (capped at the pool size).
# Shares grow by 1.25x from 0.5% to all the leaves (24 steps; a binary search reads about 5).
CALIBRATION_LEAF_SHARES = tuple(min(1.0, 0.005 * 1.25 ** i) for i in range(25))
CALIBRATION_REORDERS = (100, 250, 500, 1000, 2000, 4000, 8000)
# The cost model that ranks the pairs that meet the target: a search scores
# leaves / num_leaves * N rows with the hashing and re-scores `reorder` rows exactly; scoring a
# row with 2-dim-block hashing costs AH_ROW_COST of re-scoring one (a gather of a whole row):
# 0.038 at 300k and 0.020 at 1M 384-dim rows, 1000 queries batched (benchmarks/bench_scaling.py
# --clustered --ah_cost, benchmarks/scaling.md).
AH_ROW_COST = 0.03


class ScannIndex:
  """ScaNN approximate inner-product search (host side, numpy in and out).

  options (all optional; unset ones come from `scann_defaults(len(vectors))`):
    mode: "brute_force" or "tree_ah"; num_leaves, leaves_to_search, training_sample_size
    (k-means tree); dims_per_block, quantization_threshold (anisotropic hashing); reorder
    (candidates re-scored exactly); num_threads (0 = ScaNN's choice);
    target_recall, calibration_queries: a tree build calibrates leaves_to_search and reorder
    to this recall@10 on the pool (`calibrate`); None keeps the given or default pair. Giving
    leaves_to_search or reorder turns calibration off unless target_recall is given too,
    which is an error (calibration would overwrite them).

  After a calibrated build, `calibration` says what was measured (also saved with the index);
  upserts and deletes keep the calibrated pair (call `calibrate` again after large changes).
  """

  OPTIONS = ("mode", "num_leaves", "leaves_to_search", "training_sample_size", "dims_per_block",
             "quantization_threshold", "reorder", "num_threads", "target_recall",
             "calibration_queries")

  def __init__(self, vectors, ids=None, **options):
    unknown = set(options) - set(self.OPTIONS)
    if unknown:
      raise TypeError(f"unknown ScannIndex options {sorted(unknown)}; known: {self.OPTIONS}")
    fixed = sorted({"leaves_to_search", "reorder"} & set(options))
    if fixed and options.get("target_recall") is not None:
      raise ValueError(f"target_recall calibrates leaves_to_search and reorder; give it or "
                       f"{fixed}, not both")
    vectors = _check_matrix(vectors, "vectors")
    if len(vectors) == 0:
      raise ValueError("ScannIndex needs at least one vector to build")
    ids = (np.arange(len(vectors), dtype=np.int64) if ids is None
           else _check_ids(ids, len(vectors)))
    self.dim = vectors.shape[1]
    self.options = {**scann_defaults(len(vectors)), **options}
    if fixed:
      self.options["target_recall"] = None
    target = self.options.get("target_recall")
    if target is not None and not 0.0 < target <= 1.0:
      raise ValueError(f"target_recall must be in (0, 1] or None, got {target!r}")
    self._lock = threading.RLock()
    self.calibration = None
    m = self.options.get("calibration_queries") or CALIBRATION_QUERIES
    if self.options["mode"] != "tree_ah" or target is None or len(vectors) < 4 * m:
      if target is not None and self.options["mode"] == "tree_ah":
        raise ValueError(f"calibrating on {m} held-out rows needs at least {4 * m} vectors, got "
                         f"{len(vectors)}; lower calibration_queries or set target_recall=None")
      self._searcher = self._build(vectors, ids)
      return
    # Calibrated on rows the tree and the hashing never saw: an indexed row sits inside the
    # k-means leaf fitted to it, so searching for its neighbours flatters the partition.
    self.options.setdefault("leaves_to_search", 1)  # searched per call from here on
    self.options.setdefault("reorder", REORDER_MIN)
    held = np.zeros(len(vectors), bool)
    held[np.random.default_rng(CALIBRATION_SEED).choice(len(vectors), m, replace=False)] = True
    rest = vectors[~held]
    self._searcher = self._build(rest, ids[~held])
    k = min(CALIBRATION_K, len(rest))
    self.calibrate(vectors[held], ids[~held][_exact_rows(rest, vectors[held], k)], target)
    self.upsert(ids[held], vectors[held])

  def calibrate(self, queries, exact_ids, target_recall: float = TARGET_RECALL) -> dict:
    """Sets leaves_to_search and reorder to the cheapest pair of the calibration grid whose
    recall@k (k = exact_ids' width) against `exact_ids` [Q, k] (the exact search's ids for
    `queries` [Q, D] over this index) reaches target_recall + CALIBRATION_MARGIN; cost is
    AH_ROW_COST x rows hashed + rows re-scored. When no pair of the grid reaches it, the pair
    with the best recall is kept and `calibration["met"]` is False. A build with target_recall
    calls it on calibration_queries held-out rows of the pool; call it with real queries (e.g.
    question embeddings and ExactIndex's answers) to calibrate for them. Returns (and stores in
    `calibration`, saved with the index) the target, the pair, its recall and the grid."""
    if self.options["mode"] != "tree_ah":
      raise ValueError(f"calibrate applies to mode 'tree_ah' only, this index is "
                       f"{self.options['mode']!r}")
    queries = _check_matrix(queries, "queries", self.dim)
    exact_ids = np.asarray(exact_ids)
    if exact_ids.ndim != 2 or len(exact_ids) != len(queries) or exact_ids.shape[1] < 1:
      raise ValueError(f"exact_ids must be [{len(queries)}, k] (one row per query), got shape "
                       f"{exact_ids.shape}")
    if not 0.0 < target_recall <= 1.0:
      raise ValueError(f"target_recall must be in (0, 1], got {target_recall!r}")
    t0 = time.perf_counter()
    n, leaves, k = len(self), self.options["num_leaves"], exact_ids.shape[1]

    def recall(num_leaves, reorder):
      found, _ = self._searcher.search_batched_parallel(
          queries, final_num_neighbors=k, pre_reorder_num_neighbors=max(reorder, k),
          leaves_to_search=num_leaves)
      return float(np.mean([len(set(a) & set(b)) / k
                            for a, b in zip(np.asarray(found, np.int64), exact_ids)]))

    shares = sorted({max(1, min(leaves, int(math.ceil(s * leaves))))
                     for s in CALIBRATION_LEAF_SHARES})
    reorders = sorted({min(n, max(r, k)) for r in CALIBRATION_REORDERS})
    goal = min(1.0, target_recall + CALIBRATION_MARGIN)
    measured = {}

    def cost(pair):
      return AH_ROW_COST * pair[0] / leaves * n + pair[1]

    def at(pair):
      if pair not in measured:
        measured[pair] = recall(*pair)
      return measured[pair]

    best = None
    for reorder in reorders:
      if best is not None and reorder >= cost(best):
        break  # re-scoring alone costs more than the best pair found
      if at((shares[-1], reorder)) < goal:
        continue
      lo, hi = 0, len(shares) - 1  # the fewest leaves that reach the goal (recall rises with
      while lo < hi:               # the leaves searched)
        mid = (lo + hi) // 2
        if at((shares[mid], reorder)) >= goal:
          hi = mid
        else:
          lo = mid + 1
      pair = (shares[lo], reorder)
      if best is None or cost(pair) < cost(best):
        best = pair
    met = best is not None
    if not met:
      best = max(measured, key=lambda p: (measured[p], -cost(p)))
    with self._lock:
      self.options["leaves_to_search"], self.options["reorder"] = best
      self.options["target_recall"] = target_recall
      self.calibration = {
          "target_recall": target_recall, "met": met, "recall": measured[best], "k": k,
          "queries": len(queries), "leaves_to_search": best[0], "reorder": best[1],
          "seconds": round(time.perf_counter() - t0, 3),
          "grid": [[p[0], p[1], round(r, 4)] for p, r in sorted(measured.items())]}
    return self.calibration

  def _build(self, vectors, ids):
    scann = optional.require("scann", "ScannIndex")

    o = self.options
    builder = scann.scann_ops_pybind.builder(vectors, 10, "dot_product")
    if o["mode"] == "brute_force":
      builder = builder.score_brute_force()
    elif o["mode"] == "tree_ah":
      missing = [key for key in ("num_leaves", "leaves_to_search", "training_sample_size",
                                 "dims_per_block", "quantization_threshold", "reorder")
                 if key not in o]
      if missing:
        raise ValueError(f"tree_ah mode needs options {missing} (pool of {len(vectors)} vectors "
                         "is small enough that scann_defaults chose brute force)")
      if o["num_leaves"] > len(vectors):
        raise ValueError(f"num_leaves={o['num_leaves']} exceeds the pool size {len(vectors)}")
      builder = builder.tree(
          num_leaves=o["num_leaves"], num_leaves_to_search=o["leaves_to_search"],
          training_sample_size=min(o["training_sample_size"], len(vectors)))
      builder = builder.score_ah(o["dims_per_block"],
                                 anisotropic_quantization_threshold=o["quantization_threshold"])
      builder = builder.reorder(o["reorder"])
    else:
      raise ValueError(f"mode must be 'brute_force' or 'tree_ah', got {o['mode']!r}")
    searcher = builder.build(docids=[int(i) for i in ids])
    if o.get("num_threads"):
      searcher.set_num_threads(o["num_threads"])
    return searcher

  def __len__(self) -> int:
    return self._searcher.size()

  @property
  def ids(self) -> np.ndarray:
    return np.array(self._searcher.docids, np.int64)

  def search(self, queries, k: int, *, leaves_to_search: int | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """leaves_to_search overrides the built setting for this call (tree_ah mode only)."""
    queries = _check_matrix(queries, "queries", self.dim)
    _check_k(k, len(self))
    if leaves_to_search is not None and self.options["mode"] != "tree_ah":
      raise ValueError("leaves_to_search applies to mode 'tree_ah' only, this index is "
                       f"{self.options['mode']!r}")
    if len(queries) == 0:
      return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    pre = max(k, self.options.get("reorder", k))
    if leaves_to_search is None and self.options["mode"] == "tree_ah":
      leaves_to_search = self.options["leaves_to_search"]  # calibrated after the build
    # Threads pay off only when there are enough queries to split between them.
    search = (self._searcher.search_batched_parallel if len(queries) >= 16
              else self._searcher.search_batched)
    ids, scores = search(queries, final_num_neighbors=k, pre_reorder_num_neighbors=pre,
                         leaves_to_search=leaves_to_search)
    ids, scores = np.array(ids, np.int64), np.array(scores, np.float32)
    missing = np.isnan(scores)  # ScaNN's padding when fewer than k candidates were found
    ids[missing], scores[missing] = -1, -np.inf
    return ids, scores

  def upsert(self, ids, vectors) -> None:
    vectors = _check_matrix(vectors, "vectors", self.dim)
    ids = _check_ids(ids, len(vectors))
    if len(ids):
      with self._lock:
        self._searcher.upsert([int(i) for i in ids], vectors)

  def delete(self, ids) -> None:
    with self._lock:
      # Validated in full first: ScaNN's own delete applies ids one by one, so a repeated or
      # unknown id half-applied it and desynchronised its id list from the searcher.
      ids = _check_delete_ids(ids, self.ids)
      if len(ids):
        self._searcher.delete([int(i) for i in ids])

  def save(self, directory) -> None:
    directory = _save_folder(directory)
    with self._lock, atomic.atomic_dir(directory) as tmp:
      (tmp / SCANN_DIR).mkdir()
      # The C++ searcher directly: the Python wrapper's serialize also pickles the ids.
      self._searcher.searcher.serialize(str(tmp / SCANN_DIR), True)
      np.save(tmp / IDS_FILE, self.ids)
      _write_meta(tmp, {"kind": "scann", "dim": self.dim, "count": len(self),
                        "options": self.options, "calibration": self.calibration})

  @classmethod
  def load(cls, directory) -> "ScannIndex":
    scann = optional.require("scann", "ScannIndex.load")
    scann_pybind = optional.require("scann.scann_ops.py.scann_ops_pybind",
                                    "ScannIndex.load").scann_pybind

    directory = pathlib.Path(directory)
    meta = _read_meta(directory, "scann")
    ids = _load_ids(directory, meta["count"])
    artifacts = directory / SCANN_DIR
    assets = _checked_scann_assets(artifacts)
    _check_scann_config(artifacts / SCANN_CONFIG)
    self = cls.__new__(cls)
    self.dim = meta["dim"]
    self.options = meta["options"]
    self.calibration = meta.get("calibration")
    self._lock = threading.RLock()
    self._searcher = scann.scann_ops_pybind.ScannSearcher(
        scann_pybind.ScannNumpy(str(artifacts), assets), docids=[int(i) for i in ids])
    if len(self) != meta["count"]:
      raise ValueError(f"{directory}: ScaNN searcher holds {len(self)} vectors, {INDEX_FILE} "
                       f"says {meta['count']}")
    if self.options.get("num_threads"):
      self._searcher.set_num_threads(self.options["num_threads"])
    return self


def _exact_rows(pool, queries, k: int, chunk: int = 262144) -> np.ndarray:
  """Rows of the k best inner products of each query over pool, best first (numpy float32,
  blocked over the pool so no [Q, N] matrix is formed)."""
  best_s = np.full((len(queries), 0), -np.inf, np.float32)
  best_i = np.zeros((len(queries), 0), np.int64)
  for start in range(0, len(pool), chunk):
    s = np.concatenate([best_s, queries @ pool[start:start + chunk].T], axis=1)
    i = np.concatenate([best_i, np.broadcast_to(
        np.arange(start, start + min(chunk, len(pool) - start)), (len(queries), s.shape[1] -
                                                                  best_i.shape[1]))], axis=1)
    keep = np.argpartition(-s, min(k, s.shape[1]) - 1, axis=1)[:, :k]
    best_s, best_i = np.take_along_axis(s, keep, 1), np.take_along_axis(i, keep, 1)
  order = np.argsort(-best_s, axis=1, kind="stable")
  return np.take_along_axis(best_i, order, 1)


def _inside(path: pathlib.Path, folder: pathlib.Path) -> bool:
  return path.resolve().is_relative_to(folder.resolve())


def _checked_scann_assets(artifacts: pathlib.Path) -> str:
  """ScaNN's asset list as text for ScannNumpy, every path made absolute after checking that it
  resolves (symlinks followed) to a file inside `artifacts`."""
  from google.protobuf import text_format
  scann_assets_pb2 = optional.require("scann.scann_ops.scann_assets_pb2", "ScannIndex.load")

  path = artifacts / SCANN_ASSETS
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: {artifacts} is not a saved ScaNN searcher")
  assets = scann_assets_pb2.ScannAssets()
  try:
    text_format.Parse(path.read_text(encoding="utf-8"), assets)
  except (text_format.ParseError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not a ScaNN asset list ({e})") from None
  for asset in assets.assets:
    target = artifacts / asset.asset_path
    if not _inside(target, artifacts):
      raise ValueError(f"{path}: asset path {asset.asset_path!r} resolves outside the index "
                       f"folder {artifacts}; refusing to read it")
    if not target.is_file():
      raise FileNotFoundError(f"{path}: asset {asset.asset_path!r} is missing")
    asset.asset_path = str(target.resolve())
  return text_format.MessageToString(assets)


def _check_scann_config(path: pathlib.Path):
  """Refuses a ScaNN config that names files: ours never do, and ScaNN would read them."""
  scann_pb2 = optional.require("scann.proto.scann_pb2", "ScannIndex.load")

  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: the index folder lacks ScaNN's config")
  config = scann_pb2.ScannConfig()
  try:
    config.ParseFromString(path.read_bytes())
  except Exception as e:  # protobuf's DecodeError is not exported under one stable name
    raise ValueError(f"{path}: not a ScaNN config ({e})") from None

  def named_files(message, prefix=""):
    for field, value in message.ListFields():
      name = prefix + field.name
      if field.message_type is not None:
        for item in ([value] if hasattr(value, "ListFields") else value):  # one or repeated
          yield from named_files(item, name + ".")
      elif field.type == field.TYPE_STRING and any(
          w in field.name for w in ("file", "path", "dir", "wildcard")) and value:
        yield name, value

  found = list(named_files(config))
  if found:
    raise ValueError(f"{path}: the ScaNN config names files {found[:5]}; saved indexes never "
                     "do, refusing to load it")


def _meta_int(meta: dict, key: str, path: pathlib.Path, minimum: int) -> int:
  value = meta.get(key)
  if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
    raise ValueError(f"{path}: {key!r} must be an integer >= {minimum}, got {value!r}")
  return value


def _read_meta(directory: pathlib.Path, kind: str | None = None) -> dict:
  path = directory / INDEX_FILE
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: {directory} is not a saved index")
  try:
    meta = json.loads(path.read_text(encoding="utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: invalid JSON ({e})") from None
  if not isinstance(meta, dict):
    raise ValueError(f"{path}: expected a JSON object, got {type(meta).__name__}")
  if kind is not None and meta.get("kind") != kind:
    raise ValueError(f"{path}: kind is {meta.get('kind')!r}, expected {kind!r}")
  if kind is not None:
    _meta_int(meta, "dim", path, 1)
    _meta_int(meta, "count", path, 0)
  if kind == "exact":
    _meta_int(meta, "query_batch", path, 1)
    _meta_int(meta, "chunk", path, 1)
  if kind == "scann":
    options = meta.get("options")
    if not isinstance(options, dict) or options.get("mode") not in ("brute_force", "tree_ah"):
      raise ValueError(f"{path}: 'options' must be an object whose 'mode' is 'brute_force' or "
                       f"'tree_ah', got {options!r}")
    unknown = set(options) - set(ScannIndex.OPTIONS)
    if unknown:
      raise ValueError(f"{path}: unknown ScaNN options {sorted(unknown)}")
    if "num_threads" in options:
      _meta_int(options, "num_threads", path, 0)
    if options.get("mode") == "tree_ah":
      _meta_int(options, "leaves_to_search", path, 1)
      _meta_int(options, "reorder", path, 1)
    if not isinstance(meta.get("calibration"), (dict, type(None))):
      raise ValueError(f"{path}: 'calibration' must be an object or null, got "
                       f"{meta['calibration']!r}")
  return meta


KINDS = ("exact", "scann")


def make_index(kind: str, vectors, ids=None, **options) -> ExactIndex | ScannIndex:
  """The index `config.retrieval.index` names ("exact" or "scann") over `vectors` [N, D], with
  external `ids` (default 0..N-1); ScaNN's options default to `scann_defaults(N)`."""
  if kind == "exact":
    return ExactIndex(vectors, ids, **options)
  if kind == "scann":
    return ScannIndex(vectors, ids, **options)
  raise ValueError(f"config.retrieval.index={kind!r}; expected one of {', '.join(KINDS)}")


def load_index(directory) -> ExactIndex | ScannIndex:
  """An index saved with `.save(directory)`, of whichever kind it was.

  Safe against a concurrent save of the same folder: the load is retried when `index.json`
  changed while the files were read, so the result is the old or the new index, never a mix.
  A folder that a killed save left renamed aside is put back first.
  """
  directory = pathlib.Path(directory)
  loaders = {"exact": ExactIndex.load, "scann": ScannIndex.load}
  for _ in range(LOAD_RETRIES):
    try:
      inode = directory.stat().st_ino
    except FileNotFoundError:
      time.sleep(LOAD_RETRY_S)  # a concurrent save between its two renames
      continue
    before = _meta_bytes(directory)
    if before is None and _same_folder(directory, inode):
      _read_meta(directory)  # raises: the folder holds no index.json
    try:
      kind = _read_meta(directory).get("kind")
    except FileNotFoundError:
      time.sleep(LOAD_RETRY_S)  # renamed away by a concurrent save after the stat
      continue
    if kind not in loaders:
      raise ValueError(f"{directory / INDEX_FILE}: unknown index kind {kind!r}, expected one "
                       f"of {sorted(loaders)}")
    try:
      index = loaders[kind](directory)
    except Exception:
      if _meta_bytes(directory) == before:
        raise
      continue
    if _meta_bytes(directory) == before:
      return index
  if not directory.exists() and atomic.restore_dir(directory):
    return load_index(directory)
  if not directory.exists():
    raise FileNotFoundError(f"{directory} not found: not a saved index")
  raise RuntimeError(f"{directory} was replaced {LOAD_RETRIES} times while it was read; is "
                     "something saving it in a loop?")


def _same_folder(directory: pathlib.Path, inode: int) -> bool:
  try:
    return directory.stat().st_ino == inode
  except FileNotFoundError:
    return False


def _meta_bytes(directory: pathlib.Path) -> bytes | None:
  try:
    return (directory / INDEX_FILE).read_bytes()
  except OSError:
    return None
