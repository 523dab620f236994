"""The embedding caches: in memory (`MemoEmbedder`, each distinct text embedded once per process)
and on disk (`cached_embed`, keyed by (embedder model id, text)).

Layout: `<cache_dir>/<model_id>/shard-NNNNN.npz`, each shard holding `keys` (uint64 [n], the
first 8 bytes of BLAKE2b(text)) and `vectors` (float32 [n, D]). New embeddings are appended as
new shards written atomically (temporary file + rename), so an interrupted run keeps every
finished shard and the next run resumes from there. With 64-bit keys the chance of any collision
among a million texts is about 3e-8.
"""

import hashlib
import pathlib
import re
from typing import Callable, Sequence

import numpy as np


def text_key(text: str) -> int:
  return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class EmbeddingCache:
  """Vectors of previously embedded texts for one model."""

  def __init__(self, cache_dir, model_id: str, dim: int):
    if not re.fullmatch(r"[A-Za-z0-9._-]+", model_id):
      raise ValueError(f"model_id {model_id!r} must be a plain file name (letters, digits, ._-)")
    self.dir = pathlib.Path(cache_dir) / model_id
    self.dim = dim
    self._keys = np.zeros(0, np.uint64)
    self._vectors = np.zeros((0, dim), np.float32)
    self._pending = []  # shards added since the last merge (merging per shard would copy O(n^2))
    self._next_shard = 0
    shards = sorted(self.dir.glob("shard-*.npz")) if self.dir.is_dir() else []
    keys, vectors = [], []
    for path in shards:
      with np.load(path) as z:
        if z["vectors"].ndim != 2 or z["vectors"].shape[1] != dim or \
            z["keys"].shape != (len(z["vectors"]),):
          raise ValueError(f"{path}: shard holds keys {z['keys'].shape} and vectors "
                           f"{z['vectors'].shape}, expected [n] and [n, {dim}]")
        keys.append(z["keys"])
        vectors.append(z["vectors"])
      self._next_shard = max(self._next_shard, int(path.stem.split("-")[1]) + 1)
    self._pending = list(zip(keys, vectors))

  def _merge(self):
    if self._pending:
      keys = np.concatenate([self._keys] + [k for k, _ in self._pending])
      vectors = np.concatenate([self._vectors] + [v for _, v in self._pending])
      order = np.argsort(keys, kind="stable")
      self._keys, self._vectors = keys[order], vectors[order]
      self._pending = []

  def __len__(self) -> int:
    return len(self._keys) + sum(len(k) for k, _ in self._pending)

  def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found bool [n], rows float32 [n, D] with zeros where not found)."""
    self._merge()
    pos = np.minimum(np.searchsorted(self._keys, keys), max(len(self._keys) - 1, 0))
    found = (self._keys[pos] == keys) if len(self._keys) else np.zeros(len(keys), bool)
    out = np.zeros((len(keys), self.dim), np.float32)
    out[found] = self._vectors[pos[found]]
    return found, out

  def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
    self.dir.mkdir(parents=True, exist_ok=True)
    path = self.dir / f"shard-{self._next_shard:05d}.npz"
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, keys=keys.astype(np.uint64), vectors=vectors.astype(np.float32))
    tmp.rename(path)
    self._next_shard += 1
    self._pending.append((keys.astype(np.uint64), vectors.astype(np.float32)))


def cached_embed(embedder, texts: Sequence[str], cache_dir, *, model_id: str | None = None,
                 shard_size: int = 16384, log: Callable[[str], None] | None = None) -> np.ndarray:
  """`embedder.embed(texts)` with every vector read from / written to the on-disk cache.

  model_id defaults to `embedder.model_id`; an embedder without one must be given a model_id.
  Missing texts are embedded `shard_size` at a time, each batch saved before the next starts.
  """
  model_id = model_id or getattr(embedder, "model_id", None)
  if not model_id:
    raise ValueError(f"{type(embedder).__name__} has no model_id attribute; pass model_id= so "
                     "cached vectors cannot be mixed up between models")
  cache = EmbeddingCache(cache_dir, model_id, embedder.dim)
  keys = np.fromiter((text_key(t) for t in texts), np.uint64, len(texts))
  found, out = cache.lookup(keys)
  todo = np.flatnonzero(~found)
  # Repeated texts are embedded once.
  _, first = np.unique(keys[todo], return_index=True)
  todo_unique = todo[np.sort(first)]
  for s in range(0, len(todo_unique), shard_size):
    rows = todo_unique[s:s + shard_size]
    vectors = np.asarray(embedder.embed([texts[i] for i in rows]), np.float32)
    if vectors.shape != (len(rows), embedder.dim):
      raise ValueError(f"{type(embedder).__name__}.embed returned {vectors.shape}, expected "
                       f"({len(rows)}, {embedder.dim})")
    cache.add(keys[rows], vectors)
    if log:
      log(f"embedded {s + len(rows)}/{len(todo_unique)} new texts (cache: {len(cache)})")
  if len(todo):
    _, out[todo] = cache.lookup(keys[todo])
  return out


class MemoEmbedder:
  """An embedder that embeds each distinct text once per process and serves it by value
  (questions, slot names and verbalisations repeat across questions of one scene)."""

  def __init__(self, embedder):
    """embedder: an object with `embed(texts) -> [N, E]`, or such a callable itself."""
    self.embedder = embedder
    self._fn = getattr(embedder, "embed", embedder)
    self.model_id = getattr(embedder, "model_id", type(embedder).__name__)
    self._vecs: dict[str, np.ndarray] = {}

  def add(self, texts: Sequence[str]) -> None:
    new = sorted({t for t in texts if t not in self._vecs})
    if new:
      out = np.asarray(self._fn(new), np.float32)
      if out.ndim != 2 or out.shape[0] != len(new):
        raise ValueError(f"embedder returned shape {out.shape} for {len(new)} texts")
      self._vecs.update(zip(new, out))

  def embed(self, texts: Sequence[str]) -> np.ndarray:
    texts = list(texts)
    self.add(texts)
    return np.stack([self._vecs[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)

  __call__ = embed
