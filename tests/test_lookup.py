"""graph.lookup, the symbolic reader: hand-made graphs with known answers, the confidence
tie-break, the expected accuracy of each reader, and bad queries."""

import random

import pytest

from graphloom_jax.graph import lookup
from graphloom_jax.graph.triples import Triple


def t(s, r, o, c=1.0, source="scene"):
  return Triple(s, r, o, c, source)


GRAPH = [t("man", "holding", "bottle", 0.9), t("man", "holding", "vase", 0.6),
         t("man", "wears", "hat", 0.8), t("bottle", "is a", "vessel", 1.0, "kb:wordnet"),
         t("vase", "is a", "vessel", 0.5, "kb:wordnet"),
         t("vessel", "is a", "container", 1.0, "kb:wordnet"),
         t("bottle", "made of", "glass", 1.0, "kb:wordnet"), t("cup", "on", "table", 0.7)]
X = lookup.ANSWER


def test_one_hop_both_directions_and_equivalent_predicates():
  ch = lookup.choose([[[["man", "wearing", X]]]], ["hat", "bottle", "cup"], GRAPH)
  assert ch.candidates == (0,) and ch.support[0] == pytest.approx(0.8)  # wears = wearing
  ch = lookup.choose([[[[X, "on", "table"]]]], ["man", "cup", "The Cup"], GRAPH)
  assert ch.candidates == (1, 2)  # names compared after normalisation


def test_two_hops_with_an_existential_and_the_weakest_edge_as_support():
  query = [[[["man", "holding", "?y"], ["?y", "made of", X]]]]
  ch = lookup.choose(query, ["glass", "wood", "hat"], GRAPH)
  assert ch.candidates == (0,) and ch.support[0] == pytest.approx(0.9)


def test_kind_of_is_the_transitive_is_a_and_claims_are_conjunctions():
  query = [[[["man", "holding", X]]], [[[X, "kind of", "container"]]]]
  ch = lookup.choose(query, ["bottle", "vase", "hat", "cup"], GRAPH)
  assert ch.candidates == (0, 1)
  assert ch.support == pytest.approx((0.9, 0.5, 0.0, 0.0))  # vase: is a vessel at 0.5
  assert ch.expected_correct(0, "lookup") == 0.5
  assert ch.expected_correct(0, "confidence") == 1.0
  assert ch.expected_correct(1, "confidence") == 0.0
  assert ch.pool("confidence") == [0]


def test_alternatives_are_a_disjunction():
  query = [[[["man", "wears", X]], [["cup", "on", X]]]]
  assert lookup.choose(query, ["table", "hat", "bottle"], GRAPH).candidates == (0, 1)


def test_no_candidate_falls_back_to_chance():
  ch = lookup.choose([[[["dog", "holding", X]]]], ["a", "b", "c", "d"], GRAPH)
  assert ch.candidates == ()
  assert [ch.expected_correct(g) for g in range(4)] == [0.25] * 4
  assert ch.expected_correct(2, "confidence") == 0.25


def test_open_answer_takes_the_best_supported_entity():
  assert lookup.answer([[[["man", "holding", X]]]], GRAPH) == "bottle"
  assert lookup.answer([[[["dog", "holding", X]]]], GRAPH) is None


def test_matches_brute_force_over_random_graphs():
  """Against an independent evaluation: every binding of ?x and ?y enumerated over the graph's
  entities, atoms checked by set membership."""
  rng = random.Random(0)
  names = [f"e{i}" for i in range(6)]
  rels = ["r", "s"]
  for _ in range(30):
    edges = {(rng.choice(names), rng.choice(rels), rng.choice(names)) for _ in range(12)}
    graph = [t(s, r, o, rng.choice([0.3, 0.6, 0.9])) for s, r, o in edges]
    conf = {}
    for g in graph:
      conf[(g.subject, g.relation, g.object)] = g.confidence
    query = [[[[rng.choice(names), rng.choice(rels), "?y"], ["?y", rng.choice(rels), X]],
              [[X, rng.choice(rels), rng.choice(names)]]]]
    ch = lookup.choose(query, names, graph)
    for i, x in enumerate(names):
      best = 0.0
      for alternative in query[0]:
        for y in names:
          bind = {X: x, "?y": y}
          atoms = [tuple(bind.get(n, n) for n in atom) for atom in alternative]
          if all(a in conf for a in atoms):
            best = max(best, min(conf[a] for a in atoms))
      assert ch.support[i] == pytest.approx(best), (query, x)


def test_bad_queries_are_refused():
  with pytest.raises(ValueError, match="no options"):
    lookup.choose([[[["man", "holding", X]]]], [], GRAPH)
  with pytest.raises(ValueError, match="no claims"):
    lookup.choose([], ["hat"], GRAPH)
  with pytest.raises(ValueError, match="reader"):
    lookup.choose([[[["man", "holding", X]]]], ["hat"], GRAPH).expected_correct(0, "oracle")
