"""KG-JSA++ inside the decoder, against a PyTorch re-implementation of the equations written
here: memory layers attend with one softmax over [prefix; active slots; own cache] (prefix and
slots mapped through the layer's frozen norm and k/v projections, no rotary phase), and decoding
steps read only the sparse set I_t = sink + recent + most cosine-similar keys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from graphloom_jax.models import llama, load_decoder
from graphloom_jax.models import memory as memory_lib

N_HEADS, N_KV, HEAD, WIDTH = 4, 2, 16, 64


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  torch.manual_seed(0)
  cfg = transformers.LlamaConfig(
      vocab_size=200, hidden_size=WIDTH, intermediate_size=96, num_hidden_layers=4,
      num_attention_heads=N_HEADS, num_key_value_heads=N_KV, head_dim=HEAD,
      max_position_embeddings=1024, rope_theta=10000.0, rms_norm_eps=1e-5,
      tie_word_embeddings=False)
  ref = transformers.LlamaForCausalLM(cfg).eval()
  with torch.no_grad():
    for name, p in ref.named_parameters():
      if "norm" in name:
        p.copy_(1 + 0.1 * torch.randn_like(p))
  folder = tmp_path_factory.mktemp("kgjsa")
  ref.save_pretrained(folder)
  return ref, load_decoder(str(folder))


def rms(x, w, eps=1e-5):
  return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def torch_reference(ref, ids, mem=None, first=2, sparse=None):
  """Logits [B,T,V] (and slot probabilities per memory layer) of the equations, from scratch.

  mem: dict of numpy arrays prefix [B,P,D], prefix_mask [B,P], slot_keys/values [B,M,D],
  slot_mask [B,T,M], slot_bias [B,T,M]. sparse: (sink, recent, similar) applied to the last
  query position only, with cosine similarity to the mean query of each kv group.
  """
  m = ref.model
  b, t = ids.shape
  x = m.embed_tokens(torch.as_tensor(ids))
  pos = torch.arange(t)[None].expand(b, t)
  cos, sin = m.rotary_emb(x, pos)
  group = N_HEADS // N_KV
  slot_probs = []
  for li, layer in enumerate(m.layers):
    a = layer.self_attn
    w_in = layer.input_layernorm.weight
    h = rms(x, w_in)
    q = a.q_proj(h).view(b, t, N_HEADS, HEAD).transpose(1, 2)
    k = a.k_proj(h).view(b, t, N_KV, HEAD).transpose(1, 2)
    v = a.v_proj(h).view(b, t, N_KV, HEAD).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    allowed = torch.ones(t, t).tril().bool()[None, None].expand(b, N_KV, t, t).clone()
    if sparse is not None:
      sink, recent, similar = sparse
      qs = q[:, :, -1].view(b, N_KV, group, HEAD).mean(2)  # [B,K,H]
      cosine = torch.nn.functional.cosine_similarity(qs[:, :, None], k, dim=-1)  # [B,K,S]
      keep = torch.zeros(b, N_KV, t, dtype=torch.bool)
      keep[:, :, :sink] = True
      keep[:, :, t - recent:] = True
      rest = cosine.masked_fill(keep, -float("inf"))
      top = rest.topk(similar, dim=-1).indices
      keep.scatter_(2, top, True)
      allowed[:, :, -1] = keep
    keys, values = [k], [v]
    bias = [torch.zeros(b, N_KV, t, t)]
    masks = [allowed]
    use_mem = mem is not None and li >= first
    if use_mem:
      def kv(vectors, proj):
        hv = rms(torch.as_tensor(vectors), w_in)
        return proj(hv).view(b, -1, N_KV, HEAD).transpose(1, 2)
      pk, pv = kv(mem["prefix"], a.k_proj), kv(mem["prefix"], a.v_proj)
      sk, sv = kv(mem["slot_keys"], a.k_proj), kv(mem["slot_values"], a.v_proj)
      p_len, m_len = pk.shape[2], sk.shape[2]
      keys, values = [pk, sk, k], [pv, sv, v]
      pmask = torch.as_tensor(mem["prefix_mask"])[:, None, None, :].expand(b, N_KV, t, p_len)
      smask = torch.as_tensor(mem["slot_mask"])[:, None].expand(b, N_KV, t, m_len)
      sbias = torch.as_tensor(mem["slot_bias"])[:, None].expand(b, N_KV, t, m_len)
      masks = [pmask, smask, allowed]
      bias = [torch.zeros(b, N_KV, t, p_len), sbias, bias[0]]
    key = torch.cat(keys, 2).repeat_interleave(group, 1)
    val = torch.cat(values, 2).repeat_interleave(group, 1)
    mask = torch.cat(masks, -1).repeat_interleave(group, 1)
    scores = q @ key.transpose(-1, -2) / HEAD ** 0.5 + torch.cat(bias, -1).repeat_interleave(
        group, 1)
    probs = torch.softmax(scores.masked_fill(~mask, -float("inf")), -1)
    if use_mem:
      slot_probs.append(probs[..., p_len:p_len + m_len].transpose(1, 2))  # [B,T,N,M]
    out = (probs @ val).transpose(1, 2).reshape(b, t, -1)
    x = x + a.o_proj(out)
    x = x + layer.mlp(rms(x, layer.post_attention_layernorm.weight))
  logits = ref.lm_head(rms(x, m.norm.weight))
  return logits, slot_probs


def random_memory(rng, b, t, p=5, m=6):
  mem = dict(
      prefix=rng.normal(size=(b, p, WIDTH)).astype(np.float32),
      prefix_mask=rng.random((b, p)) > 0.3,
      slot_keys=rng.normal(size=(b, m, WIDTH)).astype(np.float32),
      slot_values=rng.normal(size=(b, m, WIDTH)).astype(np.float32),
      slot_mask=rng.random((b, t, m)) > 0.4,
      slot_bias=np.log(rng.uniform(0.3, 1.0, size=(b, t, m))).astype(np.float32))
  mem["slot_mask"][0, :, :] = False  # a row where every slot is masked
  return mem


def to_memory(mem):
  return memory_lib.Memory(
      prefix=jnp.asarray(mem["prefix"]), prefix_mask=jnp.asarray(mem["prefix_mask"]),
      slot_keys=jnp.asarray(mem["slot_keys"]), slot_values=jnp.asarray(mem["slot_values"]),
      slot_valid=jnp.ones(mem["slot_keys"].shape[:2], bool),
      slot_active=jnp.asarray(mem["slot_mask"]), slot_bias=jnp.asarray(mem["slot_bias"]))


def forward(model, ids, **kwargs):
  @nnx.jit(static_argnames=("first_layer", "return_slot_attention", "sparse"))
  def run(model, ids, memory, first_layer, return_slot_attention, sparse):
    cache = llama.KVCache.init(model.config, ids.shape[0], ids.shape[1],
                               block_size=sparse.block_size if sparse else 0)
    logits, _, aux = model(ids, cache, memory=memory, first_layer=first_layer,
                           return_slot_attention=return_slot_attention, sparse=sparse)
    return logits, aux
  kwargs.setdefault("memory", None)
  kwargs.setdefault("first_layer", -1)
  kwargs.setdefault("return_slot_attention", False)
  kwargs.setdefault("sparse", None)
  return run(model, jnp.asarray(ids), **kwargs)


def test_joint_attention_decoder_matches_torch(models):
  ref, dec = models
  rng = np.random.default_rng(1)
  ids = rng.integers(0, 200, size=(2, 40)).astype(np.int32)
  mem = random_memory(rng, 2, 40)
  with torch.no_grad():
    expected, expected_slots = torch_reference(ref, ids, mem, first=2)
  logits, aux = forward(dec.model, ids, memory=to_memory(mem), first_layer=2,
                        return_slot_attention=True)
  np.testing.assert_allclose(np.asarray(logits), expected.numpy(), atol=1e-4, rtol=0)
  slots = np.asarray(aux["slot_attention"])  # [L_m, B, T, N, M]
  assert slots.shape == (2, 2, 40, N_HEADS, 6)
  np.testing.assert_allclose(slots, np.stack([s.numpy() for s in expected_slots]), atol=1e-5)
  assert np.all(slots[:, 0] == 0)  # the row without active slots gives them no mass
  # the public API agrees with the module call
  np.testing.assert_allclose(dec.logits(ids, memory=to_memory(mem), first_layer=2),
                             np.asarray(logits), atol=1e-6)


def test_token_values_add_the_decoders_own_embeddings_of_the_value(models):
  """With slot_value_tokens, each slot value gains the mean of the decoder's input embeddings
  of its value tokens (-1 padding skipped; a row of only padding adds nothing) before the
  memory layers' norm and k/v projections."""
  ref, dec = models
  rng = np.random.default_rng(3)
  ids = rng.integers(0, 200, size=(2, 24)).astype(np.int32)
  mem = random_memory(rng, 2, 24)
  mem["slot_values"] *= 0.02  # the scale of this model's embeddings, so both parts count
  tokens = np.full((2, 6, 4), -1, np.int32)
  for bi in range(2):
    for p in range(5):  # slot 5 keeps no tokens
      n = 1 + (bi + p) % 4
      tokens[bi, p, 4 - n:] = rng.integers(0, 200, size=n)
  with torch.no_grad():
    table = ref.model.embed_tokens.weight
    added = dict(mem, slot_values=mem["slot_values"] + np.stack([np.stack([
        table[torch.as_tensor(row[row >= 0])].mean(0).numpy() if (row >= 0).any()
        else np.zeros(WIDTH, np.float32) for row in rows]) for rows in tokens]))
    expected, _ = torch_reference(ref, ids, added, first=2)
    unchanged, _ = torch_reference(ref, ids, mem, first=2)
  memory = to_memory(mem).replace(slot_value_tokens=jnp.asarray(tokens))
  logits, _ = forward(dec.model, ids, memory=memory, first_layer=2)
  np.testing.assert_allclose(np.asarray(logits), expected.numpy(), atol=1e-4, rtol=0)
  assert np.abs(expected.numpy() - unchanged.numpy()).max() > 1e-2  # the tokens moved logits
  kv = dec.model.project_memory(memory, 2)
  plain = dec.model.project_memory(to_memory(mem), 2)
  np.testing.assert_allclose(np.asarray(kv.slot_v[:, :, 5]), np.asarray(plain.slot_v[:, :, 5]),
                             atol=1e-6)  # no tokens: the value as it was
  np.testing.assert_array_equal(np.asarray(kv.slot_k), np.asarray(plain.slot_k))  # keys kept


