"""Rotary position embeddings (Llama "rotate half" layout) with Llama-3 / linear scaling.

Shapes: B batch, T positions, N heads, H head dim (even).
"""

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np


def inverse_frequencies(head_dim: int, theta: float,
                        scaling: Mapping[str, Any] | None = None) -> np.ndarray:
  """[H/2] float32 inverse frequencies, after `rope_scaling` (None, "default", "linear", "llama3")."""
  inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
  kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
  if kind in (None, "default"):
    pass
  elif kind == "linear":
    inv = inv / float(scaling["factor"])
  elif kind == "llama3":
    factor = float(scaling["factor"])
    low = float(scaling["low_freq_factor"])
    high = float(scaling["high_freq_factor"])
    old_len = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old_len / low, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    inv = np.where(medium, smoothed, scaled)
  else:
    raise ValueError(f"rope_scaling type {kind!r} is not supported "
                     "(expected one of: default, linear, llama3)")
  return inv.astype(np.float32)


def rope_tables(positions: jax.Array, inv_freq: jax.Array) -> tuple[jax.Array, jax.Array]:
  """positions [B, T] int -> (cos, sin) [B, T, H] float32, frequencies repeated twice."""
  angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, H/2]
  angles = jnp.concatenate([angles, angles], axis=-1)  # [B, T, H]
  return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """x [B, T, N, H]; cos/sin [B, T, H]. Computed in float32, returned in x's dtype."""
  x32 = x.astype(jnp.float32)
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
  out = x32 * cos[:, :, None, :] + rotated * sin[:, :, None, :]
  return out.astype(x.dtype)
