"""GraphLoom's trainable heads around the frozen decoder: slot projection, fusion prefix, router.

Shapes: B batch, M slots, E text-embedding width, R image items, I image-feature width,
Q evidence items, D model width, F slot features.

`GraphLoomHeads.memory(batch)` turns one batch of host-built features (see
`graphloom_jax.training.data`) into the decoder's `Memory` plus the router's side inputs;
`route_fn` gives the router callable the decoder calls inside its forward pass. Batch keys read
here: slot_keys [B, M, E], slot_values [B, M, E], slot_valid [B, M], slot_is_entity [B, M],
slot_features [B, M, F], slot_reliability [B, M], image [B, R, I], image_mask [B, R],
question_emb [B, E], evidence [B, Q, E], evidence_mask [B, Q]; optional slot_key_tokens
[B, M, W] and, for teacher-forced rows, tokens [B, T] with output_mask [B, T] (the router's
output-mention feature).
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphloom_jax.models import fusion, slots
from graphloom_jax.models import memory as memory_lib
from graphloom_jax.models import router as router_lib


class GraphLoomHeads(nnx.Module):

  def __init__(self, config, model_dim: int, embed_dim: int, image_dim: int,
               num_memory_layers: int, *, rngs: nnx.Rngs):
    """config: the full ml_collections config (sections memory, router)."""
    self.slot_proj = slots.SlotProjection(embed_dim, model_dim, rank=config.fusion.slot_rank,
                                          rngs=rngs)
    per_layer = num_memory_layers if config.fusion.per_layer else 0
    self.fusion = fusion.FusionPrefix(
        image_dim, embed_dim, model_dim, config.memory.prefix_len,
        fusion_dim=config.fusion.dim, num_layers=per_layer, rngs=rngs)
    self.router = router_lib.Router.from_config(config, model_dim, image_dim,
                                                slots.NUM_FEATURES, rngs=rngs)

  def memory(self, batch, dtype=jnp.float32) -> tuple[memory_lib.Memory, router_lib.RouterInputs]:
    keys, values = self.slot_proj(batch["slot_keys"], batch["slot_values"], batch["slot_valid"])
    prefix, prefix_mask = self.fusion(batch["image"], batch["image_mask"], batch["question_emb"],
                                      batch["evidence"], batch["evidence_mask"])
    mem = memory_lib.Memory(prefix=prefix.astype(dtype), prefix_mask=prefix_mask,
                            slot_keys=keys.astype(dtype), slot_values=values.astype(dtype),
                            slot_valid=batch["slot_valid"],
                            slot_key_tokens=batch.get("slot_key_tokens"))
    if "output_mask" in batch:  # teacher-forced rows: mentions of slot names in the answer
      mem = memory_lib.with_output_mentions(mem, batch["tokens"], batch["output_mask"])
    image_mask = batch["image_mask"][..., None].astype(jnp.float32)
    visual = jnp.sum(batch["image"] * image_mask, axis=1) / jnp.maximum(
        jnp.sum(image_mask, axis=1), 1.0)
    inputs = router_lib.RouterInputs(features=batch["slot_features"],
                                     reliability=batch["slot_reliability"], visual=visual,
                                     is_entity=batch["slot_is_entity"])
    return mem, inputs


def count_params(module: nnx.Module) -> int:
  """Number of trainable (nnx.Param) scalars."""
  state = nnx.state(module, nnx.Param)
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(state)))


def param_counts(config, model_dim: int, embed_dim: int, image_dim: int,
                 num_memory_layers: int) -> dict[str, int]:
  """Trainable parameters per head for a model width, from shapes only (no memory used)."""
  heads = nnx.eval_shape(lambda: GraphLoomHeads(config, model_dim, embed_dim, image_dim,
                                                num_memory_layers, rngs=nnx.Rngs(0)))
  out = {name: count_params(getattr(heads, name)) for name in ("slot_proj", "fusion", "router")}
  out["total"] = sum(out.values())
  return out
