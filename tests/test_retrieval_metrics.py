"""Retrieval metrics against hand-computed cases."""

import math
import random

import pytest

from graphloom_jax.evaluation import retrieval_metrics as m


def test_hand_computed_single_query():
  retrieved = ["d3", "d7", "d1", "d9", "d2", "d5"]
  relevant = {"d1", "d2", "d8"}
  # top-5 = d3 d7 d1 d9 d2: two relevant.
  assert m.precision_at_k(retrieved, relevant, 5) == 2 / 5
  assert m.recall_at_k(retrieved, relevant, 5) == 2 / 3
  assert m.precision_at_k(retrieved, relevant, 2) == 0.0
  assert m.recall_at_k(retrieved, relevant, 3) == 1 / 3
  assert m.reciprocal_rank(retrieved, relevant) == 1 / 3
  assert m.reciprocal_rank(["x", "y"], relevant) == 0.0


def test_short_lists_and_duplicates():
  # Fewer than k retrieved: P@5 still divides by 5.
  assert m.precision_at_k(["a", "b"], {"a"}, 5) == 1 / 5
  # Duplicates count once and do not push items out of the top k.
  assert m.precision_at_k(["a", "a", "a", "b", "c"], {"a", "c"}, 3) == 2 / 3
  assert m.reciprocal_rank(["x", "x", "x", "a"], ["a", "a"]) == 1 / 2
  assert m.recall_at_k(["b", "a"], ["a", "a", "b"], 1) == 1 / 2


def test_mrr_and_evaluate_hand_computed():
  runs = [(["a", "b", "c"], {"a"}),  # RR 1
          (["x", "b", "c", "d", "e", "f"], {"c", "f"}),  # RR 1/3
          (["x", "y"], {"z"})]  # RR 0
  assert math.isclose(m.mrr(runs), (1 + 1 / 3 + 0) / 3)
  got = m.evaluate(runs, ks=(1, 5))
  assert math.isclose(got["P@5"], (1 / 5 + 1 / 5 + 0) / 3)
  assert math.isclose(got["R@5"], (1 + 1 / 2 + 0) / 3)
  assert math.isclose(got["P@1"], 1 / 3) and math.isclose(got["R@1"], 1 / 3)
  assert got["n"] == 3


def test_set_recall():
  assert m.set_recall(["a", "b", "q"], {"a", "b", "c", "d"}) == 0.5
  assert m.set_recall(["a", "b", "q"], {"a", "b", "c", "d"}, complete=True) == 0.0
  assert m.set_recall(["d", "c", "b", "a"], {"a", "b"}, complete=True) == 1.0


def test_random_against_counting():
  rng = random.Random(random.getrandbits(64))
  for _ in range(50):
    items = list(range(30))
    retrieved = rng.sample(items, rng.randrange(1, 30))
    relevant = set(rng.sample(items, rng.randrange(1, 8)))
    k = rng.randrange(1, 12)
    hits = [i for i in retrieved[:k] if i in relevant]
    assert m.precision_at_k(retrieved, relevant, k) == len(hits) / k
    assert m.recall_at_k(retrieved, relevant, k) == len(hits) / len(relevant)
    ranks = [r for r, i in enumerate(retrieved, 1) if i in relevant]
    assert m.reciprocal_rank(retrieved, relevant) == (1 / ranks[0] if ranks else 0.0)


@pytest.mark.parametrize("call", [
    lambda: m.precision_at_k(["a"], set(), 5),
    lambda: m.recall_at_k(["a"], {"a"}, 0),
    lambda: m.set_recall(["a"], []),
    lambda: m.mrr([]),
])
def test_bad_input(call):
  with pytest.raises(ValueError):
    call()
