"""Parity of the Flax Llama with transformers' PyTorch LlamaForCausalLM, through every loader."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx, serialization, traverse_util

from graphloom_jax.models import decoder as decoder_lib
import fakes
from graphloom_jax.models import llama, load_decoder, weights

PROMPT_LEN = 520


def tiny_hf_config(tied: bool) -> transformers.LlamaConfig:
  return transformers.LlamaConfig(
      vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
      rms_norm_eps=1e-5, tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2,
      rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                           low_freq_factor=1.0, high_freq_factor=4.0,
                           original_max_position_embeddings=64))


def build_torch_model(tied: bool, seed: int) -> transformers.LlamaForCausalLM:
  torch.manual_seed(seed)
  model = transformers.LlamaForCausalLM(tiny_hf_config(tied)).eval()
  with torch.no_grad():  # norms away from 1 so that a wrong norm weight cannot hide
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1 + 0.1 * torch.randn_like(p))
  return model


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def torch_model(request, tmp_path_factory):
  model = build_torch_model(request.param, seed=1234 + request.param)
  folder = tmp_path_factory.mktemp("hf")
  model.save_pretrained(folder, safe_serialization=True)
  return model, folder


def torch_outputs(model, ids):
  with torch.no_grad():
    out = model(torch.as_tensor(ids), output_hidden_states=True)
  return out.logits.numpy(), [h.numpy() for h in out.hidden_states]


def random_ids(rng, batch, length, vocab=320):
  return rng.integers(3, vocab, size=(batch, length)).astype(np.int32)


def test_config_reads_llama3_rope(torch_model):
  _, folder = torch_model
  cfg = weights.read_hf_config(folder)
  assert cfg.rope_theta == 500000.0
  assert cfg.scaling["rope_type"] == "llama3" and cfg.scaling["factor"] == 8.0
  assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (4, 2, 16)


def test_safetensors_logits_and_hidden_states(torch_model):
  model, folder = torch_model
  dec = load_decoder(str(folder))
  ids = random_ids(np.random.default_rng(0), 2, PROMPT_LEN)
  ref_logits, ref_hidden = torch_outputs(model, ids)
  np.testing.assert_allclose(dec.logits(ids), ref_logits, atol=1e-4, rtol=0)
  hidden = dec.hidden_states(ids)
  assert hidden.shape[0] == dec.config.num_layers + 1
  for layer in range(dec.config.num_layers):  # HF's last entry is after the final norm
    np.testing.assert_allclose(hidden[layer], ref_hidden[layer], atol=1e-5, rtol=0,
                               err_msg=f"hidden state {layer}")


def test_left_padding_matches_unpadded(torch_model):
  _, folder = torch_model
  dec = load_decoder(str(folder))
  rng = np.random.default_rng(1)
  short = random_ids(rng, 1, 40)
  padded = np.concatenate([np.zeros((1, 24), np.int32), short], axis=1)
  mask = np.concatenate([np.zeros((1, 24), bool), np.ones((1, 40), bool)], axis=1)
  np.testing.assert_allclose(dec.logits(padded, mask)[:, 24:], dec.logits(short), atol=1e-5)


def test_cached_decoding_equals_full_forward(torch_model):
  _, folder = torch_model
  dec = load_decoder(str(folder))
  ids = random_ids(np.random.default_rng(2), 2, 300)
  full = dec.logits(ids)
  model = dec.model

  @nnx.jit(static_argnames="unstacked")
  def step(model, tokens, cache, unstacked):
    weights = model.unstacked_layer_params() if unstacked else None
    logits, cache, _ = model(tokens, cache, layer_weights=weights)
    return logits, cache

  for unstacked in (False, True):  # scan over stacked weights; loop over fused per-layer ones
    cache = llama.KVCache.init(dec.config, 2, 320)
    prefix_logits, cache = step(model, jnp.asarray(ids[:, :280]), cache, unstacked)
    pieces = [np.asarray(prefix_logits)]
    for i in range(280, 300):
      logits, cache = step(model, jnp.asarray(ids[:, i:i + 1]), cache, unstacked)
      pieces.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=1e-4, rtol=0)


def test_sharded_safetensors(tmp_path):
  model = build_torch_model(False, seed=7)
  model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="100KB")
  assert (tmp_path / "model.safetensors.index.json").exists()
  ids = random_ids(np.random.default_rng(3), 1, PROMPT_LEN)
  ref, _ = torch_outputs(model, ids)
  np.testing.assert_allclose(load_decoder(str(tmp_path)).logits(ids), ref, atol=1e-4, rtol=0)


def write_flax_msgpack(model: transformers.LlamaForCausalLM, folder: pathlib.Path):
  """Writes the checkpoint layout of transformers 4.x FlaxLlamaForCausalLM: Linen modules
  model/embed_tokens/embedding, model/layers/<i>/self_attn/q_proj/kernel (in, out), ...,
  model/norm/weight and lm_head/kernel."""
  tree = {}
  for name, tensor in model.state_dict().items():
    array = tensor.numpy()
    parts = name.split(".")
    if parts[-2] == "embed_tokens":
      parts[-1] = "embedding"
    elif parts[-1] == "weight" and array.ndim == 2:
      parts[-1], array = "kernel", array.T
    tree[tuple(parts)] = array
  if model.config.tie_word_embeddings:
    tree.pop(("lm_head", "kernel"), None)
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "flax_model.msgpack").write_bytes(
      serialization.msgpack_serialize(traverse_util.unflatten_dict(tree)))
  (folder / "config.json").write_text(json.dumps(model.config.to_dict()))


@pytest.mark.parametrize("tied", [True, False])
def test_flax_msgpack(tmp_path, tied):
  model = build_torch_model(tied, seed=11)
  write_flax_msgpack(model, tmp_path)
  ids = random_ids(np.random.default_rng(4), 1, PROMPT_LEN)
  ref, _ = torch_outputs(model, ids)
  np.testing.assert_allclose(load_decoder(str(tmp_path)).logits(ids), ref, atol=1e-4, rtol=0)


def test_orbax_round_trip_and_bfloat16(torch_model, tmp_path):
  model, folder = torch_model
  config, params = weights.load_safetensors(folder)
  weights.save_orbax(tmp_path / "ckpt", config, params)
  dec = load_decoder(str(tmp_path / "ckpt"))
  ids = random_ids(np.random.default_rng(5), 1, 128)
  ref, _ = torch_outputs(model, ids)
  np.testing.assert_allclose(dec.logits(ids), ref, atol=1e-4, rtol=0)
  bf16 = load_decoder(str(tmp_path / "ckpt"), dtype="bfloat16")
  assert bf16.model.wqkv.value.dtype == jnp.bfloat16
  agree = np.mean(bf16.logits(ids).argmax(-1) == ref.argmax(-1))
  assert agree > 0.9, agree


def test_hf_round_trip_of_our_layout(torch_model):
  model, folder = torch_model
  config, params = weights.load_safetensors(folder)
  back = fakes.hf_tensors(config, params)
  for name, tensor in model.state_dict().items():
    if name == "lm_head.weight" and config.tie_word_embeddings:
      continue
    np.testing.assert_array_equal(back[name], tensor.numpy(), err_msg=name)


def test_sampling_is_seeded_and_greedy_is_argmax(torch_model):
  _, folder = torch_model
  dec = load_decoder(str(folder))
  prompt = [list(random_ids(np.random.default_rng(6), 1, 30)[0])]
  greedy = dec.generate_ids(prompt, 5, eos_ids=[-1])[0]
  ids = np.asarray(prompt, np.int32)
  for tok in greedy:  # each greedy token is the argmax of the full forward on the prefix
    assert tok == int(dec.logits(ids)[0, -1].argmax())
    ids = np.concatenate([ids, [[tok]]], axis=1)
  a = dec.generate_ids(prompt, 8, temperature=1.0, top_p=0.9, seed=3, eos_ids=[-1])
  b = dec.generate_ids(prompt, 8, temperature=1.0, top_p=0.9, seed=3, eos_ids=[-1])
  c = dec.generate_ids(prompt, 8, temperature=1.0, top_p=0.9, seed=4, eos_ids=[-1])
  assert a == b and len(a[0]) == 8
  assert a != c


def test_generation_layer_weights_are_sliced_once(torch_model):
  """The unstacked generation loop reads per-layer copies made on first use and kept: equal to
  the stack's slices, the same arrays on the next call, remade when the state is replaced; the
  greedy tokens equal the scanned loop's."""
  _, folder = torch_model
  dec = load_decoder(str(folder))
  dec.unstack_layers = True
  prompt = [list(random_ids(np.random.default_rng(7), 1, 40)[0])]
  unstacked = dec.generate_ids(prompt, 6, eos_ids=[-1])
  first = dec.layer_weights()
  stack = dec.model.layer_params()
  for i, layer in enumerate(first):
    for name, w in layer.items():
      np.testing.assert_array_equal(np.asarray(w), np.asarray(stack[name][i]), err_msg=name)
  dec.generate_ids(prompt, 3, eos_ids=[-1])
  assert dec.layer_weights() is first
  dec._state = jax.tree.map(lambda a: a, dec._state)  # a replaced state
  assert dec.layer_weights() is not first
  dec.unstack_layers = False
  assert dec.generate_ids(prompt, 6, eos_ids=[-1]) == unstacked


