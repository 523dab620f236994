"""Exact and ScaNN indexes against numpy brute force: search results, recall, save/load,
upsert/delete semantics and bad inputs."""

import os
import shutil

import numpy as np
import pytest

from graphloom_jax.retrieval import ExactIndex, Index, ScannIndex, load_index
from graphloom_jax.retrieval.index import scann_defaults


def _rng():
  seed = int.from_bytes(os.urandom(4), "little")
  return np.random.default_rng(seed), seed


def _unit(x):
  return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _clustered(rng, n, d, clusters=40):
  """Unit vectors around random centres: the structure real embeddings have and ANN exploits."""
  centres = rng.standard_normal((clusters, d))
  return _unit(centres[rng.integers(0, clusters, n)] + 0.35 * rng.standard_normal((n, d)))


def _brute(vectors, ids, queries, k):
  s = queries.astype(np.float64) @ vectors.astype(np.float64).T
  order = np.argsort(-s, axis=1, kind="stable")[:, :k]
  return ids[order], np.take_along_axis(s, order, axis=1)


TREE = dict(mode="tree_ah", num_leaves=40, leaves_to_search=12, training_sample_size=4000,
            dims_per_block=2, quantization_threshold=0.2, reorder=100)


def test_exact_matches_numpy():
  rng, seed = _rng()
  n, d = int(rng.integers(900, 1300)), 24
  vectors = _unit(rng.standard_normal((n, d)))
  ids = rng.permutation(10 * n)[:n]
  queries = _unit(rng.standard_normal((37, d)))
  # A small chunk and query batch so the scan, its padding and the query loop all run.
  index = ExactIndex(vectors, ids, query_batch=16, chunk=128)
  assert isinstance(index, Index) and len(index) == n
  for k in (1, 10, 200):  # 200 > chunk takes the single-block path
    got_ids, got_s = index.search(queries, k)
    ref_ids, ref_s = _brute(vectors, ids, queries, k)
    assert got_ids.dtype == np.int64 and got_s.dtype == np.float32
    # float32 scores may swap neighbours whose float64 scores differ by ~1e-7, so compare the
    # true scores of the returned ids (a tie-order swap passes, a wrong item does not)
    row_of = {int(x): j for j, x in enumerate(ids)}
    true = np.einsum("QKD,QD->QK", vectors.astype(np.float64)[
        np.vectorize(row_of.get)(got_ids)], queries.astype(np.float64))
    np.testing.assert_allclose(true, ref_s, atol=1e-6, err_msg=f"seed {seed}, k {k}")
    np.testing.assert_allclose(got_s, ref_s, atol=1e-6, err_msg=f"seed {seed}, k {k}")
    assert all(len(set(r)) == k for r in got_ids.tolist())
  zero_ids, zero_s = index.search(np.zeros((0, d), np.float32), 5)
  assert zero_ids.shape == (0, 5) and zero_s.shape == (0, 5)


def test_scann_defaults_by_pool_size():
  assert scann_defaults(5_000)["mode"] == "brute_force"
  big = scann_defaults(1_000_000)
  assert big["mode"] == "tree_ah" and big["num_leaves"] == 1000
  assert 0 < big["leaves_to_search"] < big["num_leaves"] and big["reorder"] >= 10


def test_scann_recall_against_exact():
  rng, seed = _rng()
  vectors = _clustered(rng, 4000, 32)
  queries = _clustered(rng, 200, 32)
  exact_ids, exact_s = ExactIndex(vectors).search(queries, 10)
  tree = ScannIndex(vectors, **TREE)
  tree_ids, tree_s = tree.search(queries, 10)
  recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(tree_ids, exact_ids)])
  assert recall >= 0.9, f"seed {seed}: ScaNN tree recall@10 {recall}"
  # Searching every leaf leaves only the hashing to approximate, and re-ranking repairs it.
  all_ids, _ = tree.search(queries, 10, leaves_to_search=TREE["num_leaves"])
  full = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(all_ids, exact_ids)])
  assert full >= max(recall, 0.99), f"seed {seed}: all leaves give recall {full}"
  # Re-ranked scores are exact inner products of whatever was found.
  found = tree_ids >= 0
  np.testing.assert_allclose(tree_s[found], np.einsum(
      "qd,qkd->qk", queries, vectors[np.maximum(tree_ids, 0)])[found], atol=1e-5)
  # The default at this size is brute force: identical to the oracle.
  bf_ids, bf_s = ScannIndex(vectors).search(queries, 10)
  np.testing.assert_allclose(bf_s, exact_s, atol=1e-5)
  # neighbours whose scores tie to float32 precision may come in either order
  np.testing.assert_allclose(np.einsum("qd,qkd->qk", queries, vectors[bf_ids]), exact_s,
                             atol=1e-5, err_msg=f"seed {seed}")


def test_scann_pads_missing_results_with_minus_one():
  rng, _ = _rng()
  vectors = _clustered(rng, 4000, 32)
  # One leaf of ~100 points cannot supply 1000 neighbours.
  index = ScannIndex(vectors, **{**TREE, "leaves_to_search": 1, "reorder": 1000})
  ids, scores = index.search(vectors[:3], 1000)
  assert (ids == -1).any() and np.all(np.isneginf(scores[ids == -1]))
  assert np.all(ids[ids >= 0] < 4000)


