"""What the decoder reads besides its own tokens: GraphLoom's memory for KG-JSA++.

Shapes: B batch, T query length, P prefix length, M slot-bank size, D model width,
L_m number of memory layers.

The decoder maps every memory vector (model width) into each memory layer's key/value space
with that layer's frozen attention norm and k/v projections (no rotary phase unless configured),
so the trainable modules only ever produce model-width vectors:

- `prefix`: [B, P, D] shared by all memory layers, or [L_m, B, P, D] one set per layer.
- `slot_keys` / `slot_values`: [B, M, D]; entity slot p has key P(Emb(s)), value P(Emb(r + o)),
  relation slot key P(Emb(r)), value P(Emb(s + o)).
- `slot_valid`: [B, M] bool, padding mask of the bank.
- `slot_active` / `slot_bias`: [B, T, M] the active set A_t and the reliability bias log g_p per
  query position. Either given here (fixed routing, tests) or produced inside the forward pass by
  a router callable `route(h [B, T, D], memory) -> (active [B, T, M] bool, bias [B, T, M])`
  that sees the residual stream entering the first memory layer, so that routing can change at
  every decoding step inside the jitted loop.
- `slot_key_tokens`: [B, M, W] int32, each slot's name as decoder tokens (right-aligned, -1
  padded; see `ops.routing.output_mentions`), or None.
- `slot_value_tokens`: [B, M, V] int32, each slot's value text as decoder tokens (-1 padded), or
  None. When given, the decoder adds to each slot value the mean of its own input embeddings of
  these tokens before the k/v projections (`fusion.token_values`; docs/method.md §3), so a slot
  carries its words in the decoder's own vocabulary beside the projected sentence embedding.
- `slot_mentioned`: [B, T, M] bool, whether the slot's name already appeared in the generated
  output at each query position (a router context feature). Teacher-forced callers set it with
  `with_output_mentions`; `Decoder.generate` keeps it up to date at every step itself when
  `slot_key_tokens` is given. None reads as never mentioned.
"""

from typing import Callable

import flax.struct
import jax
import jax.numpy as jnp

from graphloom_jax.ops import routing


@flax.struct.dataclass
class Memory:
  prefix: jax.Array  # [B, P, D] or [L_m, B, P, D]
  prefix_mask: jax.Array  # [B, P] bool
  slot_keys: jax.Array  # [B, M, D]
  slot_values: jax.Array  # [B, M, D]
  slot_valid: jax.Array  # [B, M] bool
  slot_active: jax.Array | None = None  # [B, T, M] bool
  slot_bias: jax.Array | None = None  # [B, T, M] float
  slot_key_tokens: jax.Array | None = None  # [B, M, W] int32
  slot_mentioned: jax.Array | None = None  # [B, T, M] bool
  slot_value_tokens: jax.Array | None = None  # [B, M, V] int32

  @property
  def batch_size(self) -> int:
    return self.slot_keys.shape[0]

  @property
  def num_slots(self) -> int:
    return self.slot_keys.shape[1]

  @property
  def prefix_len(self) -> int:
    return self.prefix.shape[-2]


Router = Callable[[jax.Array, Memory], tuple[jax.Array, jax.Array]]


def empty(batch: int, width: int, dtype=jnp.float32, prefix_len: int = 0,
          num_slots: int = 0) -> Memory:
  """A memory with nothing valid in it (prefix and slots all masked)."""
  return Memory(
      prefix=jnp.zeros((batch, prefix_len, width), dtype),
      prefix_mask=jnp.zeros((batch, prefix_len), bool),
      slot_keys=jnp.zeros((batch, num_slots, width), dtype),
      slot_values=jnp.zeros((batch, num_slots, width), dtype),
      slot_valid=jnp.zeros((batch, num_slots), bool),
  )


def with_output_mentions(memory: Memory, tokens: jax.Array, output_mask: jax.Array) -> Memory:
  """`memory` with `slot_mentioned` computed for teacher-forced tokens [B, T] whose generated part
  is `output_mask` [B, T] (unchanged when the memory has no slot_key_tokens)."""
  if memory.slot_key_tokens is None:
    return memory
  return memory.replace(slot_mentioned=routing.output_mentions(
      tokens, output_mask, memory.slot_key_tokens))
