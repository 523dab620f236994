"""Normalisation ops. Shapes: [..., D]."""

import jax
import jax.numpy as jnp


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
  """Llama RMSNorm: statistics in float32, result cast back to x's dtype before the gain."""
  x32 = x.astype(jnp.float32)
  normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return weight * normed.astype(x.dtype)
