"""Streaming, sharding-aware loading: on a (2, 4) mesh of 8 CPU devices every parameter lands
under its declared Megatron sharding and the sharded model computes the single-device logits;
the 8B configuration's shardings divide evenly (checked on shapes only)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from jax.sharding import AxisType, PartitionSpec as P
from flax import nnx

import fakes
from graphloom_jax.models import llama, load_decoder, weights


def mesh_2x4():
  if len(jax.devices()) < 8:
    pytest.skip("needs 8 devices (tests/conftest.py sets XLA_FLAGS for 8 CPU devices)")
  return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  torch.manual_seed(0)
  cfg = transformers.LlamaConfig(
      vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
      num_attention_heads=8, num_key_value_heads=4, head_dim=8, max_position_embeddings=512,
      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
  model = transformers.LlamaForCausalLM(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1 + 0.1 * torch.randn_like(p))
  path = tmp_path_factory.mktemp("sharded") / "hf"
  model.save_pretrained(path, safe_serialization=True, max_shard_size="60KB")
  return path


@pytest.mark.parametrize("axis_type", ["default", "auto"])
def test_a_jax_make_mesh_of_either_axis_type_gives_one_devices_logits(folder, rng, axis_type):
  """`load_decoder(path, mesh=jax.make_mesh(...))`, the call a user writes first: with the
  default axis types (Explicit) as with Auto ones, the logits and greedy tokens are one
  device's."""
  if len(jax.devices()) < 8:
    pytest.skip("needs 8 devices (tests/conftest.py sets XLA_FLAGS for 8 CPU devices)")
  kwargs = {} if axis_type == "default" else {"axis_types": (AxisType.Auto,) * 2}
  mesh = jax.make_mesh((2, 4), ("data", "model"), **kwargs)
  if axis_type == "default":
    assert all(t == AxisType.Explicit for t in mesh.axis_types), mesh.axis_types
  single = load_decoder(str(folder))
  on_mesh = load_decoder(str(folder), mesh=mesh)
  assert set(on_mesh.model.embed.value.sharding.device_set) == set(mesh.devices.flat)
  ids = rng.integers(0, 256, size=(4, 40)).astype(np.int32)
  np.testing.assert_allclose(on_mesh.logits(ids), single.logits(ids), atol=1e-5, rtol=0)
  prompts = [list(ids[0, :9]), list(ids[1, :17])]
  assert (on_mesh.generate_ids(prompts, 4, eos_ids=[-1])
          == single.generate_ids(prompts, 4, eos_ids=[-1]))


def test_mesh_load_places_every_parameter_as_declared(folder, rng):
  mesh = mesh_2x4()
  single = load_decoder(str(folder))
  sharded = load_decoder(str(folder), mesh=mesh)
  config = sharded.config
  assert llama.uneven_shardings(config, mesh) == []
  for name, spec in llama.PARTITIONS.items():
    if name not in config.model_shapes():
      continue
    value = getattr(sharded.model, name).value
    assert value.sharding.spec == spec, name
    # Each device holds 1/4 of every split dimension (and all of the others).
    expected = tuple(n // 4 if axis == "model" else n for n, axis in
                     zip(value.shape, tuple(spec) + (None,) * value.ndim))
    assert {s.data.shape for s in value.addressable_shards} == {expected}, name
    np.testing.assert_array_equal(np.asarray(value), np.asarray(getattr(single.model, name).value))
  ids = rng.integers(0, 256, size=(2, 96)).astype(np.int32)
  np.testing.assert_allclose(sharded.logits(ids), single.logits(ids), atol=1e-5, rtol=0)
  prompts = [list(ids[0, :20]), list(ids[1, :33])]
  assert (sharded.generate_ids(prompts, 6, eos_ids=[-1])
          == single.generate_ids(prompts, 6, eos_ids=[-1]))


def test_uneven_dimension_is_replicated_and_reported():
  mesh = mesh_2x4()
  config = llama.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_layers=1,
                             num_heads=6, num_kv_heads=3, head_dim=8)
  assert sorted(llama.uneven_shardings(config, mesh)) == [
      "wo dim 2 (6) over 'model' (4 devices)", "wqkv dim 1 (3) over 'model' (4 devices)"]
  shardings = llama.param_shardings(config, mesh)
  assert shardings["wqkv"].spec == P(None, None)
  assert shardings["w_gate_up"].spec == P(None, "model")


def test_streaming_load_reads_bfloat16_checkpoints(folder, tmp_path, rng):
  """A bfloat16 safetensors file (how Llama-3 ships) is read as bfloat16, not via float32."""
  config, params = weights.load_safetensors(folder)
  hf = fakes.hf_tensors(config, params)
  torch_tensors = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in hf.items()}
  from safetensors.torch import save_file
  save_file(torch_tensors, str(tmp_path / "model.safetensors"))
  (tmp_path / "config.json").write_text((folder / "config.json").read_text())
  checkpoint = weights.open_safetensors(tmp_path)
  name, layer, value = next(iter(checkpoint.tensors(jnp.bfloat16)))
  assert (name, layer, value.dtype) == ("embed", None, jnp.bfloat16)
  np.testing.assert_array_equal(value, params["embed"].astype(jnp.bfloat16))
  dec = load_decoder(str(tmp_path), dtype="bfloat16")
  ids = rng.integers(0, 256, size=(1, 64)).astype(np.int32)
  ref = load_decoder(str(folder)).logits(ids)
  assert np.mean(dec.logits(ids).argmax(-1) == ref.argmax(-1)) > 0.9


def test_eight_b_shardings_divide_evenly(capsys):
  from graphloom_jax.configs import llama3_8b
  mesh = mesh_2x4()
  config = llama.config_from_arch(llama3_8b.get_config().model.arch)
  abstract = llama.abstract_model(config, jnp.bfloat16)  # nnx.eval_shape: nothing allocated
  assert llama.uneven_shardings(config, mesh) == []
  shardings = llama.param_shardings(config, mesh)
  total = per_device = 0
  for name, sharding in shardings.items():
    value = getattr(abstract, name).value
    shard = sharding.shard_shape(value.shape)
    assert all(n % s == 0 for n, s in zip(value.shape, shard)), name
    total += value.size * value.dtype.itemsize
    per_device += int(np.prod(shard)) * value.dtype.itemsize
  with capsys.disabled():
    print(f"\n8B bf16 on a (2, 4) mesh: {total / 2**30:.2f} GiB in all, "
          f"{per_device / 2**30:.2f} GiB per device")
  # Everything but the norms is split 4 ways over "model" (and replicated over "data").
  assert per_device == pytest.approx(total / 4, rel=1e-3)
  assert nnx.state(abstract)  # the abstract model has its full parameter tree