def test_empty_memory_equals_plain_decoder(models):
  _, dec = models
  ids = np.random.default_rng(2).integers(0, 200, size=(2, 64)).astype(np.int32)
  empty = memory_lib.empty(2, WIDTH, prefix_len=3, num_slots=4)
  with_memory = dec.logits(ids, memory=empty, first_layer=0)
  # Equal up to float32 rounding: without memory the prefill runs jax.nn.dot_product_attention,
  # memory layers the partial softmaxes they merge.
  np.testing.assert_allclose(with_memory, dec.logits(ids), atol=1e-6, rtol=0)


def test_router_sees_first_memory_layer_stream(models):
  _, dec = models
  rng = np.random.default_rng(3)
  ids = rng.integers(0, 200, size=(1, 12)).astype(np.int32)
  mem = to_memory(random_memory(rng, 1, 12))
  seen = {}

  def route(h, memory):
    seen["shape"] = h.shape
    score = jnp.einsum("BTD,BMD->BTM", h, memory.slot_keys)
    return score > 0, jax.nn.log_sigmoid(score)

  logits, aux = forward(dec.model, ids, memory=mem.replace(slot_active=None, slot_bias=None),
                        first_layer=2)
  hidden = dec.hidden_states(ids)[2]  # residual stream entering layer 2
  score = np.einsum("BTD,BMD->BTM", hidden, np.asarray(mem.slot_keys))

  @nnx.jit
  def routed(model, ids, memory):
    cache = llama.KVCache.init(model.config, 1, 12)
    return model(ids, cache, memory=memory, route=route, first_layer=2)[2]
  aux = routed(dec.model, jnp.asarray(ids), mem)
  assert seen["shape"] == (1, 12, WIDTH)
  np.testing.assert_array_equal(np.asarray(aux["slot_active"]), score > 0)
  assert len(set(map(tuple, np.asarray(aux["slot_active"])[0].tolist()))) > 1  # changes with t


