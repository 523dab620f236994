"""Attention masks for the decoder's own cache (the softmax itself is
`ops.joint_attention.partial_attention`, shared with KG-JSA++).

Shapes: B batch, T query length, S cache slots.
"""

import jax
import jax.numpy as jnp


def causal_mask(valid: jax.Array, query_slots: jax.Array) -> jax.Array:
  """Key-validity [B,S] and the cache slot of each query [B,T] or [T] -> mask [B,T,S].

  A query at slot i sees keys at slots <= i that are valid (left padding is invalid).
  """
  s = valid.shape[-1]
  slots = jnp.arange(s)
  query_slots = jnp.broadcast_to(query_slots, (valid.shape[0],) + query_slots.shape[-1:])
  return (slots[None, None, :] <= query_slots[:, :, None]) & valid[:, None, :]
