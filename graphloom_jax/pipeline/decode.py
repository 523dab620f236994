"""Stage 5, decoding: routed KG-JSA++ in the frozen decoder, and teacher-forced scoring.

Shapes: B rows, T row length, M slots, V vocabulary.

`heads_forward` is the one full-sequence call of the decoder with GraphLoom's memory: the heads
build the memory (fusion prefix + projected slots) from a batch of `pipeline.evidence` arrays,
the router recomputes the active set at every position from the residual stream entering layer
`first_layer` (`memory.first_layer`; -1 = the upper half), and layers >= first_layer attend
jointly to prefix, active slots and their own cache. Training (`training.trainer`) and answering
both call it.

`score_rows` runs it on [prompt ; text ; EOS] rows: the length-normalised log-likelihood of the
text (multiple-choice options; MISSION.md section 5) and the router's gates and active set at
every position (the answer's citations).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from flax import nnx

from graphloom_jax.evaluation import answers
from graphloom_jax.models import llama


def heads_forward(heads, backbone: llama.Llama, batch, first_layer: int,
                  return_slot_attention: bool = False):
  """logits [B, T, V], the attention mass on each slot ([L_m, B, T, N, M] when asked, else None)
  and the router's `Routing` ([B, T, M] fields) for batch rows tokens/valid [B, T]."""
  mem, inputs = heads.memory(batch, backbone.dtype)
  record = []
  tokens = batch["tokens"]
  cache = llama.KVCache.init(backbone.config, tokens.shape[0], tokens.shape[1], backbone.dtype)
  logits, _, aux = backbone(tokens, cache, batch["valid"], memory=mem,
                            route=heads.router.route_fn(inputs, record), first_layer=first_layer,
                            return_slot_attention=return_slot_attention)
  if len(record) != 1:
    raise RuntimeError(f"the decoder called the router {len(record)} times in one forward pass; "
                       "expected exactly one routing decision per position")
  return logits, aux.get("slot_attention"), record[0]


@functools.partial(jax.jit, static_argnames=("heads_def", "backbone_def", "first_layer"))
def score_rows(heads_def, heads_state, backbone_def, backbone_state, batch, *, first_layer: int):
  """Per row: log-likelihood of its generated part (output_mask) averaged over its tokens [B],
  and the router's gates [B, T, M] and active set [B, T, M]."""
  heads = nnx.merge(heads_def, heads_state)
  backbone = nnx.merge(backbone_def, backbone_state)
  logits, _, r = heads_forward(heads, backbone, batch, first_layer)
  lp = answers.option_logprob(logits, batch["tokens"], batch["output_mask"])
  return lp, r.gates, r.active & batch["slot_valid"][:, None, :]


@functools.partial(jax.jit, static_argnames=("backbone_def",))
def score_text_rows(backbone_def, backbone_state, tokens, valid, output_mask):
  """`score_rows` without memory (the text modes): the mean token log-likelihood [B] of each
  row's generated part, computed on the device (the [B, T, V] logits never leave it)."""
  backbone = nnx.merge(backbone_def, backbone_state)
  cache = llama.KVCache.init(backbone.config, tokens.shape[0], tokens.shape[1], backbone.dtype)
  logits, _, _ = backbone(tokens, cache, valid)
  return answers.option_logprob(logits, tokens, output_mask)


def repeat_rows(arrays: dict, counts) -> dict:
  """Per-question arrays [Q, ...] repeated `counts[q]` times along the first axis."""
  idx = np.repeat(np.arange(len(counts)), counts)
  return {k: v[idx] for k, v in arrays.items()}
