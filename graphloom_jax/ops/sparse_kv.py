"""Sparse self-KV selection for one KG-JSA++ decoding step: I_t = sink + recent + similar.

Shapes: B batch, S cache slots, N query heads, K kv heads, G = N // K query heads per kv head,
H head dim, I = num_sink + num_recent + num_similar the fixed budget, C = ceil(S / block_size)
key blocks.

A cache slot s of row b is a candidate when it has been written (s < length[b]) and holds a real
token (valid[b, s]; left-padded batches start their real tokens later). Among the candidates:

  sink     the first `num_sink` candidates of the row (the attention sinks at the start),
  recent   the last `num_recent` candidates (not already sink),
  similar  the top `num_similar` of the remaining candidates by cosine similarity between the
           kv group's query summary and the cached key, chosen per kv head group (in block
           mode among the remaining candidates of the best blocks; equations below).

The query summary of group g is the MEAN of its G query heads (after rotary). All G heads will
read the same selected tokens, and mean(q) . k is the mean of their attention logits, so a token
scores high when the group as a whole would attend to it; heads with larger query norms (sharper
attention) weigh more, as they do in the logits. It costs one dot product per key, where a max
over heads would cost G.

Ties in similarity go to the lower cache index (`jax.lax.top_k`'s documented order). The three
parts are disjoint and laid out [sink | recent | similar] in the output; unused entries (short
caches) have idx 0 and idx_valid False. When the row has at most I candidates, all of them are
selected (in block mode: when the remaining ones lie in the chosen blocks, as they always do in
a gap-free cache), so sparse attention then equals full causal attention.

Written as equations, with R the remaining candidates of the row (neither sink nor recent),
q_g the query summary of group g and cos(x, y) = x . y / (|x| |y|):

  token mode (block_size = 0):
    similar_g = top_{num_similar} { s in R } by cos(q_g, k_{s,g})

  block mode (block_size = P > 0), blocks c = {cP, ..., cP + P - 1} of cache slots:
    score_{c,g} = cos(q_g, sum_{s in c, s a candidate} k_{s,g})     (the block-mean key's cosine)
    B_g         = top_{n_b} { c : c holds a slot of R } by score_{c,g}
    similar_g   = top_{num_similar} { s in R : floor(s / P) in B_g } by cos(q_g, k_{s,g})
    n_b         = min(C, max(ceil(num_similar / P) + 1, ceil(POOL_KEYS / P)))
                                                                  (`candidate_blocks`)

so block mode ranks the tokens of its n_b candidate blocks by their own cosine, exactly as token
mode ranks all of R: it returns token mode's answer whenever those tokens lie in the candidate
blocks, and in general every token of token mode's answer that lies in them. The pool holds at
least POOL_KEYS = 1024 slots' worth of blocks (16 blocks of 64): on SmolLM2 with real 2k- and
4k-token prompts, pools of 2, 4, 8 and 16 blocks of 64 gave a mean teacher-forced KL(dense ||
sparse) of 0.19, 0.14, 0.10, 0.090 nats at 2k and 0.21, 0.15, 0.14, 0.093 at 4k, where token
mode gave 0.089 and 0.099 (one prompt per length, 128 steps; benchmarks/
sparse_fidelity.md); the + 1 block covers a run of
num_similar remaining tokens that straddles a block boundary when P is large. Block summaries
are kept incrementally with `update_block_summaries`, so a step scores C summaries and n_b * P
keys (gathered from the cache) instead of S keys; n_b * P does not grow with the context. Ties
among blocks go to the lower block index and among tokens to the lower cache index, as in token
mode.

Sink, recent and the remaining flags depend only on positions: `positional_selection` computes
them (one O(S) integer cumsum) once per step for all layers, via `select_sparse_kv(positional=)`.
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

_EPS = 1e-12


def _lengths(length, batch):
  length = jnp.asarray(length, jnp.int32)
  if length.ndim > 1 or (length.ndim == 1 and length.shape[0] != batch):
    raise ValueError(f"length must be a scalar or [B={batch}]; got shape {length.shape}")
  return jnp.broadcast_to(length, (batch,))


def candidates(valid, length):
  """[B, S] bool: written (index < length) and real (valid) cache slots."""
  b, s = valid.shape
  return valid & (jnp.arange(s)[None, :] < _lengths(length, b)[:, None])


def _nth_true(csum, ranks):
  """Positions of the ranks-th True (0-based) per row given csum = cumsum(mask) along the last
  axis. csum [..., S] int, ranks [..., R] int -> [..., R] int32 in [0, S] (S: no such True)."""
  lead = csum.shape[:-1]
  rows = math.prod(lead)
  flat_c = csum.reshape(rows, csum.shape[-1])
  flat_r = ranks.reshape(rows, ranks.shape[-1])
  pos = jax.vmap(lambda c, r: jnp.searchsorted(c, r + 1, side="left"))(flat_c, flat_r)
  return pos.reshape(lead + ranks.shape[-1:]).astype(jnp.int32)


class Positional(NamedTuple):
  """The parts of I_t that depend only on positions (shared by all layers and kv groups)."""
  sink_idx: jax.Array  # [B, num_sink] int32, the first candidates in order
  sink_ok: jax.Array  # [B, num_sink] bool
  recent_idx: jax.Array  # [B, num_recent] int32, the last candidates in chronological order
  recent_ok: jax.Array  # [B, num_recent] bool (False where it would repeat a sink token)
  remaining: jax.Array  # [B, S] bool, candidates that are neither sink nor recent
  block_remaining: jax.Array | None  # [B, C] bool, blocks holding a remaining candidate


def positional_selection(valid, length, *, num_sink, num_recent, block_size=0):
  """Sink, recent and remaining candidates of every row; see `Positional`.

  Compute it once per decoding step and pass it to `select_sparse_kv(positional=...)` of every
  layer: it is the only O(S) work left in block mode. block_size > 0 also fills
  `block_remaining`.
  """
  c = candidates(valid, length)
  csum = jnp.cumsum(c.astype(jnp.int32), axis=-1)
  total = csum[:, -1:]  # [B, 1]
  rank = csum - 1  # rank of each candidate among its row's candidates
  remaining = c & (rank >= num_sink) & (total - 1 - rank >= num_recent)

  sink_rank = jnp.broadcast_to(jnp.arange(num_sink), (c.shape[0], num_sink))
  sink_ok = sink_rank < total
  sink_idx = jnp.where(sink_ok, _nth_true(csum, sink_rank), 0)

  recent_rank = total - num_recent + jnp.arange(num_recent)[None, :]
  recent_ok = (recent_rank >= num_sink) & (recent_rank >= 0)
  recent_idx = jnp.where(recent_ok, _nth_true(csum, recent_rank), 0)
  block_remaining = None
  if block_size > 0:
    b, s = remaining.shape
    nb = -(-s // block_size)
    block_remaining = jnp.pad(remaining, ((0, 0), (0, nb * block_size - s))).reshape(
        b, nb, block_size).any(-1)
  return Positional(sink_idx, sink_ok, recent_idx, recent_ok, remaining, block_remaining)


def query_summary(q, num_kv):
  """[B, N, H] queries -> [B, K, H] the mean of each kv group's G query heads."""
  b, n, h = q.shape
  if n % num_kv:
    raise ValueError(f"q has {n} heads, not a multiple of the cache's {num_kv} kv heads")
  return q.reshape(b, num_kv, n // num_kv, h).astype(jnp.float32).mean(axis=2)


def cosine_scores(qs, keys):
  """qs [B, K, H], keys [B, S, K, H] -> [B, K, S] cosine similarity."""
  keys = keys.astype(jnp.float32)
  # Scores come out in the cache's own [B, S, K] order: on CPU this reads the keys in one
  # streaming pass, where a [B, K, S] result makes XLA transpose the cache first.
  dots = jnp.einsum("BKH,BSKH->BSK", qs, keys)
  k_norm = jnp.sqrt(jnp.sum(keys * keys, axis=-1))
  q_norm = jnp.linalg.norm(qs, axis=-1)[:, None, :]
  return (dots / (jnp.maximum(q_norm, _EPS) * jnp.maximum(k_norm, _EPS))).transpose(0, 2, 1)


@functools.partial(jax.jit, static_argnames=("block_size",))
def block_summaries(keys, valid, length, block_size):
  """Block key sums and candidate counts from scratch.

  Returns:
    sums [B, C, K, H] float32 (the block-mean key is sums / counts; cosine needs only sums),
    counts [B, C] int32.
  """
  if block_size <= 0:
    raise ValueError(f"block_size must be positive; got {block_size}")
  b, s, kv, h = keys.shape
  c = candidates(valid, length)
  nb = -(-s // block_size)
  pad = nb * block_size - s
  k = jnp.where(c[:, :, None, None], keys.astype(jnp.float32), 0.0)
  k = jnp.pad(k, ((0, 0), (0, pad), (0, 0), (0, 0))).reshape(b, nb, block_size, kv, h)
  counts = jnp.pad(c, ((0, 0), (0, pad))).reshape(b, nb, block_size).sum(-1)
  return k.sum(axis=2), counts.astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("block_size",))
def update_block_summaries(sums, counts, new_k, pos, new_valid=None, *, block_size):
  """Add the key just written at cache slot `pos` to its block summary.

  Args:
    sums: [B, C, K, H]; counts: [B, C] (from `block_summaries` or earlier updates).
    new_k: [B, K, H] the new key (after rotary, as stored in the cache).
    pos: int32 scalar or [B], the cache slot it was written to.
    new_valid: [B] bool, False for rows whose new token is padding; None = all real.
  """
  b = sums.shape[0]
  if new_k.shape != (b,) + sums.shape[2:]:
    raise ValueError(f"new_k must be [B, K, H] = {(b,) + sums.shape[2:]}; got {new_k.shape}")
  blk = _lengths(pos, b) // block_size
  ok = jnp.ones((b,), bool) if new_valid is None else jnp.asarray(new_valid, bool)
  rows = jnp.arange(b)
  sums = sums.at[rows, blk].add(jnp.where(ok[:, None, None], new_k.astype(sums.dtype), 0.0))
  counts = counts.at[rows, blk].add(ok.astype(counts.dtype))
  return sums, counts


def _top_similar(scores, remaining, num_similar):
  """Per row of [B, K, S] scores: the num_similar best remaining slots (lowest index on ties)."""
  s = scores.shape[-1]
  kk = min(num_similar, s)
  masked = jnp.where(remaining, scores, -jnp.inf)
  _, idx = jax.lax.top_k(masked, kk)
  ok = jnp.take_along_axis(remaining, idx, axis=-1)
  pad = num_similar - kk
  idx = jnp.pad(idx, ((0, 0), (0, 0), (0, pad)))
  ok = jnp.pad(ok, ((0, 0), (0, 0), (0, pad)))
  return jnp.where(ok, idx, 0).astype(jnp.int32), ok


POOL_KEYS = 1024  # block mode ranks the tokens of at least this many slots' worth of blocks


def candidate_blocks(num_similar, block_size, num_blocks=0):
  """n_b: how many blocks block mode ranks tokens in (before capping at the C blocks).

  num_blocks > 0 is used as given; 0 = max(ceil(num_similar / block_size) + 1,
  ceil(POOL_KEYS / block_size)) (16 blocks, 1024 keys, at the defaults 20 and 64).
  """
  if num_blocks < 0:
    raise ValueError(f"num_blocks must be >= 0; got {num_blocks}")
  return num_blocks or max(-(-num_similar // block_size) + 1, -(-POOL_KEYS // block_size))


def _block_similar(qs, keys, sums, counts, positional, num_similar, block_size, num_blocks):
  """Similar part in block mode (module docstring): the num_similar remaining tokens with the
  best own cosine inside the n_b blocks of best block-mean cosine, [B, K, num_similar]."""
  remaining = positional.remaining
  b, s = remaining.shape
  nb = sums.shape[1]
  if nb != -(-s // block_size) or positional.block_remaining.shape != (b, nb):
    raise ValueError(f"block summaries have {nb} blocks and positional.block_remaining "
                     f"{positional.block_remaining.shape}; a cache of {s} slots in blocks of "
                     f"{block_size} needs {-(-s // block_size)}")
  kv = qs.shape[1]
  block_ok = jnp.broadcast_to((positional.block_remaining & (counts > 0))[:, None, :],
                              (b, kv, nb))  # [B, K, C]
  block_scores = cosine_scores(qs, sums)  # [B, K, C]
  nsel = min(nb, candidate_blocks(num_similar, block_size, num_blocks))
  _, blk = jax.lax.top_k(jnp.where(block_ok, block_scores, -jnp.inf), nsel)
  # In position order, so the token ranking below breaks ties to the lower cache index.
  blk = jnp.sort(blk, axis=-1)
  blk_ok = jnp.take_along_axis(block_ok, blk, axis=-1)  # [B, K, nsel]
  pos = (blk[..., None] * block_size + jnp.arange(block_size)).reshape(b, kv, -1)  # [B, K, M]
  safe = jnp.minimum(pos, s - 1)
  tok_ok = (jnp.repeat(blk_ok, block_size, axis=-1) & (pos < s)
            & jnp.take_along_axis(remaining[:, None, :], safe, axis=-1))
  # Only the candidate blocks' M = nsel * block_size keys are read: the step stays
  # O(C + M), with M fixed.
  rows = jnp.arange(b)[:, None, None]
  groups = jnp.arange(kv)[None, None, :]
  cand_k = keys[rows, safe.transpose(0, 2, 1), groups]  # [B, M, K, H]
  local, ok = _top_similar(cosine_scores(qs, cand_k), tok_ok, num_similar)
  idx = jnp.take_along_axis(pos, local, axis=-1)
  return jnp.where(ok, idx, 0).astype(jnp.int32), ok


@functools.partial(jax.jit, static_argnames=("num_sink", "num_recent", "num_similar",
                                             "block_size", "num_blocks"))
def select_sparse_kv(q, keys, valid, length, *, num_sink=4, num_recent=64, num_similar=20,
                     block_size=0, block_sums=None, block_counts=None, positional=None,
                     num_blocks=0):
  """I_t for one decoding step, per kv head group.

  Args:
    q: [B, N, H] the current query (after rotary).
    keys: [B, S, K, H] the whole key cache (after rotary).
    valid: [B, S] bool, real (non-padding) cache slots.
    length: int32 scalar or [B], cache slots written so far (slots < length).
    num_sink, num_recent, num_similar: the budget, I = their sum.
    block_size: 0 = per-token cosine over all remaining keys (token mode); > 0 = per-token
      cosine over the remaining keys of the best blocks by block-mean key (block mode).
    block_sums, block_counts: maintained summaries for block mode ([B, C, K, H], [B, C]);
      None = computed here from `keys` (an O(S) pass, for tests and one-off calls).
    positional: `positional_selection(valid, length, ...)` with the same budgets and
      block_size, computed once per step and shared by all layers; None = computed here.
    num_blocks: block mode's n_b (`candidate_blocks`); 0 = the default rule.

  Returns:
    idx [B, K, I] int32 cache slots, laid out [sink | recent | similar];
    idx_valid [B, K, I] bool.
  """
  if q.ndim != 3 or keys.ndim != 4:
    raise ValueError(f"q must be [B, N, H] and keys [B, S, K, H]; got {q.shape}, {keys.shape}")
  b, s, kv, h = keys.shape
  if q.shape[0] != b or q.shape[2] != h:
    raise ValueError(f"q {q.shape} does not match keys {keys.shape} in batch or head dim")
  if valid.shape != (b, s):
    raise ValueError(f"valid must be [B, S] = {(b, s)}; got {valid.shape}")
  if min(num_sink, num_recent, num_similar) < 0:
    raise ValueError(f"budgets must be >= 0; got sink {num_sink}, recent {num_recent}, "
                     f"similar {num_similar}")
  if positional is None:
    positional = positional_selection(valid, length, num_sink=num_sink, num_recent=num_recent,
                                      block_size=block_size)
  sink_idx, sink_ok, recent_idx, recent_ok, remaining, block_remaining = positional
  if (sink_idx.shape != (b, num_sink) or recent_idx.shape != (b, num_recent)
      or remaining.shape != (b, s)):
    raise ValueError(
        f"positional has sink {sink_idx.shape}, recent {recent_idx.shape}, remaining "
        f"{remaining.shape}; expected {(b, num_sink)}, {(b, num_recent)}, {(b, s)}")
  if block_size > 0 and num_similar > 0 and block_remaining is None:
    raise ValueError(f"positional was computed without block_size; block mode needs "
                     f"positional_selection(..., block_size={block_size})")
  qs = query_summary(q, kv)
  if num_similar == 0:
    sim_idx = jnp.zeros((b, kv, 0), jnp.int32)
    sim_ok = jnp.zeros((b, kv, 0), bool)
  elif block_size > 0:
    if block_sums is None:
      block_sums, block_counts = block_summaries(keys, valid, length, block_size)
    sim_idx, sim_ok = _block_similar(qs, keys, block_sums, block_counts, positional,
                                     num_similar, block_size, num_blocks)
  else:
    rem = jnp.broadcast_to(remaining[:, None, :], (b, kv, s))
    sim_idx, sim_ok = _top_similar(cosine_scores(qs, keys), rem, num_similar)

  def per_group(x):
    return jnp.broadcast_to(x[:, None, :], (b, kv, x.shape[-1]))

  idx = jnp.concatenate([per_group(sink_idx), per_group(recent_idx), sim_idx], axis=-1)
  ok = jnp.concatenate([per_group(sink_ok), per_group(recent_ok), sim_ok], axis=-1)
  return idx.astype(jnp.int32), ok


@jax.jit
def gather_kv(cache_k, cache_v, idx, layer=None):
  """The selected keys and values of each kv head group.

  Args:
    cache_k, cache_v: [B, S, K, H], or the stacked [L, B, S, K, H] cache with `layer` given.
    idx: [B, K, I] cache slots per group (from `select_sparse_kv`).
    layer: int32 scalar layer index into a stacked cache. Gathering straight from the stacked
      cache reads only the I selected rows; slicing the layer out first can make XLA copy the
      whole [B, S, K, H] layer (O(S) per step) inside a scan over layers.

  Returns:
    k_sel, v_sel [B, I, K, H] with k_sel[b, i, g] = cache_k[(layer,) b, idx[b, g, i], g].
  """
  rank = 4 if layer is None else 5
  if cache_k.shape != cache_v.shape or cache_k.ndim != rank:
    raise ValueError(f"cache_k and cache_v must both be {'[L, ' if layer is not None else '['}"
                     f"B, S, K, H]; got {cache_k.shape}, {cache_v.shape}")
  b, _, kv, _ = cache_k.shape[-4:]
  if idx.ndim != 3 or idx.shape[:2] != (b, kv):
    raise ValueError(f"idx must be [B, K, I] with B={b}, K={kv}; got {idx.shape}")
  rows = jnp.arange(b)[:, None, None]  # [B, 1, 1]
  groups = jnp.arange(kv)[None, None, :]  # [1, 1, K]
  slots = idx.transpose(0, 2, 1)  # [B, I, K]
  if layer is None:
    return cache_k[rows, slots, groups], cache_v[rows, slots, groups]
  return cache_k[layer, rows, slots, groups], cache_v[layer, rows, slots, groups]
