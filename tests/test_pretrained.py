"""The models shipped with the package: GraphLoom.from_pretrained(name) builds each with the
config its heads were trained under and answers from an instance graph with cited triples."""

import json
import pathlib
import re

import pytest

from graphloom_jax import defaults
from graphloom_jax.data import pathquestion
from graphloom_jax.models.heads import (ADAPTER_SHAPE_KEYS, HEADS_DIR, HEAD_SHAPE_KEYS,
                                        saved_config)
from graphloom_jax.pipeline import GraphLoom
from graphloom_jax.pipeline.graphloom import PRETRAINED, shipped_adapters

DATA = pathlib.Path(__file__).parent / "data" / "pathquestion"


@pytest.mark.parametrize("name", sorted(PRETRAINED))
def test_shipped_heads_match_their_config(name):
  config_fn, folder = PRETRAINED[name]
  meta = json.loads((HEADS_DIR / folder / "heads.json").read_text())
  config = config_fn()
  assert meta.get("kind", "graphloom") == "graphloom"  # files before "kind" are heads
  saved = saved_config(meta)
  for key in HEAD_SHAPE_KEYS:
    assert defaults.lookup(config, key) == saved[key], (name, key)
  assert (HEADS_DIR / folder / "README.md").is_file()
  assert (HEADS_DIR / folder / "metrics.jsonl").is_file()
  for mode, sub in shipped_adapters(HEADS_DIR / folder).items():  # trained text baselines
    meta = json.loads((pathlib.Path(sub) / "heads.json").read_text())
    assert meta["kind"] == "tuned_prefix" and meta["target"] == mode, (name, mode)
    saved = saved_config(meta)
    for key in ADAPTER_SHAPE_KEYS:
      assert defaults.lookup(config, key) == saved[key], (name, mode, key)
    assert (pathlib.Path(sub) / "metrics.jsonl").is_file()


def test_pathquestion_model_answers_with_citations():
  ds = pathquestion.load("PQ-2H", root=DATA)
  q = ds.questions[0]
  triples = ds.instance_triples(q)
  model = GraphLoom.from_pretrained("pathquestion")
  assert model.config.graph.singularize is False
  a = model.answer(q.question, triples)
  assert a.mode == "graphloom" and a.text.strip() and "_" not in a.text
  # Citations are triples of the question's instance graph, named as the pipeline names them.
  graph = model.instance_graph(triples)
  keys = {t.key() for t in graph.triples}
  assert a.evidence and all(c.triple.key() in keys for c in a.evidence)
  assert all(0.0 <= c.gate <= 1.0 for c in a.evidence)
  # The equally trained text baselines ship beside the heads and answer in their modes.
  assert sorted(model.adapters) == ["flat_rag_tuned", "no_retrieval_tuned"]
  for mode in model.adapters:
    b = model.answer(q.question, triples, mode=mode)
    assert b.mode == mode and b.text.strip() and b.evidence == []


def test_shipped_adapters_folder(tmp_path):
  assert shipped_adapters(tmp_path) == {}
  (tmp_path / "adapters" / "flat_rag_tuned").mkdir(parents=True)
  assert shipped_adapters(tmp_path) == {"flat_rag_tuned": str(tmp_path / "adapters" /
                                                              "flat_rag_tuned")}
  (tmp_path / "adapters" / "lora").mkdir()
  with pytest.raises(ValueError, match="lora: not a trained text baseline's mode"):
    shipped_adapters(tmp_path)


def test_unknown_pretrained_name_lists_the_shipped_ones():
  with pytest.raises(ValueError, match=re.escape("unknown name 'pq'; shipped: embedded, "
                                                 "pathquestion")):
    GraphLoom.from_pretrained("pq")