def test_top_p_keeps_smallest_nucleus():
  logits = jnp.log(jnp.asarray([[0.5, 0.3, 0.15, 0.05]]))
  seen = set()
  for s in range(200):
    seen.add(int(decoder_lib._sample(logits, jax.random.key(s), 1.0, 0.7, True)[0]))
  assert seen == {0, 1}  # 0.5 < 0.7 needs the second token; the third is outside the nucleus


def test_eight_b_config_shapes_without_memory():
  from graphloom_jax.configs import llama3_8b
  cfg = llama.config_from_arch(llama3_8b.get_config().model.arch)
  abstract = llama.abstract_model(cfg, jnp.bfloat16)
  assert abstract.wqkv.value.shape == (32, 8, 4 + 2, 128, 4096)  # 8 kv groups of 4 q heads
  n = sum(int(np.prod(s)) for s in cfg.param_shapes().values())
  assert 8.0e9 < n < 8.1e9, n


def test_convert_to_orbax_round_trip(torch_model, tmp_path):
  model, folder = torch_model
  out = decoder_lib.convert_to_orbax(str(folder), str(tmp_path / "converted"))
  ids = random_ids(np.random.default_rng(8), 1, 64)
  ref, _ = torch_outputs(model, ids)
  np.testing.assert_allclose(load_decoder(str(out)).logits(ids), ref, atol=1e-4, rtol=0)
  with pytest.raises(FileExistsError, match="not empty"):
    decoder_lib.convert_to_orbax(str(folder), str(out))


