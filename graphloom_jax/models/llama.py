"""Llama decoder in Flax NNX with a pytree KV cache; the math lives in graphloom_jax/ops.

Shapes: B batch, T new tokens, S cache slots, L layers, D model width, N query heads,
K kv heads, G = N / K query heads per kv head, H head dim, F MLP width, V vocabulary,
L_m memory layers, P prefix length, M slots.

Parameters (`LlamaConfig.model_shapes`) have one layout for every path. Layer parameters are
stacked on a leading L axis; the projections that read the same input are fused, and all keep
PyTorch's (out, in) orientation, so a decode step's matrix-vector product reads each weight
row by contiguous row:
  wqkv       [L, K, G + 2, H, D]  per kv head: its G query heads, then its key and value heads
  w_gate_up  [L, F, 2, D]         each MLP row's gate and up weights side by side
  wo [L, D, N, H], w_down [L, D, F], attn_norm and mlp_norm [L, D], embed and lm_head [V, D].
Grouping the fused rows by kv head and by MLP row keeps them splittable over a mesh (each
device holds whole groups; `PARTITIONS`). Checkpoints keep one tensor per projection
(`LlamaConfig.param_shapes`); `weights.load_params` writes each into its slot of the fused
stack. The config, the layout and its shardings are in models/llama_config.py.

A layer is `decoder_layer`: `attention_block` then `mlp_block`, pure functions of one layer's
weights (the stack indexed at that layer). The forward runs it as a `lax.scan` over the stack
(compile time does not grow with depth, and an 8B configuration is shape-checked with
`nnx.eval_shape` on a laptop) or, given `unstacked_layer_params()` (the CPU decode loop), as a
Python loop over per-layer slices of the same stack. Rows of a batch are left-padded;
`KVCache.valid` marks real tokens and positions count real tokens only, so a padded row computes
exactly what it would alone.
"""

import dataclasses
import functools
from typing import Any, Mapping, Sequence

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from graphloom_jax import sharding as sharding_lib
from graphloom_jax.models import memory as memory_lib
# The architecture (config, HF mapping, layout, shardings), re-exported: `llama.LlamaConfig`.
from graphloom_jax.models.llama_config import (CHECKPOINT_LAYER_PARAMS, LAYER_PARAMS,  # noqa: F401
                                              PARTITIONS, LlamaConfig, config_from_arch,
                                              param_shardings, uneven_shardings)
from graphloom_jax.ops import attention as attention_ops
from graphloom_jax.ops import joint_attention as joint
from graphloom_jax.ops import norms
from graphloom_jax.ops import rope
from graphloom_jax.ops import sparse_kv


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


@flax.struct.dataclass
class Step:
  """What every layer of one forward call shares, computed once per call."""
  cos: jax.Array  # [B, T, H] rotary tables of the new tokens
  sin: jax.Array
  length: jax.Array  # [] int32: cache slots written before this call
  token_valid: jax.Array  # [B, T] bool
  valid: jax.Array  # [B, S] bool: real cache slots, this call's tokens included
  mask: jax.Array  # [B, T, S] bool: causal and valid
  positional: sparse_kv.Positional | None = None  # sparse single-token steps
  prefix_mask: jax.Array | None = None  # [B, P] bool (memory layers)
  slot_mask: jax.Array | None = None  # [B, T, M] bool: active and valid slots
  slot_bias: jax.Array | None = None  # [B, T, M] float32: log-gates


def project(x, w, out_dtype=None):
  """x [B, T, E] times a weight w [O, E] kept (out, in): [B, T, O], accumulated in float32 and
  returned in `out_dtype` (default x's dtype).

  On XLA:CPU a bfloat16 product with a single row (one decode step of one question) takes a
  slow loop (about 2 GB/s of weight on the development CPU) where two rows or more take the
  fast matrix-matrix path (about 30 GB/s, `benchmarks/decode.md`); there one row is
  computed as two (the row twice) and the copy dropped. Other backends and dtypes compute it
  as written."""
  out_dtype = x.dtype if out_dtype is None else out_dtype
  b, t = x.shape[:2]
  pad = (b * t == 1 and w.dtype == jnp.bfloat16 and jax.default_backend() == "cpu")
  if pad:
    x = jnp.concatenate([x, x], axis=0)
  y = jnp.einsum("BTE,OE->BTO", x, w, preferred_element_type=jnp.float32)
  return (y[:b] if pad else y).astype(out_dtype)


