"""fusion.objects: what the fusion prefix's object tokens name. "graph" keeps the instance
graph's objects (a scene's, else its sorted entities); "evidence" names the entities of the
subgraph the slots hold, in the order of its triples, so that an evidence control changes them
with the slots; the trainer's other-evidence swap moves them with the subgraph."""

import pathlib

import numpy as np
import pytest

from graphloom_jax.data import pathquestion
from graphloom_jax.graph.triples import Triple
from graphloom_jax.pipeline import GraphLoom
from graphloom_jax.pipeline import evidence as evidence_lib
from graphloom_jax.training import trainer

from fakes import tiny_open_answer_system

DATA = pathlib.Path(__file__).resolve().parent / "data"


def test_prefix_objects_by_source():
  edges = [Triple("b", "r", "a"), Triple("a", "s", "c"), Triple("c", "r", "b")]
  assert evidence_lib.prefix_objects("graph", ["x", "y"], edges) == ["x", "y"]
  assert evidence_lib.prefix_objects("evidence", ["x", "y"], edges) == ["b", "a", "c"]
  assert evidence_lib.prefix_objects("evidence", ["x"], []) == []
  with pytest.raises(ValueError, match="fusion.objects='image'"):
    evidence_lib.prefix_objects("image", [], edges)
  assert evidence_lib.subgraph_keys("graph") == evidence_lib.SUBGRAPH_KEYS
  assert evidence_lib.subgraph_keys("evidence") == (
      evidence_lib.SUBGRAPH_KEYS | {"image", "image_mask"})


@pytest.fixture(scope="module")
def systems():
  base = tiny_open_answer_system()
  out = {}
  for source in ("graph", "evidence"):
    cfg = base.config.copy_and_resolve_references()
    cfg.fusion.objects = source
    out[source] = GraphLoom(cfg, base.decoder, base.embedder, base.heads, kb_sources=[])
  return out


def test_prefix_rows_are_the_named_objects(systems):
  ds = pathquestion.load("PQ-3H", root=DATA / "pathquestion")
  q = ds.questions[0]
  for source, system in systems.items():
    graph = system.instance_graph(ds.instance_triples(q), instance_id=q.qid)
    item = system.prepare([q.question], [graph])[0]
    r = system.config.fusion.max_objects
    edges = item.subgraph.edges[:system.config.memory.bank_size // 2]
    if source == "graph":
      want = list(graph.objects)[:r]
    else:  # the subgraph's subjects and objects in first appearance, independently written
      want = []
      for t in edges:
        for name in (t.subject, t.object):
          if name not in want:
            want.append(name)
      want = want[:r]
      assert set(want) <= {x for t in edges for x in (t.subject, t.object)}
    image, mask = item.evidence.arrays["image"], item.evidence.arrays["image_mask"]
    assert mask.sum() == len(want) > 0
    np.testing.assert_allclose(image[:len(want)], system.embedder.embed(want), atol=1e-6)
    assert not image[len(want):].any()


def test_evidence_controls_change_the_prefix_objects_only_under_evidence(systems,
                                                                        monkeypatch):
  ds = pathquestion.load("PQ-3H", root=DATA / "pathquestion")
  q = ds.questions[0]
  seen = []
  build = evidence_lib.build

  def spy(*args, **kw):
    seen.append(list(args[3]))
    return build(*args, **kw)

  monkeypatch.setattr(evidence_lib, "build", spy)
  given = [Triple("queen anne", "parents", "king james")]
  for source, system in systems.items():
    graph = system.instance_graph(ds.instance_triples(q), instance_id=q.qid)
    seen.clear()
    system.answer_batch([q.question, q.question], [graph, graph], evidence=[[], given])
    if source == "graph":
      assert seen == [list(graph.objects), list(graph.objects)]
    else:
      assert seen == [[], ["queen anne", "king james"]]


def test_other_evidence_swaps_the_prefix_objects_with_the_subgraph():
  batch = {"slot_keys": np.arange(3)[:, None] * np.ones((3, 2)),
           "image": np.arange(3)[:, None] * np.ones((3, 4)),
           "image_mask": np.array([[True], [False], [True]]),
           "question_emb": np.arange(3)[:, None] * np.ones((3, 2))}
  plain = trainer.other_evidence(batch)
  moved = trainer.other_evidence(batch, evidence_lib.subgraph_keys("evidence"))
  np.testing.assert_array_equal(plain["slot_keys"][:, 0], [2, 0, 1])
  np.testing.assert_array_equal(plain["image"][:, 0], [0, 1, 2])
  np.testing.assert_array_equal(moved["image"][:, 0], [2, 0, 1])
  np.testing.assert_array_equal(moved["image_mask"][:, 0], [True, True, False])
  np.testing.assert_array_equal(moved["question_emb"][:, 0], [0, 1, 2])
