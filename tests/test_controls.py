"""Evidence controls (pipeline/controls.py, answer_batch(evidence=)) and the symbolic row of the
SceneKB tables, on a small SceneKB v3 with the tiny config (random decoder and heads, hashed
embeddings): each control changes the evidence it names, and the symbolic row reproduces the
generator's own shortcut statistics through the pipeline's instance graph."""

import collections
import json
import random

import numpy as np
import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import build_benchmark, scenekb
from graphloom_jax.evaluation import hallucination, scenekb_rows
from graphloom_jax.graph.triples import Triple
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import GraphLoom, controls, graphloom

from fakes import HashEmbed


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
  root = tmp_path_factory.mktemp("v3")
  build_benchmark.build(root, num_scenes=40, seed=21, version=3)
  cfg = tiny.get_config()
  dec = decoder_lib.from_config(cfg.model)
  heads = graphloom.new_heads(cfg, dec, 16, seed=1)
  kb = scenekb.load("test", root=root)
  system = GraphLoom(cfg, dec, HashEmbed(), heads,
                     kb_sources=[scenekb.load("train", root=root).kb_source()])
  return root, kb, system


def test_partners_are_a_derangement_within_each_group():
  rng = random.Random(0)
  for trial in range(50):
    groups = [rng.choice("abcd") for _ in range(rng.randrange(1, 30))]
    p = controls.partners(groups, seed=trial)
    sizes = collections.Counter(groups)
    assert sorted(p) == list(range(len(groups)))  # a permutation
    for i, j in enumerate(p):
      assert groups[i] == groups[j]
      assert (i != j) or sizes[groups[i]] == 1
    assert controls.unpaired(p) == sum(n == 1 for n in sizes.values())
  assert controls.partners(list("aabb"), 3) == controls.partners(list("aabb"), 3)


def test_oracle_triples_take_the_graphs_triple_or_the_gold_at_confidence_one():
  graph = [Triple("man", "holding", "cup", 0.61, "scene"), Triple("cup", "is a", "container",
                                                                   0.9, "kb:wordnet")]
  got = controls.oracle_triples([["man", "holding", "cup"], ["cup", "made of", "glass"]], graph)
  assert got[0] is graph[0]
  assert (got[1].key(), got[1].confidence, got[1].source) == (("cup", "made of", "glass"), 1.0,
                                                               "gold")


def test_given_subgraph_is_ordered_by_cosine_to_the_question():
  emb = HashEmbed()
  triples = [Triple("man", "holding", x, 0.7, "scene") for x in ("cup", "kite", "bag", "hat")]
  q = emb.embed(["What is the man holding?"])[0]
  sub = controls.as_subgraph(triples, q, emb)
  want = sorted(triples, key=lambda t: -float(emb.embed([t.verbalize()])[0] @ q))
  assert [t.key() for t in sub.edges] == [t.key() for t in want]
  np.testing.assert_allclose(sub.scores, [emb.embed([t.verbalize()])[0] @ q for t in want],
                             rtol=1e-6)
  assert controls.as_subgraph([], q, emb).edges == []


def _ask(system, kb, qs, evidence=None):
  return system.answer_batch([q.question for q in qs],
                             [kb.scene_graph(q.extra["instance_id"]) for q in qs],
                             options=[q.extra["options"] for q in qs], evidence=evidence)


def test_each_control_changes_the_evidence_it_names(bench):
  root, kb, system = bench
  qs = scenekb.round_robin(kb.questions, 5)
  full = _ask(system, kb, qs)
  none = _ask(system, kb, qs, evidence=[[] for _ in qs])
  assert all(a.retrieved == [] for a in none)
  assert all(a.evidence == [] for a in none)  # nothing to route, nothing cited
  assert any(not np.allclose(a.option_scores, b.option_scores) for a, b in zip(full, none))
  gold = [[Triple(*g, 1.0, "gold") for g in q.extra["gold_triples"]] for q in qs]
  oracle = _ask(system, kb, qs, evidence=gold)
  for a, g in zip(oracle, gold):
    assert sorted(t.key() for t in a.retrieved) == sorted(t.key() for t in g)
  truth = hallucination.GroundTruth.load(root)
  row = scenekb_rows.run_row(system, kb, qs, "graphloom", truth, batch=5, log=lambda s: 0,
                               control="shuffled")
  partner = controls.partners([q.family for q in qs], seed=0)
  for q, p, rec in zip(qs, partner, row["records"]):
    mine = system.prepare([qs[p].question], [kb.scene_graph(qs[p].extra["instance_id"])])[0]
    want = [t.key() for t in mine.subgraph.edges]
    assert rec["recall5"] == scenekb_rows.recall_at(
        [Triple(*k) for k in want], q.extra["gold_triples"])
  # blind: no evidence and no object names; the prefix's object tokens go, so scores move
  graphs = [system.instance_graph(kb.scene_graph(q.extra["instance_id"])) for q in qs]
  blind_graphs = [controls.without_objects(g) for g in graphs]
  assert all(g.objects for g in graphs) and not any(g.objects for g in blind_graphs)
  assert all(b.triples is g.triples for b, g in zip(blind_graphs, graphs))
  blind = system.answer_batch([q.question for q in qs], blind_graphs,
                              options=[q.extra["options"] for q in qs],
                              evidence=[[] for _ in qs])
  assert any(not np.allclose(a.option_scores, b.option_scores) for a, b in zip(none, blind))
  spied = []
  answer_batch = system.answer_batch
  system.answer_batch = lambda qs_, gs, **kw: spied.extend(gs) or answer_batch(qs_, gs, **kw)
  try:
    scenekb_rows.run_row(system, kb, qs[:2], "graphloom", truth, batch=2, log=lambda s: 0,
                           control="blind")
  finally:
    del system.answer_batch
  assert spied and not any(g.objects for g in spied)
  with pytest.raises(ValueError, match="evidence lists"):
    _ask(system, kb, qs, evidence=[[]])
  with pytest.raises(TypeError, match="evidence of question 0"):
    _ask(system, kb, qs, evidence=[[("a", "b", "c")]] + [[]] * (len(qs) - 1))


def test_symbolic_row_reproduces_the_generators_statistics(bench):
  root, kb, system = bench
  truth = hallucination.GroundTruth.load(root)
  row = scenekb_rows.run_row(system, kb, kb.questions, "symbolic", truth, batch=5)
  stats = json.loads((root / "statistics.json").read_text())["shortcuts"]["test"]
  assert row["metrics"]["mc_accuracy"] == pytest.approx(stats["overall"]["lookup"], abs=0.051)
  assert row["metrics"]["questions"] == stats["overall"]["questions"]
  for r in row["records"]:
    assert 0.0 <= r["mc_expected"] <= 1.0
  v2 = scenekb.load("test", root=scenekb.V1_FOLDER)  # the embedded v1 copy has no structured queries
  with pytest.raises(ValueError, match="version=3"):
    scenekb_rows.run_row(system, v2, v2.questions[:1], "symbolic", truth, batch=1)