def qkv_projection(h, wqkv):
  """h [B, T, D], wqkv [K, G + 2, H, D] -> q [B, T, N, H] (head n = k G + g reads kv head k,
  as Llama's repeat_kv), k and v [B, T, K, H]."""
  kv, g2, hd, d = wqkv.shape
  b, t = h.shape[:2]
  # One 2-D [K (G + 2) H, D] matrix: given the 4-D form, XLA:CPU re-lays the weight out (a
  # full copy) at every decode step.
  qkv = project(h, wqkv.reshape(-1, d)).reshape(b, t, kv, g2, hd)
  q = qkv[:, :, :, :g2 - 2].reshape(b, t, kv * (g2 - 2), hd)
  return q, qkv[:, :, :, g2 - 2], qkv[:, :, :, g2 - 1]


def mlp_block(p, x, eps: float):
  """SwiGLU MLP with its pre-norm: x [B, T, D] -> the residual update [B, T, D]."""
  h = norms.rms_norm(x, p["mlp_norm"], eps)
  f, _, d = p["w_gate_up"].shape
  gate_up = project(h, p["w_gate_up"].reshape(-1, d))
  gate_up = gate_up.reshape(*x.shape[:2], f, 2)  # [B, T, F, (gate, up)]
  return project(jax.nn.silu(gate_up[..., 0]) * gate_up[..., 1], p["w_down"])


def write_cache(caches, k, v, index, step: Step, block: int):
  """Stores this call's k, v [B, T, K, H] at slots [length, length + T) of layer `index` of
  the stacked caches (k, v [L, B, S, K, H], block sums [L, B, C, K, H], counts [L, B, C]) and
  brings that layer's block summaries up to date (block > 0)."""
  cache_k, cache_v, sums, counts = caches
  t = k.shape[1]
  start = (index, 0, step.length, 0, 0)
  cache_k = jax.lax.dynamic_update_slice(cache_k, k[None].astype(cache_k.dtype), start)
  cache_v = jax.lax.dynamic_update_slice(cache_v, v[None].astype(cache_v.dtype), start)
  if block:
    if t == 1:
      s_l, c_l = sparse_kv.update_block_summaries(
          sums[index], counts[index], k[:, 0], step.length, step.token_valid[:, 0],
          block_size=block)
    else:
      s_l, c_l = sparse_kv.block_summaries(cache_k[index], step.valid, step.length + t, block)
    sums, counts = sums.at[index].set(s_l), counts.at[index].set(c_l)
  return cache_k, cache_v, sums, counts


def self_attention(q, caches, index, step: Step, sparse: "SparseSpec | None", fused: bool):
  """q [B, T, N, H] over layer `index`'s own cache -> (out [B, T, N, H], lse [B, T, N]).

  At a sparse step only the selected set I_t is read. `fused` (a prefill with no other key set
  to merge with) goes through `jax.nn.dot_product_attention` (`fused_attention_impl`), whose
  lse is not returned (None): the memory layers need the exact float32 lse with its gradient
  to merge partial softmaxes, so they keep `joint.partial_attention`. A query row with no
  valid key (left padding) gets the mean of the values there instead of 0; nothing reads it."""
  cache_k, cache_v, sums, counts = caches
  layer_k, layer_v = cache_k[index], cache_v[index]
  if step.positional is not None:
    block = sparse.block_size
    idx, idx_ok = sparse_kv.select_sparse_kv(
        q[:, 0], layer_k, step.valid, step.length + 1, num_sink=sparse.num_sink,
        num_recent=sparse.num_recent, num_similar=sparse.num_similar, block_size=block,
        block_sums=sums[index] if block else None, block_counts=counts[index] if block else None,
        positional=step.positional)
    self_k, self_v = sparse_kv.gather_kv(layer_k, layer_v, idx)
    return joint.partial_attention(q, self_k, self_v, idx_ok[:, :, None, :])  # mask [B,K,1,I]
  if fused:
    impl = fused_attention_impl(q.dtype, q.shape[-1])
    return jax.nn.dot_product_attention(q, layer_k, layer_v, mask=step.mask[:, None],
                                        implementation=impl), None
  return joint.partial_attention(q, layer_k, layer_v, step.mask)


def fused_attention_impl(dtype, head_dim: int) -> str:
  """`jax.nn.dot_product_attention`'s implementation for this platform: cuDNN's flash attention
  on a GPU for the 16-bit inputs and head sizes it takes (once seen to run there), XLA's
  elsewhere."""
  cudnn = (jax.default_backend() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)
           and head_dim % 8 == 0 and head_dim <= 128
           and _cudnn_attention_runs(jnp.dtype(dtype).name, head_dim))
  return "cudnn" if cudnn else "xla"