@pytest.mark.parametrize("block_size", [0, 8])
def test_sparse_decoding_with_full_budget_equals_dense(models, block_size):
  _, dec = models
  ids = np.random.default_rng(4).integers(0, 200, size=(2, 20)).astype(np.int32)
  dense = dec.generate_ids([list(r) for r in ids], 12, eos_ids=[-1])
  spec = llama.SparseSpec(num_sink=4, num_recent=16, num_similar=16, block_size=block_size)
  sparse = dec.generate_ids([list(r) for r in ids], 12, eos_ids=[-1], sparse=spec)
  assert sparse == dense


def test_sparse_step_matches_torch_selection(models):
  ref, dec = models
  rng = np.random.default_rng(5)
  ids = rng.integers(0, 200, size=(2, 60)).astype(np.int32)
  spec = llama.SparseSpec(num_sink=2, num_recent=8, num_similar=6, block_size=0)

  @nnx.jit(static_argnames=("sparse",))
  def step(model, ids, sparse):
    cache = llama.KVCache.init(model.config, 2, 64)
    _, cache, _ = model(ids[:, :-1], cache)
    return model(ids[:, -1:], cache, sparse=sparse)[0]
  got = np.asarray(step(dec.model, jnp.asarray(ids), spec))[:, 0]
  with torch.no_grad():
    expected, _ = torch_reference(ref, ids, sparse=(2, 8, 6))
  np.testing.assert_allclose(got, expected[:, -1].numpy(), atol=1e-4, rtol=0)
  dense = np.asarray(step(dec.model, jnp.asarray(ids), None))[:, 0]
  assert np.max(np.abs(dense - got)) > 1e-3  # the sparse set really is smaller


