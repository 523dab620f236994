"""Stage 5, decoding: routed KG-JSA++ in the frozen decoder, and teacher-forced scoring.

Shapes: B rows, T row length, M slots, V vocabulary.

`heads_forward` is the one full-sequence call of the decoder with GraphLoom's memory: the heads
build the memory (fusion prefix + projected slots) from a batch of `pipeline.evidence` arrays,
the router recomputes the active set at every position from the residual stream entering layer
`first_layer` (`memory.first_layer`; -1 = the upper half), and layers >= first_layer attend
jointly to prefix, active slots and their own cache. Training (`training.trainer`) and answering
both call it. `continue_options` scores multiple-choice options as continuations of a
question's prompt from the cache of that call (the trainer's option rows).

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
                  return_slot_attention: bool = False, logits_at: jax.Array | None = None,
                  extra_slots: int = 0, return_cache: bool = False):
  """logits [B, T, V] ([B, A, V] at the positions `logits_at` [B, A] when given), the attention
  mass on each slot ([L_m, B, T, N, M] when asked, else None) and the router's `Routing`
  ([B, T, M] fields) for batch rows tokens/valid [B, T]; with `return_cache` also the KV cache
  of the rows, made with `extra_slots` free slots after them (`continue_options`)."""
  mem, inputs = heads.memory(batch, backbone.dtype)
  record = []
  tokens = batch["tokens"]
  cache = llama.KVCache.init(backbone.config, tokens.shape[0], tokens.shape[1] + extra_slots,
                             backbone.dtype)
  logits, cache, aux = backbone(tokens, cache, batch["valid"], memory=mem,
                                route=heads.router.route_fn(inputs, record),
                                first_layer=first_layer,
                                return_slot_attention=return_slot_attention,
                                logits_at=logits_at)
  if len(record) != 1:
    raise RuntimeError(f"the decoder called the router {len(record)} times in one forward pass; "
                       "expected exactly one routing decision per position")
  out = (logits, aux.get("slot_attention"), record[0])
  return out + (cache,) if return_cache else out


# Row keys that are not a question's evidence (`continue_options` does not repeat them).
_ROW_KEYS = ("tokens", "valid", "output_mask", "targets", "loss_mask")


def continue_options(heads, backbone: llama.Llama, batch, cache: llama.KVCache,
                     prompt_len: jax.Array, first_logits: jax.Array, options: jax.Array,
                     option_valid: jax.Array, first_layer: int) -> jax.Array:
  """Each question's options scored as continuations of its prompt, which is read once: the
  `option_logprob` of [prompt ; option] rows (within float32 rounding), for J options at the
  cost of J * O positions instead of J * T.

  batch: the question rows [B, ...] (their evidence arrays); cache: the KV cache of
  `heads_forward` over rows whose first prompt_len [B] tokens are each question's prompt (made
  with >= O extra slots; what follows the prompt in a row is masked out here); first_logits
  [B, V]: the logits at each prompt's last position, which predict every option's first token;
  options / option_valid [B, J, O]: the options' tokens (with their EOS) and mask. The options
  get the question's memory and their own routing, with the router's output-mention feature
  read from the option's tokens (the generated part of an option row). Returns [B, J]."""
  b, j, o = options.shape
  row = jnp.repeat(jnp.arange(b), j)
  in_prompt = jnp.arange(cache.max_len)[None, :] < prompt_len[:, None]
  shared = llama.KVCache(k=cache.k[:, row], v=cache.v[:, row],
                         valid=(cache.valid & in_prompt)[row],
                         next_pos=prompt_len[row].astype(jnp.int32), length=cache.length)
  tokens, valid = options.reshape(b * j, o), option_valid.reshape(b * j, o)
  rows = {k: jnp.repeat(v, j, axis=0) for k, v in batch.items()
          if k not in _ROW_KEYS and not k.startswith("mc_") and v.ndim >= 1}
  rows.update(tokens=tokens, valid=valid, output_mask=valid)
  mem, inputs = heads.memory(rows, backbone.dtype)
  record = []
  cont, _, _ = backbone(tokens, shared, valid, memory=mem,
                        route=heads.router.route_fn(inputs, record), first_layer=first_layer)
  # [prompt's last position ; the option's own positions] predicts [option tokens ; -]: the
  # rows option_logprob scores; column 0 of tokens is a dummy that the mask leaves out.
  full = jnp.concatenate([first_logits[row][:, None].astype(cont.dtype), cont], axis=1)
  padded = jnp.concatenate([jnp.zeros_like(tokens[:, :1]), tokens], axis=1)
  mask = jnp.concatenate([jnp.zeros_like(valid[:, :1]), valid], axis=1)
  return option_logprob(full, padded, mask).reshape(b, j)


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


