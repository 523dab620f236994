"""Grouped-query softmax attention.

Shapes: B batch, T query length, S key length, N query heads, K kv heads, G = N / K query heads
per kv head, H head dim. Query head n reads kv head n // G (Llama / `repeat_kv` order).
"""

import jax
import jax.numpy as jnp


def gqa_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                  scale: float | None = None) -> jax.Array:
  """q [B,T,N,H], k/v [B,S,K,H], mask bool broadcastable to [B,T,S] -> [B,T,N,H].

  Softmax in float32. Rows without any valid key give zeros, not NaN.
  """
  b, t, n, h = q.shape
  kv = k.shape[2]
  scale = h ** -0.5 if scale is None else scale
  qg = q.reshape(b, t, kv, n // kv, h)  # [B,T,K,G,H]
  scores = jnp.einsum("BTKGH,BSKH->BKGTS", qg, k, preferred_element_type=jnp.float32) * scale
  mask = jnp.broadcast_to(mask, (b, t, k.shape[1]))[:, None, None]  # [B,1,1,T,S]
  scores = jnp.where(mask, scores, -jnp.inf)
  peak = jnp.max(scores, axis=-1, keepdims=True)
  peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
  weights = jnp.where(mask, jnp.exp(scores - peak), 0.0)
  denom = jnp.sum(weights, axis=-1, keepdims=True)
  probs = weights / jnp.where(denom > 0, denom, 1.0)
  out = jnp.einsum("BKGTS,BSKH->BTKGH", probs.astype(v.dtype), v)
  return out.reshape(b, t, n, h)


def causal_mask(valid: jax.Array, query_slots: jax.Array) -> jax.Array:
  """Key-validity [B,S] and the cache slot of each query [B,T] or [T] -> mask [B,T,S].

  A query at slot i sees keys at slots <= i that are valid (left padding is invalid).
  """
  s = valid.shape[-1]
  slots = jnp.arange(s)
  query_slots = jnp.broadcast_to(query_slots, (valid.shape[0],) + query_slots.shape[-1:])
  return (slots[None, None, :] <= query_slots[:, :, None]) & valid[:, None, :]
