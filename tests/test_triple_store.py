"""TripleStore, the growing corpus: after every add, update and removal its search equals a
brute-force numpy top-k over exactly the facts it should hold; only new facts are embedded; ids
survive save and load; a failed save keeps the previous store; bad folders and embedders are
refused with the file named."""

import json

import numpy as np
import pytest

from fakes import HashEmbed
from graphloom_jax.graph.triples import Triple
from graphloom_jax.retrieval import index as index_lib
from graphloom_jax.retrieval import triple_store
from graphloom_jax.retrieval.triple_store import TripleStore


class CountingEmbed(HashEmbed):
  """HashEmbed that records every text it embeds."""

  def __init__(self):
    self.seen = []

  def embed(self, texts):
    self.seen.extend(texts)
    return super().embed(texts)


def _facts(n, start=0, confidence=0.9):
  return [Triple(f"thing {i}", "next to", f"thing {i + 1}", confidence) for i in
          range(start, start + n)]


def _brute_force(facts, queries, k):
  """Independent reference: every fact's HashEmbed vector scored against each query."""
  vectors = HashEmbed().embed([t.verbalize() for t in facts])
  scores = queries @ vectors.T
  order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  return [[facts[j].key() for j in row] for row in order]


def _search_keys(store, queries, k):
  return [[t.key() for t, _ in row] for row in store.search(queries, k)]


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_search_follows_adds_updates_and_removals(kind, tmp_path):
  embed = CountingEmbed()
  store = TripleStore(embed, index=kind)
  first = _facts(40)
  assert store.add(first) == {"added": 40, "updated": 0, "unchanged": 0}
  queries = HashEmbed().embed([f"thing {i} next to thing {i + 1}" for i in (3, 17, 55)])
  assert _search_keys(store, queries, 5) == _brute_force(first, queries, 5)

  # growth: only the 30 new facts are embedded; one known fact changes confidence
  grown = _facts(30, start=40) + [first[3].replace(confidence=0.2)] + [first[4]]
  embed.seen.clear()
  assert store.add(grown) == {"added": 30, "updated": 1, "unchanged": 1}
  assert sorted(embed.seen) == sorted(t.verbalize() for t in _facts(30, start=40))
  now = [t for t in first if t.key() != first[3].key()] + [first[3].replace(confidence=0.2)]
  now += _facts(30, start=40)
  assert _search_keys(store, queries, 5) == _brute_force(now, queries, 5)
  hit = dict((t.key(), t) for row in store.search(queries, 5) for t, _ in row)
  assert hit[first[3].key()].confidence == pytest.approx(0.2)

  # removal: a missing key changes nothing; then two facts go
  with pytest.raises(KeyError, match="not in the store"):
    store.remove([first[0], ("no", "such", "fact")])
  assert len(store) == 70 and first[0] in store
  assert store.remove([first[3], first[3].key(), first[17]]) == 2
  now = [t for t in now if t.key() not in (first[3].key(), first[17].key())]
  assert len(store) == 68 and first[3] not in store
  assert _search_keys(store, queries, 5) == _brute_force(now, queries, 5)

  # save and load: the same facts, ids and results, with no embedding
  store.save(tmp_path / "corpus")
  embed.seen.clear()
  loaded = TripleStore.load(tmp_path / "corpus", embed)
  assert embed.seen == [] and loaded.kind == kind
  assert sorted(t.key() for t in loaded.triples) == sorted(t.key() for t in now)
  assert _search_keys(loaded, queries, 5) == _brute_force(now, queries, 5)
  loaded.add(_facts(2, start=200))
  assert embed.seen == [t.verbalize() for t in _facts(2, start=200)]
  loaded.rebuild()
  assert _search_keys(loaded, queries, 5) == _brute_force(now + _facts(2, start=200), queries, 5)


def test_pool_walks_the_store_through_its_index():
  store = TripleStore(HashEmbed())
  facts = _facts(60)
  store.add(facts)
  store.remove(facts[:10])
  pool = store.pool()
  assert len(pool) == 50 and pool.triples == facts[10:]
  query = HashEmbed().embed(["thing 31 next to thing 32"])[0]
  # top() shortlists through the store's index (60 > 4k) and must match the full scan
  expected = _brute_force(facts[10:], query[None], 3)[0]
  assert [pool.triples[i].key() for i in pool.top(query, 3)] == expected
  np.testing.assert_allclose(pool.embeddings, HashEmbed().embed(
      [t.verbalize() for t in facts[10:]]), rtol=0, atol=0)


def test_ids_are_stable_and_collisions_are_errors(monkeypatch):
  key = ("dog", "has", "tail")
  assert triple_store.fact_id(key) == triple_store.fact_id(tuple(key)) >= 0
  store = TripleStore(HashEmbed())
  store.add([Triple(*key)])
  monkeypatch.setattr(triple_store, "fact_id", lambda k: 7)
  store2 = TripleStore(HashEmbed())
  with pytest.raises(ValueError, match="fact ids collide"):
    store2.add([Triple("a", "b", "c"), Triple("d", "e", "f")])
  assert len(store2) == 0


def test_removing_everything_then_adding_again():
  store = TripleStore(HashEmbed())
  facts = _facts(5)
  store.add(facts)
  assert store.remove(facts) == 5 and len(store) == 0
  with pytest.raises(ValueError, match="the store is empty"):
    store.search(np.zeros((1, 16), np.float32), 1)
  store.add(facts[:2])
  assert _search_keys(store, HashEmbed().embed([facts[1].verbalize()]), 1) == [[facts[1].key()]]


def test_a_failed_save_keeps_the_previous_store(tmp_path, monkeypatch):
  store = TripleStore(HashEmbed())
  store.add(_facts(8))
  store.save(tmp_path / "corpus")
  store.add(_facts(4, start=50))

  def broken(self, directory):
    raise OSError("disk full")
  monkeypatch.setattr(index_lib.ExactIndex, "save", broken)
  with pytest.raises(OSError, match="disk full"):
    store.save(tmp_path / "corpus")
  monkeypatch.undo()
  assert len(TripleStore.load(tmp_path / "corpus", HashEmbed())) == 8
  assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_bad_folders_and_embedders_are_refused(tmp_path):
  store = TripleStore(HashEmbed())
  store.add(_facts(3))
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "notes.txt").write_text("mine")
  with pytest.raises(FileExistsError, match="holds other files"):
    store.save(tmp_path / "other")
  assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
  with pytest.raises(FileNotFoundError, match="not a saved triple store"):
    TripleStore.load(tmp_path / "other", HashEmbed())

  folder = store.save(tmp_path / "corpus")

  class OtherEmbed(HashEmbed):
    model_id = "another-model"
  with pytest.raises(ValueError, match="saved with embedder 'hash-16'"):
    TripleStore.load(folder, OtherEmbed())
  meta = json.loads((folder / "store.json").read_text())
  (folder / "store.json").write_text(json.dumps({**meta, "count": 4}))
  with pytest.raises(ValueError, match="triples.jsonl: 3 triples, store.json says 4"):
    TripleStore.load(folder, HashEmbed())
  (folder / "store.json").write_text(json.dumps(meta))
  np.save(folder / "vectors.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
  with pytest.raises(ValueError, match="vectors.npy: not a plain float32"):
    TripleStore.load(folder, HashEmbed())
  with pytest.raises(ValueError, match="index='faiss'"):
    TripleStore(HashEmbed(), index="faiss")
  with pytest.raises(TypeError, match="takes Triple objects"):
    store.add([("a", "b", "c")])
