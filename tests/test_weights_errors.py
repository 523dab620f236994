"""Bad input to the weight loaders and the decoder gives clear errors naming the problem."""

import json

import numpy as np
import pytest
import torch
import transformers

from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import llama, load_decoder, weights
from graphloom_jax import assets


def save_tiny(folder, **overrides):
  cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
  cfg.update(overrides)
  torch.manual_seed(0)
  transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).save_pretrained(folder)
  return folder


def test_missing_path(tmp_path):
  with pytest.raises(FileNotFoundError, match="does-not-exist"):
    load_decoder(str(tmp_path / "does-not-exist"))


def test_folder_without_weights(tmp_path):
  (tmp_path / "config.json").write_text("{}")
  with pytest.raises(weights.WeightsError, match="no model.safetensors"):
    load_decoder(str(tmp_path))


def test_truncated_safetensors(tmp_path):
  save_tiny(tmp_path)
  path = tmp_path / "model.safetensors"
  path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
  with pytest.raises(weights.WeightsError, match="model.safetensors.*truncated or corrupt"):
    load_decoder(str(tmp_path))


def test_shape_mismatch_lists_every_problem(tmp_path):
  save_tiny(tmp_path)
  cfg = json.loads((tmp_path / "config.json").read_text())
  cfg["intermediate_size"] = 50  # three MLP tensors per layer now disagree
  (tmp_path / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(weights.WeightsError) as err:
    load_decoder(str(tmp_path))
  message = str(err.value)
  assert "6 problem(s)" in message
  assert "model.layers.1.mlp.down_proj.weight" in message and "(32, 50)" in message


def test_missing_and_unexpected_tensors(tmp_path):
  from safetensors.numpy import load_file, save_file
  save_tiny(tmp_path)
  tensors = load_file(str(tmp_path / "model.safetensors"))
  tensors.pop("model.norm.weight")
  tensors["model.extra.weight"] = np.zeros(3, np.float32)
  save_file(tensors, str(tmp_path / "model.safetensors"))
  with pytest.raises(weights.WeightsError, match="(?s)missing tensor 'model.norm.weight'.*"
                     "unexpected tensor 'model.extra.weight'"):
    load_decoder(str(tmp_path))


def test_unknown_architecture(tmp_path):
  save_tiny(tmp_path)
  cfg = json.loads((tmp_path / "config.json").read_text())
  cfg["architectures"], cfg["model_type"] = ["GPT2LMHeadModel"], "gpt2"
  (tmp_path / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(ValueError, match="unsupported architecture.*GPT2LMHeadModel"):
    load_decoder(str(tmp_path))


def test_corrupt_config_json(tmp_path):
  save_tiny(tmp_path)
  (tmp_path / "config.json").write_text("{not json")
  with pytest.raises(weights.WeightsError, match="config.json: not valid JSON"):
    load_decoder(str(tmp_path))


def test_nan_weights_rejected():
  cfg = llama.LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=8, num_layers=1,
                          num_heads=2, num_kv_heads=1, head_dim=4)
  params = {k: np.ones(s, np.float32) for k, s in cfg.param_shapes().items()}
  params["wq"][0, 0, 0, 0] = np.nan
  with pytest.raises(ValueError, match="'wq' contains NaN"):
    weights.from_params(cfg, params)


def test_orbax_checkpoint_in_an_older_layout(tmp_path):
  cfg = llama.LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=12, num_layers=1,
                          num_heads=2, num_kv_heads=1, head_dim=4)
  params = {k: np.ones(s, np.float32) for k, s in cfg.param_shapes().items()}
  params["w_gate"] = np.ones((1, 8, 12), np.float32)  # (in, out), as older versions stored it
  weights.save_orbax(tmp_path / "old", cfg, params)
  with pytest.raises(weights.WeightsError, match=r"converted again(.|\n)*"
                     r"'w_gate' has shape \(1, 8, 12\), config expects \(1, 12, 8\)"):
    load_decoder(str(tmp_path / "old"))


@pytest.mark.skipif(not assets.available("smollm2"), reason="embedded SmolLM2 not installed")
def test_truncated_gguf(tmp_path):
  data = assets.smollm2_gguf().read_bytes()
  bad = tmp_path / "broken.gguf"
  bad.write_bytes(data[: len(data) // 3])
  with pytest.raises(weights.WeightsError, match="broken.gguf"):
    load_decoder(str(bad))


def test_wrong_file_type(tmp_path):
  (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
  with pytest.raises(weights.WeightsError, match="must be .gguf"):
    load_decoder(str(tmp_path / "weights.bin"))


@pytest.fixture(scope="module")
def tiny_decoder():
  cfg = llama.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=16, num_layers=1,
                          num_heads=2, num_kv_heads=1, head_dim=8, max_position_embeddings=32)
  return decoder_lib.random_decoder(cfg)


def test_prompt_too_long(tiny_decoder):
  with pytest.raises(ValueError, match="exceeds the context of 32 tokens"):
    tiny_decoder.generate_ids([[5] * 30], max_new_tokens=8)
  with pytest.raises(ValueError, match="exceeds the context"):
    tiny_decoder.logits(np.ones((1, 40), np.int32))


def test_empty_prompts(tiny_decoder):
  with pytest.raises(ValueError, match="prompt 1 is empty"):
    tiny_decoder.generate_ids([[3, 4], []], max_new_tokens=2)
  with pytest.raises(ValueError, match="no prompts"):
    tiny_decoder.generate_ids([], max_new_tokens=2)
  with pytest.raises(ValueError, match="non-empty"):
    tiny_decoder.logits(np.zeros((1, 0), np.int32))


def test_token_ids_out_of_range(tiny_decoder):
  with pytest.raises(ValueError, match=r"out of range \[0, 64\)"):
    tiny_decoder.logits(np.asarray([[1, 64]]))


def test_text_prompts_need_a_tokenizer(tiny_decoder):
  with pytest.raises(ValueError, match="no tokenizer"):
    tiny_decoder.generate(["hello"])
