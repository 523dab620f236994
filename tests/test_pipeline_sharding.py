"""The pipeline on a device mesh (graphloom_jax.sharding), on the 8 CPU devices of
tests/conftest.py: the config's mesh keys resolve to the mesh, rows are padded and placed split
over "data", and GraphLoom answers (generation, citations, option scores, a revision) on an
8 x 1 data-parallel mesh and a 2 x 4 data x model mesh equal those on one device, with the
jitted calls' inputs carrying the shardings (rows P("data"), decoder parameters
llama.PARTITIONS on "model", heads replicated)."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from graphloom_jax import sharding
from graphloom_jax.configs import tiny
from graphloom_jax.data import scenekb
from graphloom_jax.evaluation import sharded
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import llama
from graphloom_jax.pipeline import GraphLoom, decode, graphloom

from fakes import HashEmbed, same_json


def _need_eight():
  if len(jax.local_devices()) < 8:
    pytest.skip("needs 8 devices (tests/conftest.py sets XLA_FLAGS for 8 CPU devices)")


def test_config_selects_the_mesh():
  _need_eight()
  assert sharding.mesh_shape(0, 1, 8) == (8, 1)
  assert sharding.mesh_shape(0, 4, 8) == (2, 4)
  assert sharding.mesh_shape(1, 0, 8) == (1, 8)
  assert sharding.mesh_shape(2, 2, 8) == (2, 2)
  with pytest.raises(ValueError, match="config.mesh.model=3 does not divide"):
    sharding.mesh_shape(0, 3, 8)
  with pytest.raises(ValueError, match="needs 16 devices"):
    sharding.mesh_shape(4, 4, 8)
  with pytest.raises(ValueError, match="config.mesh.data=-1"):
    sharding.mesh_shape(-1, 1, 8)
  config = tiny.get_config()
  assert (config.mesh.data, config.mesh.model) == (1, 1)
  assert sharding.mesh_from_config(config) is None
  config.mesh.data, config.mesh.model = 0, 4
  mesh = sharding.mesh_from_config(config)
  assert sharding.describe(mesh) == {"data": 2, "model": 4}
  assert set(mesh.devices.flat) == set(jax.local_devices()[:8])


def test_rows_are_padded_with_the_last_row_and_split_over_data():
  _need_eight()
  mesh = sharding.make_mesh(2, 4)
  rows = {"tokens": np.arange(15).reshape(5, 3), "valid": np.ones((5, 3), bool)}
  placed, n = sharding.place_rows(rows, mesh)
  assert n == 5
  for k, v in placed.items():
    assert v.shape[0] == 6 and v.sharding.spec == P("data"), k
    assert {s.data.shape[0] for s in v.addressable_shards} == {3}
  np.testing.assert_array_equal(np.asarray(placed["tokens"])[:5], rows["tokens"])
  np.testing.assert_array_equal(np.asarray(placed["tokens"])[5], rows["tokens"][4])
  assert sharding.pad_list([1, 2, 3], 4) == [1, 2, 3, 3]
  single, n = sharding.place_rows(rows, None)
  assert n == 5 and single["tokens"].shape == (5, 3)


class Spy:
  """Wraps the jitted calls of decoding and scoring, recording their inputs' shardings."""

  def __init__(self, monkeypatch):
    self.calls = []
    for module, name in ((decode, "_score_rows"), (decode, "_score_options"),
                         (decode, "_score_text_options"), (decoder_lib, "_generate")):
      monkeypatch.setattr(module, name, self._wrap(name, getattr(module, name)))

  def _wrap(self, name, fn):
    def call(*args, **kwargs):
      leaves = [x for x in jax.tree.leaves(args) if isinstance(x, jax.Array)]
      self.calls.append((name, args, leaves))
      return fn(*args, **kwargs)
    return call


def _rows_spec(name, args):
  """The sharding spec of the token rows a call received."""
  if name in ("_score_rows", "_score_options"):
    return args[4]["tokens"].sharding.spec
  return args[2].sharding.spec


def _answers(system, kb, qs):
  out = system.answer_batch([q.question for q in qs],
                            [kb.scene_graph(q.extra["instance_id"]) for q in qs],
                            options=[q.extra["options"] for q in qs])
  # without the wall-clock fields (stage timings, the correction's measured seconds)
  return [sharded.split_wall_clock({"index": 0, "qid": "", **a.to_json()})[0] for a in out]



@pytest.mark.parametrize("shape", [(8, 1), (2, 4)])
def test_answers_on_a_mesh_equal_one_device(shape, monkeypatch):
  _need_eight()
  config = tiny.get_config()
  config.model.max_seq_len = 1024  # the byte-level revision prompts need more than 512
  config.model.arch.max_position_embeddings = 1024
  kb = scenekb.load("validation", root=scenekb.V1_FOLDER)
  qs = kb.questions[:3]  # 3 questions x 4 options: rows padded on both meshes

  def build(mesh):
    dec = decoder_lib.from_config(config.model, mesh)
    heads = graphloom.new_heads(config, dec, 16, seed=3)
    return GraphLoom(config, dec, HashEmbed(), heads, kb_sources=[kb.kb_source()], mesh=mesh)

  reference = build(None)
  want = _answers(reference, kb, qs)
  mesh = sharding.make_mesh(*shape)
  system = build(mesh)
  spy = Spy(monkeypatch)
  got = _answers(system, kb, qs)
  for a, b in zip(want, got):
    same_json(a, b)
  names = {name for name, _, _ in spy.calls}
  assert {"_generate", "_score_options"} <= names  # answers, then the options continuing them
  for name, args, leaves in spy.calls:
    assert _rows_spec(name, args) == P("data"), name
    assert all(set(x.sharding.device_set) == set(mesh.devices.flat) for x in leaves), name
  # The decoder's parameters carry llama.PARTITIONS (replicated where "model" does not divide)
  model = system.decoder.model
  for name, s in llama.param_shardings(model.config, mesh).items():
    assert getattr(model, name).value.sharding.spec == s.spec, name
  if shape == (2, 4):
    assert model.w_gate_up.value.sharding.spec == P(None, "model")
    assert {x.data.shape for x in model.w_down.value.addressable_shards} == {
        (model.config.num_layers, model.config.hidden_size,
         model.config.intermediate_size // 4)}
  for leaf in jax.tree.leaves(system._heads_state):
    assert leaf.sharding.spec == P() and leaf.sharding.mesh == mesh
