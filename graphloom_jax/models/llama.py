"""Llama decoder in Flax NNX with a pytree KV cache; the math lives in graphloom_jax/ops.

Shapes: B batch, T new tokens, S cache slots, L layers, D model width, N query heads,
K kv heads, H head dim, F MLP width, V vocabulary.

Layer parameters are stacked on a leading L axis and the forward pass is a `lax.scan` over
layers: compile time does not grow with depth, and an 8B configuration can be shape-checked
with `nnx.eval_shape` on a laptop. Rows of a batch are left-padded; `KVCache.valid` marks real
tokens and positions count real tokens only, so a padded row computes exactly what it would
alone.
"""

import dataclasses
import functools
import json
from typing import Any, Iterable, Mapping, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graphloom_jax.models import memory as memory_lib
from graphloom_jax.ops import attention as attention_ops
from graphloom_jax.ops import joint_attention as joint
from graphloom_jax.ops import norms
from graphloom_jax.ops import rope
from graphloom_jax.ops import sparse_kv

LAYER_PARAMS = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")

# How each parameter is split over a ("data", "model") mesh: Megatron's tensor parallelism on
# "model" (column-parallel Q/K/V and gate/up, each device holding whole heads or MLP rows;
# row-parallel output and down projections, whose partial sums XLA all-reduces; vocabulary-
# parallel embedding and head), everything replicated over "data". Shapes in `param_shapes`.
PARTITIONS = {
    "embed": P("model", None),  # [V, D]
    "attn_norm": P(),  # [L, D]
    "wq": P(None, "model"),  # [L, N, H, D]
    "wk": P(None, "model"),  # [L, K, H, D]
    "wv": P(None, "model"),  # [L, K, H, D]
    "wo": P(None, None, "model"),  # [L, D, N, H]
    "mlp_norm": P(),  # [L, D]
    "w_gate": P(None, "model"),  # [L, F, D]
    "w_up": P(None, "model"),  # [L, F, D]
    "w_down": P(None, None, "model"),  # [L, D, F]
    "final_norm": P(),  # [D]
    "lm_head": P("model", None),  # [V, D]
}


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rope_theta: float = 10000.0
  rope_scaling: tuple[tuple[str, Any], ...] | None = None  # sorted items, hashable for jit
  rms_norm_eps: float = 1e-5
  tie_word_embeddings: bool = False
  max_position_embeddings: int = 2048
  bos_token_id: int | None = None
  eos_token_ids: tuple[int, ...] = ()

  def __post_init__(self):
    problems = []
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                 "num_kv_heads", "head_dim"):
      if int(getattr(self, name)) <= 0:
        problems.append(f"{name} must be positive, got {getattr(self, name)}")
    if self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads:
      problems.append(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                      f"({self.num_kv_heads})")
    if self.head_dim % 2:
      problems.append(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
    if problems:
      raise ValueError("invalid Llama config: " + "; ".join(problems))

  @property
  def scaling(self) -> dict[str, Any] | None:
    return dict(self.rope_scaling) if self.rope_scaling else None

  @classmethod
  def from_hf(cls, hf: Mapping[str, Any], source: str = "config") -> "LlamaConfig":
    """Builds a config from a Hugging Face `config.json` dictionary."""
    arch = hf.get("architectures") or []
    model_type = hf.get("model_type")
    if model_type not in (None, "llama") or (arch and not any("Llama" in a for a in arch)):
      raise ValueError(f"{source}: unsupported architecture {arch or model_type!r}; "
                       "graphloom_jax loads Llama-family decoders (model_type 'llama')")
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size",
                           "num_hidden_layers", "num_attention_heads") if k not in hf]
    if missing:
      raise ValueError(f"{source}: missing required fields {missing}")
    heads = int(hf["num_attention_heads"])
    eos = hf.get("eos_token_id")
    eos = () if eos is None else tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
    scaling = hf.get("rope_scaling")
    theta = hf.get("rope_theta")
    params = hf.get("rope_parameters")  # transformers 5.x nests rope settings here
    if isinstance(params, Mapping):
      theta = params.get("rope_theta", theta)
      if params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    return cls(
        vocab_size=int(hf["vocab_size"]),
        hidden_size=int(hf["hidden_size"]),
        intermediate_size=int(hf["intermediate_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        head_dim=int(hf.get("head_dim") or int(hf["hidden_size"]) // heads),
        rope_theta=float(theta if theta is not None else 10000.0),
        rope_scaling=tuple(sorted(scaling.items())) if scaling else None,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_ids=eos,
    )

  def to_hf(self) -> dict[str, Any]:
    out = dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=self.vocab_size,
        hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
        num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
        num_key_value_heads=self.num_kv_heads, head_dim=self.head_dim,
        rope_theta=self.rope_theta, rms_norm_eps=self.rms_norm_eps,
        tie_word_embeddings=self.tie_word_embeddings,
        max_position_embeddings=self.max_position_embeddings, hidden_act="silu",
        bos_token_id=self.bos_token_id,
        eos_token_id=list(self.eos_token_ids) if self.eos_token_ids else None)
    if self.rope_scaling:
      out["rope_scaling"] = self.scaling
    return out

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "LlamaConfig":
    d = dict(d)
    if d.get("rope_scaling"):
      d["rope_scaling"] = tuple(sorted(dict(d["rope_scaling"]).items()))
    d["eos_token_ids"] = tuple(d.get("eos_token_ids") or ())
    return cls(**d)

  def to_json(self) -> str:
    d = dataclasses.asdict(self)
    d["rope_scaling"] = self.scaling
    d["eos_token_ids"] = list(self.eos_token_ids)
    return json.dumps(d, indent=2, sort_keys=True)

  def param_shapes(self) -> dict[str, tuple[int, ...]]:
    """Shapes of every parameter in our layout (the loaders check against these)."""
    l, d, n, k, h, f, v = (self.num_layers, self.hidden_size, self.num_heads,
                           self.num_kv_heads, self.head_dim, self.intermediate_size,
                           self.vocab_size)
    shapes = dict(embed=(v, d), attn_norm=(l, d), wq=(l, n, h, d), wk=(l, k, h, d),
                  wv=(l, k, h, d), wo=(l, d, n, h), mlp_norm=(l, d), w_gate=(l, f, d),
                  w_up=(l, f, d), w_down=(l, d, f), final_norm=(d,))
    if not self.tie_word_embeddings:
      shapes["lm_head"] = (v, d)
    return shapes


@flax.struct.dataclass
class KVCache:
  k: jax.Array  # [L, B, S, K, H]
  v: jax.Array  # [L, B, S, K, H]
  valid: jax.Array  # [B, S] bool: slot holds a real (non-pad) token
  next_pos: jax.Array  # [B] int32: rotary position of the row's next real token
  length: jax.Array  # [] int32: slots written so far (same for every row)
  # Block-mean key summaries for the sparse cache's block selection (None when unused):
  block_sums: jax.Array | None = None  # [L, B, C, K, H] float32, C = S / block_size
  block_counts: jax.Array | None = None  # [L, B, C] int32

  @classmethod
  def init(cls, config: LlamaConfig, batch: int, max_len: int, dtype=jnp.float32,
           block_size: int = 0) -> "KVCache":
    shape = (config.num_layers, batch, max_len, config.num_kv_heads, config.head_dim)
    sums = counts = None
    if block_size > 0:
      blocks = -(-max_len // block_size)
      sums = jnp.zeros(shape[:2] + (blocks,) + shape[3:], jnp.float32)
      counts = jnp.zeros(shape[:2] + (blocks,), jnp.int32)
    return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
               valid=jnp.zeros((batch, max_len), bool),
               next_pos=jnp.zeros((batch,), jnp.int32), length=jnp.zeros((), jnp.int32),
               block_sums=sums, block_counts=counts)

  @property
  def max_len(self) -> int:
    return self.k.shape[2]


@dataclasses.dataclass(frozen=True)
class SparseSpec:
  """The sparse self-KV set I_t used at decoding steps: sink + recent + similar tokens
  (block_size > 0 picks similar tokens through block-mean key summaries kept in the cache)."""
  num_sink: int = 4
  num_recent: int = 64
  num_similar: int = 20
  block_size: int = 64

  @property
  def budget(self) -> int:
    return self.num_sink + self.num_recent + self.num_similar

  @classmethod
  def from_config(cls, memory_cfg) -> "SparseSpec | None":
    """From a config's `memory` section; None when `memory.sparse` is off."""
    if not memory_cfg.sparse:
      return None
    return cls(num_sink=memory_cfg.sink_tokens, num_recent=memory_cfg.recent_tokens,
               num_similar=memory_cfg.similar_tokens, block_size=memory_cfg.similarity_block)


@flax.struct.dataclass
class MemoryKV:
  """Memory mapped into the key/value space of each memory layer (no rotary phase)."""
  prefix_k: jax.Array  # [L_m, B, P, K, H]
  prefix_v: jax.Array
  slot_k: jax.Array  # [L_m, B, M, K, H]
  slot_v: jax.Array


def _project_heads(x, w):
  """x [B, T, D] @ w [N, H, D] -> [B, T, N, H], contracted as one 2-D [N*H, D] matrix: given
  the 3-D form, XLA:CPU re-lays the weight out (a full copy) on every decode step."""
  n, h, d = w.shape
  return jnp.einsum("BTD,ED->BTE", x, w.reshape(n * h, d)).reshape(*x.shape[:-1], n, h)


class Llama(nnx.Module):
  """The decoder. All weights are frozen in GraphLoom; they are `nnx.Param`s so that the same
  module serves conversion, evaluation and (for users who want it) fine-tuning."""

  def __init__(self, config: LlamaConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    self.config = config
    init = nnx.initializers.normal(0.02)
    shapes = config.param_shapes()
    for name, shape in shapes.items():
      if name.endswith("norm"):
        value = jnp.ones(shape, dtype)
      else:
        value = init(rngs.params(), shape, dtype)
      setattr(self, name, nnx.Param(value))
    self.inv_freq = nnx.Variable(jnp.asarray(rope.inverse_frequencies(
        config.head_dim, config.rope_theta, config.scaling)))

  @property
  def dtype(self):
    return self.embed.value.dtype

  def layer_params(self) -> dict[str, jax.Array]:
    return {name: getattr(self, name).value for name in LAYER_PARAMS}

  def unstacked_layer_params(self) -> list[dict[str, jax.Array]]:
    """One weight dict per layer, each weight its own buffer (see `__call__(layer_weights=)`).

    The projections that read the same input are fused: `wqkv` [(N + 2K) H, D] and `w_gate_up`
    [2F, D] (one larger matrix-vector product streams memory better than two or three small
    ones); `wo`, `w_down` and the norms are as stored.
    """
    params = self.layer_params()
    d = self.config.hidden_size
    layers = []
    for i in range(self.config.num_layers):
      w = {k: params[k][i] for k in ("attn_norm", "wo", "mlp_norm", "w_down")}
      w["wqkv"] = jnp.concatenate([params[k][i].reshape(-1, d) for k in ("wq", "wk", "wv")])
      w["w_gate_up"] = jnp.concatenate([params["w_gate"][i], params["w_up"][i]])
      layers.append(w)
    return layers

  def first_memory_layer(self, first_layer: int) -> int:
    n = self.config.num_layers
    first = n // 2 if first_layer < 0 else first_layer
    if not 0 <= first < n:
      raise ValueError(f"memory first_layer {first_layer} is outside 0..{n - 1}")
    return first

  def project_memory(self, memory: memory_lib.Memory, first_layer: int = -1) -> MemoryKV:
    """Maps model-width memory vectors through each memory layer's frozen attention norm and
    k/v projections."""
    first = self.first_memory_layer(first_layer)
    p = {k: v[first:] for k, v in self.layer_params().items()}
    norm_w = p["attn_norm"][:, None, None, :]  # [L_m, 1, 1, D]
    eps = self.config.rms_norm_eps

    def kv(x):  # x [B, X, D] or [L_m, B, X, D] -> ([L_m, B, X, K, H], same)
      h = norms.rms_norm(x.astype(self.dtype), norm_w, eps)
      return (jnp.einsum("LBXD,LKHD->LBXKH", h, p["wk"]),
              jnp.einsum("LBXD,LKHD->LBXKH", h, p["wv"]))

    prefix_k, prefix_v = kv(memory.prefix)
    slot_k, _ = kv(memory.slot_keys)
    _, slot_v = kv(memory.slot_values)
    return MemoryKV(prefix_k=prefix_k, prefix_v=prefix_v, slot_k=slot_k, slot_v=slot_v)

  def __call__(self, tokens: jax.Array, cache: KVCache, token_valid: jax.Array | None = None,
               *, memory: memory_lib.Memory | None = None,
               route: memory_lib.Router | None = None, memory_kv: MemoryKV | None = None,
               first_layer: int = -1, sparse: SparseSpec | None = None,
               return_hidden: bool = False, return_slot_attention: bool = False,
               layer_weights: Sequence[Mapping[str, jax.Array]] | None = None,
               ) -> tuple[jax.Array, KVCache, dict[str, Any]]:
    """tokens [B,T] int32 appended at cache slots [length, length + T).

    memory: KG-JSA++ memory read by layers [first_layer, L) (see models/memory.py); `route`
      computes the active slots from the residual stream entering the first memory layer;
      `memory_kv` is `project_memory(memory)` precomputed (decode loops).
    sparse: at single-token steps, attend to the sparse set I_t instead of the whole cache.
    layer_weights: `unstacked_layer_params()` computed once outside a decode loop. Layers then
      run as an unrolled Python loop over separate buffers; with the stacked weights, a
      `lax.scan` step slices (copies) each layer's weights out of the stack on every call,
      which on CPU costs about as much as the matrix-vector products themselves.

    Returns logits [B,T,V] float32, the updated cache and aux outputs:
      `hidden` [L+1, B, T, D]: the embedding output and the residual stream after every layer
        (the last before the final norm), with return_hidden;
      `slot_attention` [L_m, B, T, N, M]: the joint-softmax probability of every slot, with
        return_slot_attention;
      `slot_active` / `slot_bias` [B, T, M]: the routing used, when memory is given.
    """
    cfg = self.config
    b, t = tokens.shape
    if token_valid is None:
      token_valid = jnp.ones((b, t), bool)
    length = cache.length
    positions = cache.next_pos[:, None] + jnp.cumsum(token_valid, axis=1) - 1  # [B,T]
    positions = jnp.where(token_valid, positions, 0)
    valid = jax.lax.dynamic_update_slice(cache.valid, token_valid, (0, length))  # [B,S]
    mask = attention_ops.causal_mask(valid, length + jnp.arange(t))  # [B,T,S]
    cos, sin = rope.rope_tables(positions, self.inv_freq.value)
    use_sparse = sparse is not None and t == 1
    block = sparse.block_size if sparse is not None else 0
    if block and cache.block_sums is None:
      raise ValueError("sparse block selection needs a cache made with "
                       f"KVCache.init(..., block_size={block})")
    positional = None
    if use_sparse:  # the position-only part of I_t, shared by every layer
      positional = sparse_kv.positional_selection(
          valid, length + 1, num_sink=sparse.num_sink, num_recent=sparse.num_recent,
          block_size=block)

    def layer(carry, xs):
      x, cache_k, cache_v, sums, counts = carry
      p, index, mem = xs
      h = norms.rms_norm(x, p["attn_norm"], cfg.rms_norm_eps)
      if "wqkv" in p:  # fused (unstacked) form
        qkv = jnp.einsum("BTD,ED->BTE", h, p["wqkv"])
        nq, nk = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        q, k, v = (a.reshape(b, t, -1, cfg.head_dim)
                   for a in (qkv[..., :nq], qkv[..., nq:nq + nk], qkv[..., nq + nk:]))
      else:
        q, k, v = (_project_heads(h, p[name]) for name in ("wq", "wk", "wv"))
      q, k = rope.apply_rope(q, cos, sin), rope.apply_rope(k, cos, sin)
      cache_k = jax.lax.dynamic_update_slice(cache_k, k[None].astype(cache_k.dtype),
                                             (index, 0, length, 0, 0))
      cache_v = jax.lax.dynamic_update_slice(cache_v, v[None].astype(cache_v.dtype),
                                             (index, 0, length, 0, 0))
      layer_k, layer_v = cache_k[index], cache_v[index]
      if block:
        if t == 1:
          s_l, c_l = sparse_kv.update_block_summaries(
              sums[index], counts[index], k[:, 0], length, token_valid[:, 0], block_size=block)
        else:
          s_l, c_l = sparse_kv.block_summaries(layer_k, valid, length + t, block)
        sums = sums.at[index].set(s_l)
        counts = counts.at[index].set(c_l)
      if use_sparse:
        idx, idx_ok = sparse_kv.select_sparse_kv(
            q[:, 0], layer_k, valid, length + 1, num_sink=sparse.num_sink,
            num_recent=sparse.num_recent, num_similar=sparse.num_similar, block_size=block,
            block_sums=sums[index] if block else None,
            block_counts=counts[index] if block else None, positional=positional)
        self_k, self_v = sparse_kv.gather_kv(layer_k, layer_v, idx)
        self_mask = idx_ok[:, :, None, :]  # [B,K,1,I]
      else:
        self_k, self_v, self_mask = layer_k, layer_v, mask
      parts = [joint.partial_attention(q, self_k, self_v, self_mask)]
      slot_probs = None
      if mem is not None:
        pk, pv, sk, sv = mem
        parts.append(joint.partial_attention(q, pk, pv, prefix_mask))
        parts.append(joint.partial_attention(q, sk, sv, slot_mask, slot_bias))
        if return_slot_attention:
          slot_probs = _slot_probabilities(q, sk, slot_mask, slot_bias,
                                           jnp.stack([lse for _, lse in parts]))
      attn = joint.merge_partials(parts) if len(parts) > 1 else parts[0][0]
      # Flatten (N, H) on both sides: contracting the [D, N, H] weight against an attention
      # output whose layout XLA picked freely lets it transpose-copy the WEIGHT every step.
      wo = p["wo"].reshape(p["wo"].shape[0], -1)
      x = x + jnp.einsum("BTE,DE->BTD", attn.reshape(b, t, -1), wo)
      h = norms.rms_norm(x, p["mlp_norm"], cfg.rms_norm_eps)
      if "w_gate_up" in p:  # fused (unstacked) form
        gate, up = jnp.split(jnp.einsum("BTD,FD->BTF", h, p["w_gate_up"]), 2, axis=-1)
      else:
        gate, up = (jnp.einsum("BTD,FD->BTF", h, p[name]) for name in ("w_gate", "w_up"))
      x = x + jnp.einsum("BTF,DF->BTD", jax.nn.silu(gate) * up, p["w_down"])  # SwiGLU
      return (x, cache_k, cache_v, sums, counts), (x if return_hidden else None, slot_probs)

    params = self.layer_params() if layer_weights is None else None

    def run_layers(carry, start, stop, mem_xs):
      """Layers [start, stop): a scan over stacked weights or a loop over unstacked ones."""
      if layer_weights is None:
        return jax.lax.scan(layer, carry, ({k: w[start:stop] for k, w in params.items()},
                                           jnp.arange(start, stop), mem_xs))
      outs = []
      for j, i in enumerate(range(start, stop)):
        mem_j = None if mem_xs is None else jax.tree.map(lambda a, j=j: a[j], mem_xs)
        carry, out = layer(carry, (layer_weights[i], i, mem_j))
        outs.append(out)
      return carry, jax.tree.map(lambda *xs: jnp.stack(xs), *outs)

    x0 = self.embed.value[tokens]  # [B,T,D]
    carry = (x0, cache.k, cache.v, cache.block_sums, cache.block_counts)
    first = self.first_memory_layer(first_layer) if memory is not None else cfg.num_layers
    aux = {}
    hidden = []
    prefix_mask = slot_mask = slot_bias = None
    if first > 0:
      carry, (hid, _) = run_layers(carry, 0, first, None)
      hidden.append(hid)
    if memory is not None:
      if memory_kv is None:
        memory_kv = self.project_memory(memory, first_layer)
      if route is not None:
        active, slot_bias = route(carry[0], memory)
      else:
        active = (memory.slot_active if memory.slot_active is not None
                  else jnp.ones((b, t, memory.num_slots), bool))
        slot_bias = (memory.slot_bias if memory.slot_bias is not None
                     else jnp.zeros((b, t, memory.num_slots), jnp.float32))
      slot_mask = active & memory.slot_valid[:, None, :]
      prefix_mask = memory.prefix_mask
      aux["slot_active"], aux["slot_bias"] = slot_mask, slot_bias
      mem_xs = (memory_kv.prefix_k, memory_kv.prefix_v, memory_kv.slot_k, memory_kv.slot_v)
      carry, (hid, slot_probs) = run_layers(carry, first, cfg.num_layers, mem_xs)
      hidden.append(hid)
      if return_slot_attention:
        aux["slot_attention"] = slot_probs
    x, cache_k, cache_v, sums, counts = carry
    if return_hidden:
      aux["hidden"] = jnp.concatenate([x0[None]] + hidden, axis=0)
    x = norms.rms_norm(x, self.final_norm.value, cfg.rms_norm_eps)
    # Both heads are [V, D] tables contracted on D directly: no transposed copy.
    head = self.embed.value if cfg.tie_word_embeddings else self.lm_head.value
    logits = jnp.einsum("BTD,VD->BTV", x, head, preferred_element_type=jnp.float32)
    new_cache = KVCache(k=cache_k, v=cache_v, valid=valid,
                        next_pos=cache.next_pos + jnp.sum(token_valid, axis=1, dtype=jnp.int32),
                        length=length + t, block_sums=sums, block_counts=counts)
    return logits, new_cache, aux


def _slot_probabilities(q, slot_k, slot_mask, slot_bias, lses):
  """Joint-softmax probability of each slot: exp(score_p - logsumexp over all key sets).

  q [B,T,N,H], slot_k [B,M,K,H], slot_mask/bias [B,T,M], lses [sets, B,T,N] -> [B,T,N,M].
  """
  b, t, n, h = q.shape
  kv = slot_k.shape[2]
  scores = jnp.einsum("BTKGH,BMKH->BTKGM", q.reshape(b, t, kv, n // kv, h), slot_k,
                      preferred_element_type=jnp.float32).reshape(b, t, n, -1) * h ** -0.5
  scores = scores + slot_bias[:, :, None, :]
  peak = jnp.max(lses, axis=0)
  peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
  total = peak + jnp.log(jnp.sum(jnp.exp(lses - peak), axis=0))  # [B,T,N]
  probs = jnp.exp(scores - total[..., None])
  return jnp.where(slot_mask[:, :, None, :], probs, 0.0)


def init_random(config: LlamaConfig, seed: int = 0, dtype=jnp.float32) -> Llama:
  return Llama(config, dtype=dtype, rngs=nnx.Rngs(seed))


def abstract_model(config: LlamaConfig, dtype=jnp.float32) -> Llama:
  """Shapes and dtypes only (no memory): for shape checks of large configs and for loading."""
  return nnx.eval_shape(lambda: Llama(config, dtype=dtype, rngs=nnx.Rngs(0)))


def _mesh_axis_size(mesh, axis) -> int:
  names = axis if isinstance(axis, tuple) else (axis,)
  return int(np.prod([mesh.shape[a] for a in names]))


def _split_axes(config: LlamaConfig, mesh) -> dict[str, list[tuple[int, Any, bool]]]:
  """{name: [(dim, mesh axis, divides evenly)]} for every split dimension of PARTITIONS."""
  out = {}
  for name, shape in config.param_shapes().items():
    out[name] = [(dim, axis, shape[dim] % _mesh_axis_size(mesh, axis) == 0)
                 for dim, axis in enumerate(PARTITIONS[name]) if axis is not None]
  return out


def param_shardings(config: LlamaConfig, mesh: jax.sharding.Mesh) -> dict[str, NamedSharding]:
  """Each parameter's `NamedSharding` on `mesh` (axes "data" and "model") as PARTITIONS
  declares it; a dimension the mesh axis does not divide (SmolLM2's 3 kv heads on 4 devices)
  is replicated instead (`uneven_shardings` lists them)."""
  out = {}
  for name, axes in _split_axes(config, mesh).items():
    spec = list(PARTITIONS[name])
    for dim, _, even in axes:
      if not even:
        spec[dim] = None
    out[name] = NamedSharding(mesh, P(*spec))
  return out


def uneven_shardings(config: LlamaConfig, mesh: jax.sharding.Mesh) -> list[str]:
  """The declared splits that `mesh` cannot make evenly (replicated by `param_shardings`)."""
  shapes = config.param_shapes()
  return [f"{name} dim {dim} ({shapes[name][dim]}) over {axis!r} "
          f"({_mesh_axis_size(mesh, axis)} devices)"
          for name, axes in _split_axes(config, mesh).items()
          for dim, axis, even in axes if not even]


def _placed(sharding) -> dict[str, Any]:
  return {} if sharding is None else {"out_shardings": sharding}


@functools.cache
def _zeros(shape, dtype, sharding):
  return jax.jit(lambda: jnp.zeros(shape, dtype), **_placed(sharding))


@functools.cache
def _write_layer(sharding):
  """stack [L, ...], value [1, ...], layer -> stack with value at layer, updated in place."""
  return jax.jit(lambda stack, value, layer: jax.lax.dynamic_update_slice_in_dim(
      stack, value, layer, axis=0), donate_argnums=0, **_placed(sharding))


def load_params(config: LlamaConfig, tensors: Iterable[tuple[str, int | None, Any]],
                dtype=jnp.float32, mesh: jax.sharding.Mesh | None = None,
                source: str = "weights") -> Llama:
  """The model from a stream of `(name, layer or None, array)` in our checkpoint layout (a
  `weights.Checkpoint`'s tensors): each array is checked finite, converted to `dtype` and
  placed with `jax.device_put` under its parameter's sharding (`param_shardings(config, mesh)`;
  the default device without a mesh) as it arrives, a layer's slice written into its stacked
  parameter in place, so the host holds one tensor at a time besides the model."""
  shapes = config.param_shapes()
  shardings = param_shardings(config, mesh) if mesh is not None else dict.fromkeys(shapes)
  np_dtype = jnp.dtype(dtype)
  params, seen = {}, set()
  for name, layer, value in tensors:
    value = np.asarray(value, dtype=np_dtype)
    if not np.all(np.isfinite(value)):
      where = "" if layer is None else f" (layer {layer})"
      raise ValueError(f"{source}: parameter {name!r} contains NaN or Inf{where}")
    sharding = shardings[name]
    if layer is None:
      params[name] = jax.device_put(value, sharding)
    else:
      if name not in params:
        params[name] = _zeros(shapes[name], np_dtype, sharding)()
      params[name] = _write_layer(sharding)(params[name], jax.device_put(value[None], sharding),
                                            layer)
    seen.add((name, layer))
  expected = {(name, i) for name in shapes for i in (
      range(config.num_layers) if name in LAYER_PARAMS else (None,))}
  if expected - seen:
    raise ValueError(f"{source}: no values for {sorted(expected - seen, key=str)[:5]}")
  model = abstract_model(config, dtype)
  for name, value in params.items():
    getattr(model, name).value = value
  inv_freq = rope.inverse_frequencies(config.head_dim, config.rope_theta, config.scaling)
  model.inv_freq.value = (jnp.asarray(inv_freq) if mesh is None else
                          jax.device_put(inv_freq, NamedSharding(mesh, P())))
  return model


def shape_problems(expected: Mapping[str, tuple[int, ...]],
                   shapes: Mapping[str, tuple[int, ...]], kind: str,
                   tolerated=lambda name: False) -> list[str]:
  """Every missing, mis-shaped and unexpected entry of `shapes` against `expected` (both
  {name: shape}); `tolerated(name)` exempts extra entries a checkpoint may carry."""
  problems = []
  for name, shape in expected.items():
    if name not in shapes:
      problems.append(f"missing {kind} {name!r} (expected shape {shape})")
    elif tuple(shapes[name]) != tuple(shape):
      problems.append(f"{kind} {name!r} has shape {tuple(shapes[name])}, "
                      f"config expects {tuple(shape)}")
  problems += [f"unexpected {kind} {name!r}" for name in shapes
               if name not in expected and not tolerated(name)]
  return problems


def from_params(config: LlamaConfig, params: Mapping[str, np.ndarray], dtype=jnp.float32,
                source: str = "weights", mesh: jax.sharding.Mesh | None = None) -> Llama:
  """Builds a model from a flat {name: array} dict in our layout; checks names and shapes and
  reports every problem at once."""
  problems = shape_problems(config.param_shapes(), {k: np.shape(v) for k, v in params.items()},
                            "parameter")
  if problems:
    raise ValueError(f"{source}: {len(problems)} problem(s) loading weights:\n  " +
                     "\n  ".join(problems))

  def tensors():
    for name, value in params.items():
      if name in LAYER_PARAMS:
        yield from ((name, i, value[i]) for i in range(config.num_layers))
      else:
        yield name, None, value

  return load_params(config, tensors(), dtype, mesh, source)


def config_from_arch(arch: Mapping[str, Any]) -> LlamaConfig:
  """LlamaConfig from an ml_collections `model.arch` section (HF field names)."""
  return LlamaConfig.from_hf(dict(arch), source="config.model.arch")