@pytest.mark.parametrize("dtype,atol", [(jnp.float32, 1e-6), (jnp.bfloat16, 2e-2)])
def test_fused_prefill_attention_equals_einsum_path(rng, dtype, atol):
  """Prefill self-attention through jax.nn.dot_product_attention equals the partial-softmax
  einsum form that KG-JSA++ merges, with GQA, a left-padded row and a cache longer than the
  prompt (its unwritten slots masked)."""
  cfg = llama.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1,
                          num_heads=8, num_kv_heads=2, head_dim=16)
  b, t, s = 2, 40, 56
  q = jnp.asarray(rng.standard_normal((b, t, 8, 16)), dtype)
  keys = jnp.asarray(rng.standard_normal((1, b, s, 2, 16)), dtype)
  values = jnp.asarray(rng.standard_normal((1, b, s, 2, 16)), dtype)
  token_valid = np.ones((b, t), bool)
  token_valid[1, :9] = False
  cache = llama.KVCache.init(cfg, b, s, dtype)
  step = llama.init_random(cfg).step_context(cache, jnp.asarray(token_valid), None)
  caches = (keys, values, None, None)
  fused, lse = llama.self_attention(q, caches, 0, step, None, fused=True)
  einsum, _ = llama.self_attention(q, caches, 0, step, None, fused=False)
  assert lse is None and fused.dtype == dtype
  real = token_valid  # rows with at least one valid key
  np.testing.assert_allclose(np.asarray(fused, np.float32)[real],
                             np.asarray(einsum, np.float32)[real], atol=atol, rtol=0)
  assert llama.fused_attention_impl(dtype, 16) == "xla"  # no GPU here


@pytest.mark.parametrize("rows", [(1, 1), (1, 3), (2, 1)])
def test_project_accumulates_in_float32_for_every_row_count(rows):
  """`project` (one decode row is padded to two for bfloat16 on CPU) equals a float64 product of
  the same bfloat16 values rounded once to the output dtype, for one row and several."""
  rng = np.random.default_rng(sum(rows))
  b, t = rows
  x = jnp.asarray(rng.normal(size=(b, t, 96)), jnp.bfloat16)
  w = jnp.asarray(rng.normal(size=(200, 96)), jnp.bfloat16)
  want = np.einsum("bte,oe->bto", np.asarray(x, np.float64), np.asarray(w, np.float64))
  got32 = llama.project(x, w, jnp.float32)
  assert got32.dtype == jnp.float32 and got32.shape == (b, t, 200)
  np.testing.assert_allclose(np.asarray(got32), want, rtol=1e-5, atol=1e-5)
  got = llama.project(x, w)
  assert got.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(got), np.asarray(jnp.asarray(got32).astype(
      jnp.bfloat16)))
  xf, wf = x.astype(jnp.float32), w.astype(jnp.float32)
  np.testing.assert_allclose(np.asarray(llama.project(xf, wf)), want, rtol=1e-5, atol=1e-4)
