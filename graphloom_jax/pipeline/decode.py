"""Stage 5, decoding: routed KG-JSA++ in the frozen decoder, and teacher-forced scoring.

Shapes: B rows, T row length, M slots, V vocabulary.

`heads_forward` is the one full-sequence call of the decoder with GraphLoom's memory: the heads
build the memory (fusion prefix + projected slots) from a batch of `pipeline.evidence` arrays,
the router recomputes the active set at every position from the residual stream entering layer
`first_layer` (`memory.first_layer`; -1 = the upper half), and layers >= first_layer attend
jointly to prefix, active slots and their own cache. Training (`training.trainer`) and answering
both call it.

`score_rows` runs it on [prompt ; text ; EOS] rows: the length-normalised log-likelihood of the
text (multiple-choice options; docs/method.md §5) and the router's gates and active set at
every position (the answer's citations). `option_logprob` is that score, the one
implementation: the memory modes (`score_rows`), the text modes (`score_text_rows`,
`score_text_options`) and the trainer's validation step all reduce logits with it.

On a mesh (`graphloom_jax.sharding`; `mesh=` of `score_rows`, `score_text_rows` and `generate`) the
rows are padded to a multiple of its "data" axis and split over it, the parameters stay where
they are (replicated, or split over "model"), and the results are the real rows on the host.
Without one, everything runs on the default device as before.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphloom_jax import sharding
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import llama
from graphloom_jax.pipeline import prompts as prompts_lib


@jax.jit
def option_logprob(logits: jax.Array, tokens: jax.Array, option_mask: jax.Array) -> jax.Array:
  """Length-normalised log-likelihood of the option tokens.

  logits [N, T, V] from a forward pass over tokens [N, T]; option_mask [N, T] marks the option's
  tokens (position i is predicted by the logits at i - 1, so position 0 must be False).
  Returns [N]; -inf for a row without option tokens.
  """
  logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
  tok = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
  m = option_mask[:, 1:]
  count = jnp.sum(m, axis=-1)
  total = jnp.sum(jnp.where(m, tok, 0.0), axis=-1)
  return jnp.where(count > 0, total / jnp.maximum(count, 1), -jnp.inf)


def heads_forward(heads, backbone: llama.Llama, batch, first_layer: int,
                  return_slot_attention: bool = False, logits_at: jax.Array | None = None):
  """logits [B, T, V] ([B, A, V] at the positions `logits_at` [B, A] when given), the attention
  mass on each slot ([L_m, B, T, N, M] when asked, else None) and the router's `Routing`
  ([B, T, M] fields) for batch rows tokens/valid [B, T]."""
  mem, inputs = heads.memory(batch, backbone.dtype)
  record = []
  tokens = batch["tokens"]
  cache = llama.KVCache.init(backbone.config, tokens.shape[0], tokens.shape[1], backbone.dtype)
  logits, _, aux = backbone(tokens, cache, batch["valid"], memory=mem,
                            route=heads.router.route_fn(inputs, record), first_layer=first_layer,
                            return_slot_attention=return_slot_attention, logits_at=logits_at)
  if len(record) != 1:
    raise RuntimeError(f"the decoder called the router {len(record)} times in one forward pass; "
                       "expected exactly one routing decision per position")
  return logits, aux.get("slot_attention"), record[0]


@functools.partial(jax.jit, static_argnames=("heads_def", "backbone_def", "first_layer"))
def _score_rows(heads_def, heads_state, backbone_def, backbone_state, batch, *, first_layer: int):
  heads = nnx.merge(heads_def, heads_state)
  backbone = nnx.merge(backbone_def, backbone_state)
  logits, _, r = heads_forward(heads, backbone, batch, first_layer)
  lp = option_logprob(logits, batch["tokens"], batch["output_mask"])
  # An adapter's batch has no slot bank: its (one, empty) slot is never active anyway.
  active = r.active & batch["slot_valid"][:, None, :] if "slot_valid" in batch else r.active
  return lp, r.gates, active


def score_rows(heads_def, heads_state, backbone_def, backbone_state, batch, *, first_layer: int,
               mesh: jax.sharding.Mesh | None = None):
  """Per row: log-likelihood of its generated part (output_mask) averaged over its tokens [B],
  and the router's gates [B, T, M] and active set [B, T, M]. With `mesh` the rows (`batch`,
  host or device arrays [B, ...]) are split over its "data" axis and the results are numpy."""
  if mesh is None:
    return _score_rows(heads_def, heads_state, backbone_def, backbone_state, batch,
                       first_layer=first_layer)
  placed, n = sharding.place_rows(batch, mesh)
  out = _score_rows(heads_def, heads_state, backbone_def, backbone_state, placed,
                    first_layer=first_layer)
  return tuple(sharding.unpad(x, n) for x in out)


@functools.partial(jax.jit, static_argnames=("backbone_def",))
def _score_text_rows(backbone_def, backbone_state, tokens, valid, output_mask):
  backbone = nnx.merge(backbone_def, backbone_state)
  cache = llama.KVCache.init(backbone.config, tokens.shape[0], tokens.shape[1], backbone.dtype)
  logits, _, _ = backbone(tokens, cache, valid)
  return option_logprob(logits, tokens, output_mask)


def score_text_rows(backbone_def, backbone_state, tokens, valid, output_mask, *,
                    mesh: jax.sharding.Mesh | None = None):
  """`score_rows` without memory (the text modes): the mean token log-likelihood [B] of each
  row's generated part, computed on the device (the [B, T, V] logits never leave it)."""
  if mesh is None:
    return _score_text_rows(backbone_def, backbone_state, tokens, valid, output_mask)
  placed, n = sharding.place_rows(dict(tokens=tokens, valid=valid, output_mask=output_mask),
                                  mesh)
  return sharding.unpad(_score_text_rows(backbone_def, backbone_state, placed["tokens"],
                                         placed["valid"], placed["output_mask"]), n)


