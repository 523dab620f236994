"""Checkpoint folders are data: weight maps stay inside the folder and agree with the shards,
config values are checked, ambiguous or looping paths are named, and orbax saves are atomic."""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from graphloom_jax.models import llama, weights

HF_CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=16,
                 hidden_size=8, intermediate_size=12, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                 tie_word_embeddings=True)


def _tiny_tensors(rng):
  config = llama.LlamaConfig.from_hf(HF_CONFIG)
  shapes = weights._hf_expected_shapes(config)
  return {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}


def _sharded(folder, rng, weight_map_edit=None):
  """A two-shard HF folder: layer tensors in shard 1, the rest in shard 2."""
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "config.json").write_text(json.dumps(HF_CONFIG))
  tensors = _tiny_tensors(rng)
  first = {k: v for k, v in tensors.items() if ".layers." in k}
  second = {k: v for k, v in tensors.items() if ".layers." not in k}
  save_file(first, str(folder / "model-00001-of-00002.safetensors"))
  save_file(second, str(folder / "model-00002-of-00002.safetensors"))
  weight_map = {k: "model-00001-of-00002.safetensors" for k in first}
  weight_map.update({k: "model-00002-of-00002.safetensors" for k in second})
  if weight_map_edit:
    weight_map_edit(weight_map)
  (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
  return tensors


def test_sharded_folder_loads(tmp_path, rng):
  tensors = _sharded(tmp_path / "m", rng)
  _, params = weights.load_safetensors(tmp_path / "m")
  np.testing.assert_array_equal(params["embed"], tensors["model.embed_tokens.weight"])


@pytest.mark.parametrize("shard", ["../outside.safetensors", "ABSOLUTE"])
def test_weight_map_outside_folder_refused(tmp_path, rng, shard):
  outside = tmp_path / "outside.safetensors"
  shard = str(outside) if shard == "ABSOLUTE" else shard

  def edit(m):
    m["model.norm.weight"] = shard

  tensors = _sharded(tmp_path / "m", rng, edit)
  save_file({"model.norm.weight": tensors["model.norm.weight"]}, str(outside))
  with pytest.raises(weights.WeightsError, match="resolves outside the checkpoint folder"):
    weights.load_safetensors(tmp_path / "m")


def test_tensor_in_unmapped_shard_refused(tmp_path, rng):
  folder = tmp_path / "m"
  tensors = _sharded(folder, rng)
  # A later shard (by file name) also holds the embedding, with other values.
  shard = folder / "model-00002-of-00002.safetensors"
  extra = folder / "model-00003-of-00003.safetensors"
  save_file({"model.embed_tokens.weight": tensors["model.embed_tokens.weight"] + 1},
            str(extra))
  index = json.loads((folder / "model.safetensors.index.json").read_text())
  index["weight_map"]["model.extra_tensor"] = extra.name
  (folder / "model.safetensors.index.json").write_text(json.dumps(index))
  with pytest.raises(weights.WeightsError,
                     match="'model.embed_tokens.weight' is in model-00003-of-00003.safetensors "
                     "but the index maps it to model-00002-of-00002.safetensors"):
    weights.load_safetensors(folder)
  assert shard.exists()


def test_tensor_mapped_to_shard_that_lacks_it_refused(tmp_path, rng):
  def edit(m):
    m["model.norm.weight"] = "model-00001-of-00002.safetensors"

  _sharded(tmp_path / "m", rng, edit)
  with pytest.raises(weights.WeightsError, match="(?s)'model.norm.weight' is mapped to "
                     "model-00001-of-00002.safetensors, which lacks it"):
    weights.load_safetensors(tmp_path / "m")


def test_weight_map_not_an_object_refused(tmp_path, rng):
  _sharded(tmp_path / "m", rng)
  (tmp_path / "m" / "model.safetensors.index.json").write_text('{"weight_map": ["a"]}')
  with pytest.raises(weights.WeightsError, match="weight_map must map tensor names to shard"):
    weights.load_safetensors(tmp_path / "m")


def test_integer_tensor_where_floats_belong(tmp_path, rng):
  (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
  tensors = _tiny_tensors(rng)
  tensors["model.norm.weight"] = np.ones(8, np.int32)
  tensors["model.layers.0.input_layernorm.weight"] = np.ones(8, bool)
  save_file(tensors, str(tmp_path / "model.safetensors"))
  with pytest.raises(weights.WeightsError, match="(?s)2 problem.*'model.layers.0.input_layernorm"
                     ".weight' has dtype bool.*'model.norm.weight' has dtype int32"):
    weights.load_safetensors(tmp_path)


@pytest.mark.parametrize("key,value,match", [
    ("vocab_size", 300.7, "'vocab_size' must be a positive integer, got 300.7"),
    ("hidden_size", 0, "'hidden_size' must be a positive integer, got 0"),
    ("num_hidden_layers", True, "'num_hidden_layers' must be a positive integer, got True"),
    ("max_position_embeddings", -4, "'max_position_embeddings' must be a positive integer"),
    ("rope_theta", 0, "'rope_theta' must be a finite number > 0, got 0"),
    ("rms_norm_eps", -1e-5, "'rms_norm_eps' must be a finite number > 0"),
])
def test_bad_config_values(tmp_path, key, value, match):
  (tmp_path / "config.json").write_text(json.dumps({**HF_CONFIG, key: value}))
  with pytest.raises(weights.WeightsError, match=f"config.json: {match}"):
    weights.read_hf_config(tmp_path)


def test_config_not_an_object(tmp_path):
  (tmp_path / "config.json").write_text("[1, 2]")
  with pytest.raises(weights.WeightsError, match="config.json: expected a JSON object, got list"):
    weights.read_hf_config(tmp_path)


def test_orbax_config_values_checked(tmp_path, rng):
  config = llama.LlamaConfig.from_hf(HF_CONFIG)
  params = {k: np.ones(s, np.float32) for k, s in config.param_shapes().items()}
  weights.save_orbax(tmp_path / "o", config, params)
  path = tmp_path / "o" / weights.ORBAX_CONFIG
  path.write_text(json.dumps({**json.loads(path.read_text()), "rope_theta": -1.0}))
  with pytest.raises(weights.WeightsError, match="llama_config.json: 'rope_theta' must be"):
    weights.load_orbax(tmp_path / "o")


def test_folder_with_safetensors_and_gguf_is_ambiguous(tmp_path, rng):
  (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
  save_file(_tiny_tensors(rng), str(tmp_path / "model.safetensors"))
  (tmp_path / "model.Q4_1.gguf").write_bytes(b"GGUF")
  with pytest.raises(weights.WeightsError, match="ambiguous.*model.Q4_1.gguf"):
    weights.detect_format(tmp_path)


def test_symlink_loop_reported(tmp_path):
  loop = tmp_path / "loop"
  os.symlink(loop, loop)
  with pytest.raises(weights.WeightsError, match="symlink loop"):
    weights.detect_format(loop)


def test_save_orbax_refuses_nan_and_writes_nothing(tmp_path):
  config = llama.LlamaConfig.from_hf(HF_CONFIG)
  params = {k: np.ones(s, np.float32) for k, s in config.param_shapes().items()}
  params["w_up"][0, 1, 2] = np.nan
  with pytest.raises(weights.WeightsError, match=r"\['w_up'\] contain NaN or inf"):
    weights.save_orbax(tmp_path / "o", config, params)
  assert list(tmp_path.iterdir()) == []


def test_save_orbax_failure_keeps_no_partial_folder(tmp_path, monkeypatch):
  config = llama.LlamaConfig.from_hf(HF_CONFIG)
  params = {k: np.ones(s, np.float32) for k, s in config.param_shapes().items()}

  def crash(self):
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(llama.LlamaConfig, "to_json", crash)
  with pytest.raises(OSError):
    weights.save_orbax(tmp_path / "o", config, params)
  assert list(tmp_path.iterdir()) == []
  monkeypatch.undo()
  weights.save_orbax(tmp_path / "o", config, params)
  _, back = weights.load_orbax(tmp_path / "o")
  np.testing.assert_array_equal(back["w_up"], params["w_up"])
