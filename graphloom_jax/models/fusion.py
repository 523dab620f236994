"""The multimodal prefix: a fusion projection from image and text evidence to L_p vectors.

Shapes: B batch, R image regions/objects, I image-feature width (any), E text-embedding width,
Q evidence items, C fusion width, P prefix length (L_p), D model width, L_m memory layers.

Inputs are projected into a common fusion width C with a learned type embedding (image,
question, evidence), then P learned prefix queries attend over them (one masked softmax each,
scaled by 1/sqrt(C)), and a linear map takes query + attended context to model width. With
`per_layer`, each memory layer gets its own learned gain and offset on top of the shared output
([L_m, B, P, D]), which costs 2 L_m D parameters instead of a full projection per layer.

For the embedded benchmark the image features are sentence embeddings of the scene's object and
region names; for real images any feature width works (set `image_dim`).

The prefix mask is True wherever the example has at least one valid input: a prefix computed
from nothing would only inject the learned query bias.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx


class FusionPrefix(nnx.Module):

  def __init__(self, image_dim: int, text_dim: int, model_dim: int, prefix_len: int, *,
               fusion_dim: int = 128, num_layers: int = 0, rngs: nnx.Rngs):
    """num_layers > 0 makes a per-layer prefix [L_m, B, P, D]; 0 a shared one [B, P, D]."""
    if prefix_len <= 0:
      raise ValueError(f"prefix_len={prefix_len} must be positive")
    self.image_in = nnx.Linear(image_dim, fusion_dim, rngs=rngs)
    self.text_in = nnx.Linear(text_dim, fusion_dim, rngs=rngs)
    self.type_embed = nnx.Param(jax.random.normal(rngs.params(), (3, fusion_dim)) * 0.02)
    self.queries = nnx.Param(jax.random.normal(rngs.params(), (prefix_len, fusion_dim)))
    self.out = nnx.Linear(fusion_dim, model_dim, rngs=rngs)
    self.fusion_dim = fusion_dim
    self.num_layers = num_layers
    if num_layers:
      self.layer_gain = nnx.Param(jnp.ones((num_layers, model_dim)))
      self.layer_offset = nnx.Param(jnp.zeros((num_layers, model_dim)))

  def __call__(self, image: jax.Array, image_mask: jax.Array, question: jax.Array,
               evidence: jax.Array, evidence_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """image [B, R, I] + mask [B, R], question [B, E], evidence [B, Q, E] + mask [B, Q]
    -> prefix [B, P, D] (or [L_m, B, P, D]) and prefix mask [B, P]."""
    te = self.type_embed[...]
    tokens = jnp.concatenate([
        self.image_in(image) + te[0],
        self.text_in(question)[:, None, :] + te[1],
        self.text_in(evidence) + te[2],
    ], axis=1)  # [B, R + 1 + Q, C]
    mask = jnp.concatenate([
        image_mask, jnp.ones(question.shape[:1] + (1,), bool), evidence_mask], axis=1)
    queries = self.queries[...]
    logits = jnp.einsum("PC,BSC->BPS", queries, tokens) / math.sqrt(self.fusion_dim)
    logits = jnp.where(mask[:, None, :], logits, -jnp.inf)
    attn = jax.nn.softmax(logits, axis=-1)
    context = jnp.einsum("BPS,BSC->BPC", attn, tokens)
    prefix = self.out(jnp.tanh(context + queries[None]))  # [B, P, D]
    has_input = jnp.any(image_mask, axis=1) | jnp.any(evidence_mask, axis=1) | jnp.any(
        question != 0, axis=-1)
    prefix_mask = jnp.broadcast_to(has_input[:, None], prefix.shape[:2])
    if self.num_layers:
      prefix = prefix[None] * self.layer_gain[...][:, None, None, :] + self.layer_offset[...][
          :, None, None, :]
    return prefix, prefix_mask