@functools.cache
def _cudnn_attention_runs(dtype: str, head_dim: int) -> bool:
  """Whether cuDNN's fused attention compiles and runs on this GPU for a small grouped-query,
  masked problem like the decoder's (it needs a recent cuDNN and GPU generation); a refusal
  falls back to XLA's implementation instead of failing the caller's compilation."""
  q = jnp.ones((1, 16, 4, head_dim), dtype)
  kv = jnp.ones((1, 16, 2, head_dim), dtype)
  mask = jnp.tril(jnp.ones((16, 16), bool))[None, None]
  try:
    jax.block_until_ready(jax.nn.dot_product_attention(q, kv, kv, mask=mask,
                                                       implementation="cudnn"))
  except Exception:  # cuDNN reports unsupported configurations through several error types
    return False
  return True


def memory_attention(q, mem, step: Step):
  """q [B, T, N, H] over a memory layer's prefix and active slots (mem: that layer's
  MemoryKV arrays [B, P|M, K, H]) -> two (out, lse) partials."""
  prefix_k, prefix_v, slot_k, slot_v = mem
  return [joint.partial_attention(q, prefix_k, prefix_v, step.prefix_mask),
          joint.partial_attention(q, slot_k, slot_v, step.slot_mask, step.slot_bias)]


def attention_block(p, x, caches, index, mem, step: Step, *, eps: float,
                    sparse: "SparseSpec | None", return_slot_attention: bool):
  """Self-attention (and, in a memory layer, KG-JSA++'s one softmax over [prefix; active
  slots; own cache], merged exactly from partial softmaxes) with its pre-norm.

  x [B, T, D] -> the residual update [B, T, D], the updated caches, and the slots' joint
  probabilities [B, T, N, M] (memory layers with return_slot_attention; else None)."""
  b, t, _ = x.shape
  h = norms.rms_norm(x, p["attn_norm"], eps)
  q, k, v = qkv_projection(h, p["wqkv"])
  q, k = rope.apply_rope(q, step.cos, step.sin), rope.apply_rope(k, step.cos, step.sin)
  caches = write_cache(caches, k, v, index, step, sparse.block_size if sparse else 0)
  parts = [self_attention(q, caches, index, step, sparse, fused=mem is None and t > 1)]
  slot_probs = None
  if mem is not None:
    parts += memory_attention(q, mem, step)
    if return_slot_attention:
      slot_probs = _slot_probabilities(q, mem[2], step.slot_mask, step.slot_bias,
                                       jnp.stack([lse for _, lse in parts]))
  attn = joint.merge_partials(parts) if len(parts) > 1 else parts[0][0]  # [B, T, N, H]
  # (N, H) flattened on both sides: contracting the [D, N, H] weight against an attention
  # output whose layout XLA picked freely lets it transpose-copy the WEIGHT every step.
  wo = p["wo"].reshape(p["wo"].shape[0], -1)  # [D, N H]
  return project(attn.reshape(b, t, -1), wo), caches, slot_probs


def decoder_layer(carry, xs, *, step: Step, eps: float, sparse: "SparseSpec | None",
                  return_hidden: bool, return_slot_attention: bool):
  """One layer. carry (x [B, T, D], caches); xs (this layer's weights, its index, its memory
  (MemoryKV arrays) or None) -> carry, (x or None, slot probabilities or None)."""
  x, caches = carry
  p, index, mem = xs
  update, caches, slot_probs = attention_block(
      p, x, caches, index, mem, step, eps=eps, sparse=sparse,
      return_slot_attention=return_slot_attention)
  x = x + update
  x = x + mlp_block(p, x, eps)
  return (x, caches), (x if return_hidden else None, slot_probs)


def run_layers(layer, carry, stack, layers, start: int, stop: int, mem_xs):
  """Layers [start, stop): a `lax.scan` that indexes the stacked weights, or (with `layers`,
  one weight dict per layer) an unrolled loop over them. mem_xs: per-memory-layer arrays with
  a leading [stop - start] axis, or None."""
  if layers is None:
    def body(carry, xs):
      index = xs[0]
      p = {k: jax.lax.dynamic_index_in_dim(w, index, keepdims=False) for k, w in stack.items()}
      return layer(carry, (p,) + xs)
    return jax.lax.scan(body, carry, (jnp.arange(start, stop), mem_xs))
  outs = []
  for j, i in enumerate(range(start, stop)):
    mem_j = None if mem_xs is None else jax.tree.map(lambda a, j=j: a[j], mem_xs)
    carry, out = layer(carry, (layers[i], i, mem_j))
    outs.append(out)
  return carry, jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def routing_masks(memory: memory_lib.Memory, route, h, b: int, t: int) -> dict[str, jax.Array]:
  """The memory layers' prefix mask, active-slot mask and slot log-gates (Step fields): from
  the router seeing h [B, T, D], the residual stream entering the first memory layer, or the
  memory's own fixed routing."""
  if route is not None:
    active, slot_bias = route(h, memory)
  else:
    active = (memory.slot_active if memory.slot_active is not None
              else jnp.ones((b, t, memory.num_slots), bool))
    slot_bias = (memory.slot_bias if memory.slot_bias is not None
                 else jnp.zeros((b, t, memory.num_slots), jnp.float32))
  return dict(prefix_mask=memory.prefix_mask, slot_mask=active & memory.slot_valid[:, None, :],
              slot_bias=slot_bias)


