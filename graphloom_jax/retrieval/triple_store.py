"""A corpus of triples that grows: add and remove facts, search them, keep them in a folder, and
never re-embed what is already there.

  store = TripleStore(embedder, index="scann")
  store.add(triples)                       # embeds the new facts only; returns the counts
  store.save("corpus")                     # store.json, triples.jsonl, vectors.npy, index/
  store = TripleStore.load("corpus", embedder)
  store.add(more_triples); store.remove(stale_triples); store.save("corpus")
  pool = store.pool()                      # a subgraph.TriplePool for the bounded retriever

A fact is its key (subject, relation, object). Adding a known key with a new confidence, source
or provenance updates the stored triple without embedding it again (its text is the key's
verbalisation, `Triple.verbalize`); removing deletes it from the index. Each key has a stable
id, the first 63 bits of BLAKE2b of the key (the embedding cache's `text_key`), so an id names
the same fact in every save and in every process; two keys that collide are an error, never a
silent merge. The index is updated in place (`Index.upsert` / `Index.delete`): ScaNN keeps its
trained partitions, so after a large growth rebuild it with `rebuild()`.

The folder is data, never code (JSON, JSONL and .npy files read without pickle), and a save replaces it
as a whole (`atomic.atomic_dir`): a killed save leaves the previous store loadable. A store
remembers its embedder's `model_id` and width, and loading it with another embedder is refused
(the vectors would not be comparable).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable

import numpy as np

from graphloom_jax import atomic
from graphloom_jax.graph.triples import Triple, read_triples_jsonl, write_triples
from graphloom_jax.models.embedding_cache import text_key
from graphloom_jax.retrieval import index as index_lib
from graphloom_jax.retrieval.subgraph import TriplePool

STORE_FILE = "store.json"
TRIPLES_FILE = "triples.jsonl"
VECTORS_FILE = "vectors.npy"  # float32 [count, D], rows in triples.jsonl's order
INDEX_DIR = "index"
FORMAT = 1


def fact_id(key: tuple[str, str, str]) -> int:
  """The stable non-negative int64 id of a fact key."""
  return text_key("\x1f".join(key)) >> 1


class _RowIndex:
  """The store's index seen through row numbers, as `TriplePool` expects."""

  def __init__(self, index, ids_by_row: np.ndarray):
    self._index = index
    self._order = np.argsort(ids_by_row)
    self._sorted = ids_by_row[self._order]

  def search(self, queries, k: int):
    ids, scores = self._index.search(queries, k)
    pos = np.clip(np.searchsorted(self._sorted, ids), 0, len(self._sorted) - 1)
    rows = np.where(ids >= 0, self._order[pos], -1)
    return rows, scores