def test_generate_with_memory_and_router_runs_per_step(models):
  _, dec = models
  rng = np.random.default_rng(6)
  mem = to_memory(random_memory(rng, 2, 1))

  class Router(nnx.Module):
    def __init__(self):
      self.w = nnx.Param(jnp.asarray(rng.normal(size=(WIDTH,)), jnp.float32))

    def __call__(self, h, memory):
      score = jnp.einsum("BTD,D,BMD->BTM", h, self.w.value, memory.slot_keys)
      return score > 0, jax.nn.log_sigmoid(score)

  prompts = [list(rng.integers(0, 200, size=9)), list(rng.integers(0, 200, size=14))]
  out = dec.generate_ids(prompts, 6, eos_ids=[-1], memory=mem, router=Router(), first_layer=2)
  # teacher-forced check: each generated token is the argmax of a full forward with memory
  ids = np.asarray([prompts[0] + out[0]], np.int32)
  single = jax.tree.map(lambda x: x[:1], mem)
  logits = dec.logits(ids, memory=single, router=Router(), first_layer=2)
  assert out[0] == logits[0, len(prompts[0]) - 1:-1].argmax(-1).tolist()

  # The decode loop's two weight forms (fused per-layer buffers / the scanned stack) give the
  # same logits, teacher-forced through a prefill and sparse single-token steps with memory.
  spec = llama.SparseSpec(num_sink=2, num_recent=4, num_similar=4, block_size=4)
  router = Router()

  @nnx.jit(static_argnames="unstacked")
  def run(model, router, ids, unstacked):
    weights = model.unstacked_layer_params() if unstacked else None
    kw = dict(memory=mem, route=router, first_layer=2, sparse=spec, layer_weights=weights)
    cache = llama.KVCache.init(model.config, 2, 32, block_size=4)
    logits, cache, _ = model(ids[:, :12], cache, **kw)
    pieces = [logits]
    for i in range(12, 20):
      logits, cache, _ = model(ids[:, i:i + 1], cache, **kw)
      pieces.append(logits)
    return jnp.concatenate(pieces, axis=1)

  ids = jnp.asarray(rng.integers(0, 200, size=(2, 20)), jnp.int32)
  np.testing.assert_allclose(np.asarray(run(dec.model, router, ids, True)),
                             np.asarray(run(dec.model, router, ids, False)), atol=1e-5, rtol=0)


def test_generation_tracks_slot_mentions_like_teacher_forcing(models):
  """The decode loop updates the output-mention flags at every step exactly as
  `with_output_mentions` computes them for the finished sequence."""
  _, dec = models
  rng = np.random.default_rng(7)
  m = 6

  class MentionRouter(nnx.Module):  # slots switch off once their name has been generated
    def __call__(self, h, memory):
      b, t = h.shape[:2]
      seen = (memory.slot_mentioned if memory.slot_mentioned is not None
              else jnp.zeros((b, t, m), bool))
      return memory.slot_valid[:, None, :] & ~seen, jnp.zeros((b, t, m), h.dtype)

  mem = to_memory(random_memory(rng, 1, 1, m=m)).replace(slot_active=None, slot_bias=None)
  prompt = list(rng.integers(0, 200, size=11))
  free = dec.generate_ids([prompt], 10, eos_ids=[-1], memory=mem, router=MentionRouter(),
                          first_layer=2)[0]
  key_tokens = np.full((1, m, 4), -1, np.int32)
  key_tokens[0, 0, -2:] = free[2:4]  # a name the unconstrained run generates
  key_tokens[0, 1, -1:] = free[0]
  key_tokens[0, 2, -3:] = [199, 198, 197]
  mem = mem.replace(slot_key_tokens=jnp.asarray(key_tokens))
  out = dec.generate_ids([prompt], 10, eos_ids=[-1], memory=mem, router=MentionRouter(),
                         first_layer=2)[0]
  ids = np.asarray([prompt + out], np.int32)
  output_mask = np.arange(ids.shape[1])[None] >= len(prompt)
  forced = memory_lib.with_output_mentions(mem, jnp.asarray(ids), jnp.asarray(output_mask))
  assert np.asarray(forced.slot_mentioned)[0, -1, 1]  # slot 1's name (the first token) was seen
  logits = dec.logits(ids, memory=forced, router=MentionRouter(), first_layer=2)
  assert out == logits[0, len(prompt) - 1:-1].argmax(-1).tolist()
  bad = mem.replace(slot_key_tokens=jnp.asarray(key_tokens[:, :4]))
  with pytest.raises(ValueError, match=r"slot_key_tokens has shape \(1, 4, 4\)"):
    dec.generate_ids([prompt], 4, memory=bad, router=MentionRouter(), first_layer=2)
