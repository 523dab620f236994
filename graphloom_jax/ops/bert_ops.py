"""Pure functions for a BERT encoder (post-LayerNorm, absolute positions, exact GELU) and the
sentence-transformers mean pooling.

Shapes: B batch, T tokens, D model width, N heads, H head dim (D = N * H), F MLP width.
`mask` is a bool [B, T] that is True on real tokens and False on padding, or, for rows that
pack several texts, a bool [B, T, T] (query, key) that is True where the query may attend to
the key (same text, both real).

These match Hugging Face's `BertModel` (eager or SDPA attention) in float32: padded keys get an
additive `finfo.min` bias, so they receive exactly zero probability; rows of padded queries are
computed but carry no meaning and must be masked out by the caller (mean_pool does).

In bfloat16 (parameters and activations), every product accumulates in float32 (`dense`), the
softmax, LayerNorm statistics and pooling run in float32, and activations are rounded back to
bfloat16 between operations; in float32 each of these is the plain float32 computation.
"""

import jax
import jax.numpy as jnp


def dense(x, w, b=None, out_dtype=None):
  """x [..., I] @ w [I, O] (+ b [O]) accumulated in float32, returned in `out_dtype` (default
  x's dtype)."""
  y = jnp.matmul(x, w, preferred_element_type=jnp.float32)
  return (y if b is None else y + b).astype(x.dtype if out_dtype is None else out_dtype)


def layer_norm(x, scale, bias, eps: float):
  """LayerNorm over the last axis, statistics in float32. x [..., D] -> [..., D]."""
  x32 = x.astype(jnp.float32)
  mean = jnp.mean(x32, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
  y = (x32 - mean) * jax.lax.rsqrt(var + eps)
  return (y * scale + bias).astype(x.dtype)


def embed(ids, word, position, token_type, ln_scale, ln_bias, eps: float, type_ids=None,
          positions=None):
  """Token + position + token-type embeddings, then LayerNorm.

  ids [B, T] int; word [V, D]; position [P, D] (P >= T); token_type [2, D];
  type_ids [B, T] int or None (all segment 0, the single-sentence case); positions [B, T] int
  or None (0..T-1 on every row; packed rows restart at 0 for each text). Returns [B, T, D].
  """
  t = ids.shape[1]
  if positions is None:
    x = jnp.take(word, ids, axis=0) + position[None, :t]
  else:
    x = jnp.take(word, ids, axis=0) + jnp.take(position, positions, axis=0)
  if type_ids is None:
    x = x + token_type[0]
  else:
    x = x + jnp.take(token_type, type_ids, axis=0)
  return layer_norm(x, ln_scale, ln_bias, eps)


def self_attention(x, mask, wqkv, bqkv, wo, bo, num_heads: int):
  """Bidirectional multi-head attention with padded keys masked.

  x [B, T, D]; mask [B, T] (keys) or [B, T, T] (query, key) bool; wqkv [D, 3D] (query, key,
  value side by side, (in, out) layout); bqkv [3D]; wo [D, D]; bo [D]. Returns [B, T, D]
  (before the residual).
  """
  b, t, d = x.shape
  h = d // num_heads
  qkv = dense(x, wqkv, bqkv)  # [B, T, 3D]
  qkv = qkv.reshape(b, t, 3, num_heads, h)  # [B, T, 3, N, H]
  q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # each [B, T, N, H]
  scores = jnp.einsum("BTNH,BSNH->BNTS", q, k,
                      preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(h))
  keys = mask[:, None, None, :] if mask.ndim == 2 else mask[:, None]  # [B, 1, 1|T, S]
  bias = jnp.where(keys, 0.0, jnp.finfo(scores.dtype).min)
  probs = jax.nn.softmax(scores + bias, axis=-1)
  ctx = jnp.einsum("BNTS,BSNH->BTNH", probs.astype(v.dtype), v,
                   preferred_element_type=jnp.float32).astype(x.dtype).reshape(b, t, d)
  return dense(ctx, wo, bo)


def encoder_layer(x, mask, p: dict, num_heads: int, eps: float):
  """One post-LN BERT layer. p holds wqkv, bqkv, wo, bo, ln1_scale, ln1_bias, w_in [D, F],
  b_in [F], w_out [F, D], b_out [D], ln2_scale, ln2_bias. x [B, T, D] -> [B, T, D]."""
  a = self_attention(x, mask, p["wqkv"], p["bqkv"], p["wo"], p["bo"], num_heads)
  x = layer_norm(x + a, p["ln1_scale"], p["ln1_bias"], eps)
  inner = jax.nn.gelu(dense(x, p["w_in"], p["b_in"], jnp.float32), approximate=False)
  m = dense(inner.astype(x.dtype), p["w_out"], p["b_out"])
  return layer_norm(x + m, p["ln2_scale"], p["ln2_bias"], eps)


def segment_mean_pool(hidden, segments, num_segments: int):
  """Mean of each packed text's states. hidden [B, T, D]; segments [B, T] int, the slot (0 ..
  num_segments - 1) of the text a token belongs to, -1 on padding -> [B, num_segments, D]
  (zeros for empty slots, like mean_pool's all-padding rows)."""
  onehot = (segments[:, None, :] == jnp.arange(num_segments)[None, :, None])  # [B, S, T]
  onehot = onehot.astype(jnp.float32)
  total = jnp.einsum("BST,BTD->BSD", onehot, hidden.astype(jnp.float32))
  return total / jnp.maximum(jnp.sum(onehot, axis=-1, keepdims=True), 1e-9)


def mean_pool(hidden, mask):
  """Mean of the real tokens' states. hidden [B, T, D]; mask [B, T] bool -> [B, D].

  The count is clamped at 1e-9 like sentence-transformers, so an all-padding row gives zeros.
  """
  m = mask.astype(jnp.float32)[..., None]  # [B, T, 1]
  return (jnp.sum(hidden.astype(jnp.float32) * m, axis=1)
          / jnp.maximum(jnp.sum(m, axis=1), 1e-9))


def l2_normalize(x, eps: float = 1e-12):
  """Rows scaled to unit L2 norm (torch.nn.functional.normalize semantics). x [B, D]."""
  norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True))
  return x / jnp.maximum(norm, eps)