@pytest.mark.parametrize("kind", ["exact", "scann_tree", "scann_brute"])
def test_save_load_round_trip(tmp_path, kind):
  rng, seed = _rng()
  vectors = _clustered(rng, 3000, 32)
  ids = rng.permutation(100_000)[:3000]
  index = {"exact": lambda: ExactIndex(vectors, ids),
           "scann_tree": lambda: ScannIndex(vectors, ids, **TREE),
           "scann_brute": lambda: ScannIndex(vectors, ids)}[kind]()
  queries = _clustered(rng, 20, 32)
  before = index.search(queries, 7)
  index.save(tmp_path / "a")
  shutil.move(tmp_path / "a", tmp_path / "b")  # the folder must be relocatable
  loaded = load_index(tmp_path / "b")
  assert type(loaded) is type(index) and len(loaded) == 3000 and loaded.dim == 32
  after = loaded.search(queries, 7)
  np.testing.assert_array_equal(after[0], before[0], err_msg=f"seed {seed}")
  np.testing.assert_allclose(after[1], before[1], atol=1e-6)


@pytest.mark.parametrize("kind", ["exact", "scann_tree", "scann_brute"])
def test_upsert_delete_semantics(tmp_path, kind):
  rng, seed = _rng()
  n, d = 3000, 32
  vectors = _clustered(rng, n, d)
  make = {"exact": lambda v: ExactIndex(v), "scann_tree": lambda v: ScannIndex(v, **TREE),
          "scann_brute": lambda v: ScannIndex(v)}[kind]
  index = make(vectors)
  # Probes lie among the data, as new triples do: a point far from every cluster can land in a
  # leaf that its own query does not visit, which is ScaNN's approximation, not a bug.
  probe = _unit(vectors[rng.integers(20, n, 3)] + 0.3 * rng.standard_normal((3, d)))
  # A new id holding the probe itself is its nearest neighbour.
  index.upsert([n + 7], probe[:1])
  assert len(index) == n + 1
  ids, scores = index.search(probe[:1], 3)
  assert ids[0, 0] == n + 7 and abs(scores[0, 0] - 1.0) < 1e-5, f"seed {seed}"
  # Replacing an existing id moves it: found at the new vector, no longer at the old one.
  index.upsert([5], probe[1:2])
  assert len(index) == n + 1
  assert index.search(probe[1:2], 1)[0][0, 0] == 5
  assert 5 not in index.search(vectors[5:6], 5)[0][0]
  # Deleted ids never come back.
  index.delete([n + 7, 11])
  assert len(index) == n - 1
  got = index.search(np.concatenate([probe[:1], vectors[11:12]]), 10)[0]
  assert n + 7 not in got and 11 not in got
  with pytest.raises(KeyError, match="not in the index"):
    index.delete([123_456])
  # The mutated index survives a save/load round trip.
  index.save(tmp_path / "m")
  again = load_index(tmp_path / "m")
  assert len(again) == n - 1
  np.testing.assert_array_equal(again.search(probe, 5)[0], index.search(probe, 5)[0])
  # Against the oracle over the same final contents (brute-force modes are exact).
  if kind != "scann_tree":
    final = vectors.copy()
    final[5] = probe[1]
    keep = np.setdiff1d(np.arange(n), [11])
    ref_ids, _ = _brute(final[keep], keep, probe, 5)
    np.testing.assert_array_equal(index.search(probe, 5)[0], ref_ids, err_msg=f"seed {seed}")


@pytest.mark.parametrize("cls", [ExactIndex, ScannIndex])
def test_bad_inputs(cls, tmp_path):
  rng, _ = _rng()
  vectors = _unit(rng.standard_normal((50, 8)))
  index = cls(vectors)
  with pytest.raises(ValueError, match="queries has dimension 9, the index holds 8-dim"):
    index.search(np.ones((2, 9), np.float32), 3)
  with pytest.raises(ValueError, match="queries must be a 2-D array.*x\\[None\\]"):
    index.search(np.ones(8, np.float32), 3)
  with pytest.raises(ValueError, match=r"k=51 exceeds the number of indexed vectors \(50\)"):
    index.search(vectors[:2], 51)
  with pytest.raises(ValueError, match="k must be a positive int"):
    index.search(vectors[:2], 0)
  bad_q = vectors[:4].copy()
  bad_q[2, 3] = np.nan
  with pytest.raises(ValueError, match=r"queries has non-finite.*first rows \[2\]"):
    index.search(bad_q, 3)
  bad_v = vectors.copy()
  bad_v[17, 0] = np.inf
  with pytest.raises(ValueError, match=r"vectors has non-finite.*first rows \[17\]"):
    cls(bad_v)
  with pytest.raises(ValueError, match="ids holds duplicates: \\[3\\]"):
    cls(vectors, np.r_[np.arange(49), 3])
  with pytest.raises(ValueError, match="vectors has dimension 7"):
    index.upsert([99], np.ones((1, 7), np.float32))
  with pytest.raises(ValueError, match="ids must be a 1-D array of 2 ids"):
    index.upsert([99], np.ones((2, 8), np.float32))
  with pytest.raises(FileNotFoundError, match="is not a saved index"):
    load_index(tmp_path)


def test_scann_bad_options():
  rng, _ = _rng()
  vectors = _unit(rng.standard_normal((50, 8)))
  with pytest.raises(TypeError, match="unknown ScannIndex options \\['leaves'\\]"):
    ScannIndex(vectors, leaves=3)
  with pytest.raises(ValueError, match="tree_ah mode needs options"):
    ScannIndex(vectors, mode="tree_ah")
  with pytest.raises(ValueError, match="num_leaves=100 exceeds the pool size 50"):
    ScannIndex(vectors, **{**TREE, "num_leaves": 100})
  with pytest.raises(ValueError, match="applies to mode 'tree_ah' only"):
    ScannIndex(vectors).search(vectors[:1], 3, leaves_to_search=4)
  with pytest.raises(ValueError, match="needs at least one vector"):
    ScannIndex(np.zeros((0, 8), np.float32))