class TripleStore:
  """Triples, their verbalisation embeddings and an index over them, updated in place."""

  def __init__(self, embedder, index: str = "exact"):
    if index not in index_lib.KINDS:
      raise ValueError(f"index={index!r}; expected one of {', '.join(index_lib.KINDS)}")
    self.embedder = embedder
    self.kind = index
    self.dim = getattr(embedder, "dim", None)  # else the width of the first vectors embedded
    self._triples: dict[int, Triple] = {}  # id -> triple, in insertion order
    self._vectors: dict[int, np.ndarray] = {}
    self._index = None

  def __len__(self) -> int:
    return len(self._triples)

  def __contains__(self, triple_or_key) -> bool:
    key = triple_or_key.key() if isinstance(triple_or_key, Triple) else tuple(triple_or_key)
    i = fact_id(key)
    return i in self._triples and self._triples[i].key() == key

  @property
  def triples(self) -> list[Triple]:
    return list(self._triples.values())

  def _id(self, key: tuple[str, str, str]) -> int:
    i = fact_id(key)
    known = self._triples.get(i)
    if known is not None and known.key() != key:
      raise ValueError(f"fact ids collide: {key!r} and {known.key()!r} (id {i})")
    return i

  def add(self, triples: Iterable[Triple]) -> dict[str, int]:
    """Adds new facts and updates known ones (the last of repeated keys wins). Returns the
    counts {"added", "updated", "unchanged"}; only the added facts are embedded."""
    latest: dict[int, Triple] = {}
    for t in triples:
      if not isinstance(t, Triple):
        raise TypeError(f"TripleStore.add takes Triple objects, got {type(t).__name__}")
      i = self._id(t.key())
      if i in latest and latest[i].key() != t.key():
        raise ValueError(f"fact ids collide: {t.key()!r} and {latest[i].key()!r} (id {i})")
      latest[i] = t
    new = [i for i in latest if i not in self._triples]
    counts = {"added": len(new), "unchanged": 0, "updated": 0}
    for i, t in latest.items():
      if i in self._triples:
        counts["unchanged" if self._triples[i] == t else "updated"] += 1
    if new:
      texts = [latest[i].verbalize() for i in new]
      vectors = np.asarray(self.embedder.embed(texts), np.float32)
      if vectors.ndim != 2 or len(vectors) != len(new) or (
          self.dim is not None and vectors.shape[1] != self.dim):
        raise ValueError(f"{type(self.embedder).__name__}.embed returned {vectors.shape}, "
                         f"expected ({len(new)}, {self.dim or 'D'})")
      self.dim = vectors.shape[1]
      if not np.isfinite(vectors).all():
        raise ValueError("the embedder returned non-finite vectors; nothing was added")
      ids = np.asarray(new, np.int64)
      if self._index is None:
        self._index = index_lib.make_index(self.kind, vectors, ids)
      else:
        self._index.upsert(ids, vectors)
      self._vectors.update(zip(new, vectors))
    self._triples.update(latest)
    return counts

  def remove(self, triples_or_keys: Iterable) -> int:
    """Removes facts by key (a Triple or a (subject, relation, object) tuple); a key the store
    does not hold is a KeyError raised before anything changes. Returns how many were removed."""
    ids = []
    for item in triples_or_keys:
      key = item.key() if isinstance(item, Triple) else tuple(item)
      if key not in self:
        raise KeyError(f"TripleStore.remove: {key!r} is not in the store")
      ids.append(fact_id(key))
    ids = list(dict.fromkeys(ids))
    if not ids:
      return 0
    if len(ids) == len(self._triples):
      self._index = None  # an index cannot be empty; the next add builds a new one
    else:
      self._index.delete(np.asarray(ids, np.int64))
    for i in ids:
      del self._triples[i], self._vectors[i]
    return len(ids)

  def rebuild(self) -> None:
    """A fresh index over the current facts (ScaNN: re-trains its partitions on them)."""
    if self._triples:
      ids = np.fromiter(self._triples, np.int64, len(self._triples))
      self._index = index_lib.make_index(self.kind, self._matrix(), ids)

  def search(self, queries, k: int) -> list[list[tuple[Triple, float]]]:
    """The k best facts per query vector (queries [Q, D]), best first."""
    if self._index is None:
      raise ValueError("TripleStore.search: the store is empty")
    ids, scores = self._index.search(np.asarray(queries, np.float32), k)
    return [[(self._triples[int(i)], float(s)) for i, s in zip(row_ids, row_scores) if i >= 0]
            for row_ids, row_scores in zip(ids, scores)]

  def pool(self) -> TriplePool:
    """The facts as the pool the bounded retriever walks, searching through this store's
    index (no copy of the index is built)."""
    ids = np.fromiter(self._triples, np.int64, len(self._triples))
    index = _RowIndex(self._index, ids) if self._index is not None else None
    return TriplePool(self.triples, self._matrix(), index=index)

  def _matrix(self) -> np.ndarray:
    """The facts' vectors [N, D], rows in insertion order (the order of `triples`)."""
    if not self._vectors:
      return np.zeros((0, self.dim or 0), np.float32)
    return np.stack([self._vectors[i] for i in self._triples])

  # ---------------------------------------------------------------------------------- folders

  def save(self, directory) -> pathlib.Path:
    """Writes the store to `directory`, replacing a previous save as a whole."""
    directory = pathlib.Path(directory)
    if directory.is_dir() and any(directory.iterdir()) and not (directory / STORE_FILE).is_file():
      raise FileExistsError(f"refusing to save a triple store to {directory}: the folder holds "
                            f"other files and no {STORE_FILE}, and a save replaces the folder")
    with atomic.atomic_dir(directory) as tmp:
      write_triples(tmp / TRIPLES_FILE, self._triples.values())
      np.save(tmp / VECTORS_FILE, self._matrix(), allow_pickle=False)
      if self._index is not None:
        self._index.save(tmp / INDEX_DIR)
      meta = {"format": FORMAT, "count": len(self), "index": self.kind,
              "model_id": getattr(self.embedder, "model_id", None), "dim": self.dim}
      (tmp / STORE_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return directory

  @classmethod
  def load(cls, directory, embedder) -> TripleStore:
    """A saved store, checked against `embedder` (model id and width) and against itself
    (count, ids); every problem names the file."""
    directory = pathlib.Path(directory)
    meta_path = directory / STORE_FILE
    if not meta_path.is_file():
      raise FileNotFoundError(f"{meta_path} not found: {directory} is not a saved triple store")
    try:
      meta = json.loads(meta_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
      raise ValueError(f"{meta_path}: not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
      raise ValueError(f"{meta_path}: not a format-{FORMAT} triple store description")
    model_id, dim = getattr(embedder, "model_id", None), getattr(embedder, "dim", None)
    if meta.get("model_id") != model_id or dim not in (None, meta.get("dim")):
      raise ValueError(f"{meta_path}: saved with embedder {meta.get('model_id')!r} (dim "
                       f"{meta.get('dim')}), loaded with {model_id!r} (dim {dim})")
    store = cls(embedder, meta.get("index", "exact"))
    store.dim = meta.get("dim")
    triples, _ = read_triples_jsonl(directory / TRIPLES_FILE)
    if len(triples) != meta.get("count"):
      raise ValueError(f"{directory / TRIPLES_FILE}: {len(triples)} triples, {STORE_FILE} "
                       f"says {meta.get('count')}")
    for t in triples:
      store._triples[store._id(t.key())] = t
    if len(store._triples) != len(triples):
      raise ValueError(f"{directory / TRIPLES_FILE}: repeats a fact key")
    if triples:
      store._index = index_lib.load_index(directory / INDEX_DIR)
      ids = np.fromiter(store._triples, np.int64, len(triples))
      if not np.array_equal(np.sort(store._index.ids), np.sort(ids)):
        raise ValueError(f"{directory / INDEX_DIR}: its ids are not the ids of "
                         f"{TRIPLES_FILE}'s facts")
      vectors_path = directory / VECTORS_FILE
      try:
        vectors = np.load(vectors_path, allow_pickle=False)
      except (OSError, ValueError) as e:
        raise ValueError(f"{vectors_path}: not a plain float32 .npy array ({e})") from None
      if vectors.dtype != np.float32 or vectors.shape != (len(triples), store.dim):
        raise ValueError(f"{vectors_path}: {vectors.dtype} {vectors.shape}, expected float32 "
                         f"({len(triples)}, {store.dim})")
      store._vectors = dict(zip(store._triples, vectors))
    return store