class Llama(nnx.Module):
  """The decoder. All weights are frozen in GraphLoom; they are `nnx.Param`s so that the same
  module serves conversion, evaluation and (for users who want it) fine-tuning."""

  def __init__(self, config: LlamaConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    self.config = config
    init = nnx.initializers.normal(0.02)
    for name, shape in config.model_shapes().items():
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
    """One weight dict per layer: the stack sliced at each layer, taken once outside a decode
    loop (see `__call__(layer_weights=)`)."""
    params = self.layer_params()
    return [{k: w[i] for k, w in params.items()} for i in range(self.config.num_layers)]

  def first_memory_layer(self, first_layer: int) -> int:
    n = self.config.num_layers
    first = n // 2 if first_layer < 0 else first_layer
    if not 0 <= first < n:
      raise ValueError(f"memory first_layer {first_layer} is outside 0..{n - 1}")
    return first

  def token_values(self, tokens: jax.Array) -> jax.Array:
    """[B, M, V] int32 (-1 padded) -> [B, M, D]: the mean input embedding of each row's
    tokens, zero for a row without any."""
    valid = tokens >= 0
    emb = self.embed.value[jnp.where(valid, tokens, 0)].astype(jnp.float32)  # [B, M, V, D]
    total = jnp.sum(emb * valid[..., None], axis=2)
    return total / jnp.maximum(jnp.sum(valid, axis=2), 1)[..., None]

  def project_memory(self, memory: memory_lib.Memory, first_layer: int = -1) -> MemoryKV:
    """Maps model-width memory vectors through each memory layer's frozen attention norm and
    k/v projections; slot values first gain the mean input embedding of their value tokens
    when the memory carries `slot_value_tokens`."""
    first = self.first_memory_layer(first_layer)
    cfg = self.config
    g = cfg.num_heads // cfg.num_kv_heads
    wqkv = self.wqkv.value[first:]  # [L_m, K, G + 2, H, D]
    w_k, w_v = wqkv[:, :, g], wqkv[:, :, g + 1]  # [L_m, K, H, D]
    norm_w = self.attn_norm.value[first:][:, None, None, :]  # [L_m, 1, 1, D]

    def kv(x, w):  # x [B, X, D] or [L_m, B, X, D] -> [L_m, B, X, K, H]
      h = norms.rms_norm(x.astype(self.dtype), norm_w, cfg.rms_norm_eps)
      return jnp.einsum("LBXD,LKHD->LBXKH", h, w)

    values = memory.slot_values
    if memory.slot_value_tokens is not None:
      values = (values.astype(jnp.float32) + self.token_values(memory.slot_value_tokens)
                ).astype(values.dtype)
    return MemoryKV(prefix_k=kv(memory.prefix, w_k), prefix_v=kv(memory.prefix, w_v),
                    slot_k=kv(memory.slot_keys, w_k), slot_v=kv(values, w_v))

  def step_context(self, cache: KVCache, token_valid, sparse: SparseSpec | None) -> Step:
    """Positions, masks, rotary tables and the sparse positional selection of one call."""
    b, t = token_valid.shape
    length = cache.length
    positions = cache.next_pos[:, None] + jnp.cumsum(token_valid, axis=1) - 1  # [B, T]
    positions = jnp.where(token_valid, positions, 0)
    valid = jax.lax.dynamic_update_slice(cache.valid, token_valid, (0, length))  # [B, S]
    cos, sin = rope.rope_tables(positions, self.inv_freq.value)
    block = sparse.block_size if sparse is not None else 0
    if block and cache.block_sums is None:
      raise ValueError("sparse block selection needs a cache made with "
                       f"KVCache.init(..., block_size={block})")
    positional = None
    if sparse is not None and t == 1:  # the position-only part of I_t, shared by every layer
      positional = sparse_kv.positional_selection(
          valid, length + 1, num_sink=sparse.num_sink, num_recent=sparse.num_recent,
          block_size=block)
    return Step(cos=cos, sin=sin, length=length, token_valid=token_valid, valid=valid,
                mask=attention_ops.causal_mask(valid, length + jnp.arange(t)),
                positional=positional)

  def __call__(self, tokens: jax.Array, cache: KVCache, token_valid: jax.Array | None = None,
               *, memory: memory_lib.Memory | None = None,
               route: memory_lib.Router | None = None, memory_kv: MemoryKV | None = None,
               first_layer: int = -1, sparse: SparseSpec | None = None,
               return_hidden: bool = False, return_slot_attention: bool = False,
               layer_weights: Sequence[Mapping[str, jax.Array]] | None = None,
               logits_at: jax.Array | None = None,
               ) -> tuple[jax.Array, KVCache, dict[str, Any]]:
    """tokens [B,T] int32 appended at cache slots [length, length + T).

    memory: KG-JSA++ memory read by layers [first_layer, L) (see models/memory.py); `route`
      computes the active slots from the residual stream entering the first memory layer;
      `memory_kv` is `project_memory(memory)` precomputed (decode loops).
    sparse: at single-token steps, attend to the sparse set I_t instead of the whole cache.
    layer_weights: `unstacked_layer_params()` taken once outside a decode loop; the layers then
      run as an unrolled loop over them. XLA:CPU copies a stack slice that a matrix product
      reads, so a `lax.scan` over the stack (or slicing it inside the loop) would copy every
      layer's weights at every step, costing about as much as the products themselves.
    logits_at: [B, A] positions; the logits are computed there only ([B, A, V]), e.g. at a
      training row's answer steps, which spares the vocabulary projection of every other
      position (a [B, T, V] array and its gradient).

    Returns logits [B,T,V] float32 ([B,A,V] with logits_at), the updated cache and aux outputs:
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
    step = self.step_context(cache, token_valid, sparse)
    layer = functools.partial(decoder_layer, eps=cfg.rms_norm_eps, sparse=sparse,
                              return_hidden=return_hidden,
                              return_slot_attention=return_slot_attention)
    stack = self.layer_params()
    x0 = self.embed.value[tokens]  # [B, T, D]
    carry = (x0, (cache.k, cache.v, cache.block_sums, cache.block_counts))
    first = self.first_memory_layer(first_layer) if memory is not None else cfg.num_layers
    aux, hidden = {}, [x0[None]]
    if first > 0:
      carry, (hid, _) = run_layers(functools.partial(layer, step=step), carry, stack,
                                   layer_weights, 0, first, None)
      hidden.append(hid)
    if memory is not None:
      memory_kv = memory_kv if memory_kv is not None else self.project_memory(memory, first)
      step = step.replace(**routing_masks(memory, route, carry[0], b, t))
      aux["slot_active"], aux["slot_bias"] = step.slot_mask, step.slot_bias
      mem_xs = (memory_kv.prefix_k, memory_kv.prefix_v, memory_kv.slot_k, memory_kv.slot_v)
      carry, (hid, slot_probs) = run_layers(functools.partial(layer, step=step), carry, stack,
                                            layer_weights, first, cfg.num_layers, mem_xs)
      hidden.append(hid)
      if return_slot_attention:
        aux["slot_attention"] = slot_probs
    x, (cache_k, cache_v, sums, counts) = carry
    if return_hidden:
      aux["hidden"] = jnp.concatenate(hidden, axis=0)
    if logits_at is not None:
      x = jnp.take_along_axis(x, logits_at[..., None], axis=1)
    x = norms.rms_norm(x, self.final_norm.value, cfg.rms_norm_eps)
    # Both heads are [V, D] tables contracted on D directly: no transposed copy.
    head = self.embed.value if cfg.tie_word_embeddings else self.lm_head.value
    logits = project(x, head, jnp.float32)
    new_cache = KVCache(k=cache_k, v=cache_v, valid=step.valid,
                        next_pos=cache.next_pos + jnp.sum(token_valid, axis=1, dtype=jnp.int32),
                        length=step.length + t, block_sums=sums, block_counts=counts)
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


def shard_model(model: Llama, mesh: jax.sharding.Mesh) -> Llama:
  """A model's parameters placed under `param_shardings` (the rest replicated), in place: for
  models built on one device (the random test decoder); checkpoints stream straight into their
  shards (`load_params`)."""
  mesh = sharding_lib.auto_axes(mesh)
  sharding_lib.replicate(model, mesh)
  for name, sharding in param_shardings(model.config, mesh).items():
    var = getattr(model, name)
    var.value = jax.device_put(var.value, sharding)
  return model