@functools.partial(jax.jit, static_argnames=("heads_def", "backbone_def", "first_layer"))
def _score_options(heads_def, heads_state, backbone_def, backbone_state, batch, *,
                   first_layer: int):
  heads = nnx.merge(heads_def, heads_state)
  backbone = nnx.merge(backbone_def, backbone_state)
  options, option_valid = batch["options"], batch["option_valid"]
  rows = {k: v for k, v in batch.items() if k not in ("options", "option_valid")}
  prompt_len = jnp.sum(rows["valid"], axis=1).astype(jnp.int32)
  logits, _, _, cache = heads_forward(heads, backbone, rows, first_layer,
                                      logits_at=(prompt_len - 1)[:, None],
                                      extra_slots=options.shape[-1], return_cache=True)
  return continue_options(heads, backbone, rows, cache, prompt_len, logits[:, 0], options,
                          option_valid, first_layer)


def score_options(heads_def, heads_state, backbone_def, backbone_state, arrays: dict,
                  prompts: list[list[int]], options: list[list[list[int]]], pad: int, *,
                  first_layer: int, mesh: jax.sharding.Mesh | None = None) -> np.ndarray:
  """The memory modes' option scores with each prompt read once: per question q, prompt
  `prompts[q]`, the question's memory arrays `arrays` [Q, ...] and option token lists
  `options[q]` (answer + EOS each), the length-normalised log-likelihood of every option in
  order, flattened [sum of the option counts]. Equal to `score_rows` on [prompt ; option] rows
  (within float32 rounding); each prompt runs once with the memory and its options continue
  its cache (`continue_options`). Questions are padded to the most options of any (a padded
  option is scored -inf and dropped)."""
  if len(prompts) != len(options) or any(len(v) != len(prompts) for v in arrays.values()):
    raise ValueError(f"{len(prompts)} prompts, {len(options)} option lists and arrays of "
                     f"{sorted({len(v) for v in arrays.values()})} questions")
  plen = prompts_lib.bucket(max(len(x) for x in prompts))
  olen = prompts_lib.bucket(max((len(x) for opts in options for x in opts), default=1), 8)
  most = max((len(opts) for opts in options), default=0)
  if not most:
    return np.zeros((0,), np.float32)
  n = len(prompts)
  tokens = np.full((n, plen), pad, np.int32)
  opt = np.full((n, most, olen), pad, np.int32)
  opt_valid = np.zeros((n, most, olen), bool)
  for q, (ids, opts) in enumerate(zip(prompts, options)):
    tokens[q, :len(ids)] = ids
    for j, x in enumerate(opts):
      opt[q, j, :len(x)] = x
      opt_valid[q, j, :len(x)] = True
  valid = np.arange(plen)[None, :] < np.array([len(x) for x in prompts])[:, None]
  batch = dict(arrays, tokens=tokens, valid=valid, output_mask=np.zeros_like(valid),
               options=opt, option_valid=opt_valid)
  placed, n_real = sharding.place_rows(batch, mesh)
  scores = sharding.unpad(_score_options(heads_def, heads_state, backbone_def, backbone_state,
                                         placed, first_layer=first_layer), n_real)
  return np.concatenate([scores[q, :len(opts)] for q, opts in enumerate(options)])


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
