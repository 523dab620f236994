"""`config.retrieval.second_round` builds the matching query writer for bounded retrieval."""

import jax
import numpy as np
import pytest

from graphloom_jax.configs import smollm2
from graphloom_jax import assets
from graphloom_jax.data import scenekb
from graphloom_jax.graph.instance_graph import build_instance_graph, graph_triples
from graphloom_jax.retrieval import factory, grail, subgraph


@pytest.fixture(scope="module")
def pool_and_question():
  if not assets.available("minilm"):
    pytest.skip("embedded MiniLM not installed")
  from graphloom_jax.models import load_embedder
  embedder = load_embedder()
  kb = scenekb.load("validation", root=scenekb.V1_FOLDER)
  q = next(q for q in kb.questions if q.metadata["family"] == "compose")
  graph = build_instance_graph(kb.instance_facts(q.extra["instance_id"], hops=2), tau_edge=0.5)
  return subgraph.TriplePool(graph_triples(graph), embedder=embedder), embedder, q


def test_writer_per_mode(tmp_path):
  c = smollm2.get_config()
  c.retrieval.second_round = "none"
  assert factory.query_writer(c) is None
  c.retrieval.second_round = "template"
  assert isinstance(factory.query_writer(c), subgraph.TemplateQueryWriter)
  c.retrieval.second_round = "decoder"
  with pytest.raises(ValueError, match="needs a decoder"):
    factory.query_writer(c)
  c.retrieval.second_round = "grail"
  with pytest.raises(ValueError, match="needs config.grail.checkpoint"):
    factory.query_writer(c)
  c.retrieval.second_round = "beam"
  with pytest.raises(ValueError, match="'beam'; expected one of"):
    factory.query_writer(c)


def test_rounds_follow_the_config(pool_and_question, tmp_path):
  pool, embedder, q = pool_and_question
  c = smollm2.get_config()
  c.retrieval.second_round = "none"
  one = factory.bounded_retriever(c, pool, embedder).retrieve(q.question)
  assert set(one.rounds) == {1} and one.intermediate_query is None
  cfg = grail.GrailConfig(dim=embedder.dim)
  grail.save(tmp_path / "g", grail.init_params(jax.random.key(0), cfg), cfg)
  c.retrieval.second_round = "grail"
  c.grail.checkpoint = str(tmp_path / "g")
  two = factory.bounded_retriever(c, pool, embedder).retrieve(q.question)
  assert len(two.edges) <= c.retrieval.n_max
  # every round-1 edge kept is also in the one-round subgraph, scored by the question alone
  kept = [e for e, r in zip(two.edges, two.rounds) if r == 1]
  assert {e.key() for e in kept} <= {e.key() for e in one.edges}
  assert np.all(np.diff(two.scores) <= 1e-6)