@functools.partial(jax.jit, static_argnames=("backbone_def",))
def _score_text_options(backbone_def, backbone_state, prompt, prompt_valid, last, options,
                        option_valid, row):
  backbone = nnx.merge(backbone_def, backbone_state)
  b, p = prompt.shape
  o = options.shape[1]
  cache = llama.KVCache.init(backbone.config, b, p + o, backbone.dtype)
  logits, cache, _ = backbone(prompt, cache, prompt_valid)  # [B, P, V]
  shared = llama.KVCache(k=cache.k[:, row], v=cache.v[:, row], valid=cache.valid[row],
                         next_pos=cache.next_pos[row], length=cache.length)
  cont, _, _ = backbone(options, shared, option_valid)  # [N, O, V]
  # [prompt's last position ; the option's own positions] predicts [option tokens ; -]: the
  # rows option_logprob scores; column 0 of tokens is a dummy that the mask leaves out.
  full = jnp.concatenate([logits[row, last[row]][:, None], cont], axis=1)  # [N, 1 + O, V]
  tokens = jnp.concatenate([jnp.zeros_like(options[:, :1]), options], axis=1)
  mask = jnp.concatenate([jnp.zeros_like(option_valid[:, :1]), option_valid], axis=1)
  return option_logprob(full, tokens, mask)


def score_text_options(backbone_def, backbone_state, prompts: list[list[int]],
                       options: list[list[list[int]]], pad: int, *,
                       mesh: jax.sharding.Mesh | None = None) -> np.ndarray:
  """The text modes' option scores with the prompt read once: the mean token log-likelihood
  of each option's tokens (answer + EOS) after its prompt, for every (prompt, option) in order
  [N]. Equal to `score_text_rows` on [prompt ; option] rows (within float32 rounding), but each
  prompt is prefilled once into a KV cache that all its options continue, instead of once per
  option (Flat-RAG prompts run to hundreds of tokens, options to a few)."""
  if len(prompts) != len(options):
    raise ValueError(f"{len(prompts)} prompts for {len(options)} option lists")
  plen = prompts_lib.bucket(max(len(q) for q in prompts))
  olen = prompts_lib.bucket(max(len(x) for opts in options for x in opts), 8)
  prompt = np.full((len(prompts), plen), pad, np.int32)
  pvalid = np.zeros(prompt.shape, bool)
  for i, q in enumerate(prompts):
    prompt[i, :len(q)], pvalid[i, :len(q)] = q, True
  rows = [(i, x) for i, opts in enumerate(options) for x in opts]
  opt = np.full((len(rows), olen), pad, np.int32)
  ovalid = np.zeros(opt.shape, bool)
  for j, (_, x) in enumerate(rows):
    opt[j, :len(x)], ovalid[j, :len(x)] = x, True
  row = np.array([i for i, _ in rows], np.int32)
  last = np.array([len(q) - 1 for q in prompts], np.int32)
  if mesh is None:
    return np.asarray(_score_text_options(backbone_def, backbone_state, prompt, pvalid, last,
                                          opt, ovalid, row))
  placed_p, _ = sharding.place_rows(dict(prompt=prompt, valid=pvalid, last=last), mesh)
  placed_o, n = sharding.place_rows(dict(opt=opt, valid=ovalid, row=row), mesh)
  return sharding.unpad(_score_text_options(
      backbone_def, backbone_state, placed_p["prompt"], placed_p["valid"], placed_p["last"],
      placed_o["opt"], placed_o["valid"], placed_o["row"]), n)


def check_settings(decode_cfg) -> None:
  """The `decode` section: max_new_tokens a positive integer."""
  n = decode_cfg.max_new_tokens
  if isinstance(n, bool) or not isinstance(n, int) or n < 1:
    raise ValueError(f"config.decode.max_new_tokens={n!r}; expected an integer >= 1")


def generate(decoder: decoder_lib.Decoder, prompt_ids, max_new_tokens: int, *,
             mesh: jax.sharding.Mesh | None = None, arrays=None, memory_fn=None,
             first_layer: int = -1, sparse: llama.SparseSpec | None = None,
             return_routing: bool = False):
  """Greedy generation of `decoder` for each prompt (token id lists), with GraphLoom's memory
  when `arrays` (stacked evidence [B, ...]) and `memory_fn(batch) -> (memory, router)` are
  given: `decoder.generate_ids`, with the memory built from the evidence as placed on `mesh`
  (padded to a multiple of its "data" axis and split over it, as generate_ids pads the
  prompts; without a mesh, on the default device). `return_routing` (with memory): also the
  routing of every generated step, as `generate_ids` returns it."""
  if arrays is None:
    return decoder.generate_ids(prompt_ids, max_new_tokens, sparse=sparse, mesh=mesh)
  evidence, _ = sharding.place_rows(arrays, mesh)
  memory, router = memory_fn(evidence)
  return decoder.generate_ids(prompt_ids, max_new_tokens, memory=memory, router=router,
                              first_layer=first_layer, sparse=sparse, mesh=mesh,
                              return_routing=return_routing)


def repeat_rows(arrays: dict, counts) -> dict:
  """Per-question arrays [Q, ...] repeated `counts[q]` times along the first axis."""
  idx = np.repeat(np.arange(len(counts)), counts)
  return {k: v[idx] for k, v in arrays.items()}
