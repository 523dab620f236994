"""Reliability routing of HieraSlot memories (docs/method.md §3) and reliability calibration.

Shapes: B batch, T query length, M slots, R router width, F slot features, V visual width,
N calibration samples.

The router score of slot p at query position t is

  s_p(t) = q_t . k_p + w_v . v_t + phi(f_p) + beta * logit(c_p) + b_g,

with q_t / k_p already projected into the router space by the caller (`models.router`). The
visual term w_v . v_t is one number per (b, t): it does not reorder slots, it moves every gate of
the sample towards or away from the threshold epsilon, i.e. it decides how much memory an image
context admits. The gate is g_p = sigmoid(s_p); the active set A_t holds, separately for entity
and relation slots, the highest-scoring valid slots with g_p >= epsilon (at most `entity_k` and
`relation_k`). Ties are broken towards the lower slot index so that routing is a deterministic
function of the scores on every backend. The decoder adds log g_p to the attention logits of the
active slots (the reliability bias).

Calibration maps a raw reliability logit z to sigmoid(z / T) (temperature) or sigmoid(a z + b)
(Platt); both are fitted by Newton's method on the binary cross-entropy against 0/1 labels of
validation data, with a mask so the fit runs on padded arrays under jit.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

_CLIP = 1e-6


def safe_logit(c: jax.Array) -> jax.Array:
  """logit(c) with c clipped to [1e-6, 1 - 1e-6] so certain triples (c = 1) stay finite."""
  c = jnp.clip(c, _CLIP, 1.0 - _CLIP)
  return jnp.log(c) - jnp.log1p(-c)


def router_scores(q: jax.Array, k: jax.Array, visual_term: jax.Array, feature_term: jax.Array,
                  reliability: jax.Array, beta: float, bias: float) -> jax.Array:
  """s_p(t) for every query position and slot.

  Args:
    q: [B, T, R] projected query summaries q_t (already scaled as the caller wants).
    k: [B, M, R] projected slot keys k_p.
    visual_term: [B, T] w_v . v_t.
    feature_term: [B, M] or [B, T, M] phi(f_p) (per-position when features depend on t).
    reliability: [B, M] calibrated reliabilities c_p in [0, 1].
    beta, bias: the reliability weight and the global bias b_g.
  Returns:
    [B, T, M] scores.
  """
  if feature_term.ndim == 2:
    feature_term = feature_term[:, None, :]
  qk = jnp.einsum("BTR,BMR->BTM", q, k)
  return (qk + visual_term[:, :, None] + feature_term
          + beta * safe_logit(reliability)[:, None, :] + bias)


def _rank(scores: jax.Array, eligible: jax.Array) -> jax.Array:
  """Rank of each slot among the eligible slots of its row (0 = best), ties to lower index.

  scores, eligible: [..., M]. Ineligible slots get rank M.
  """
  m = scores.shape[-1]
  s_p = scores[..., :, None]
  s_q = scores[..., None, :]
  idx = jnp.arange(m)
  lower = idx[None, :] < idx[:, None]  # [p, q]: q has a lower index than p
  beats = eligible[..., None, :] & ((s_q > s_p) | ((s_q == s_p) & lower))
  rank = jnp.sum(beats, axis=-1)
  return jnp.where(eligible, rank, m)


class Routing(NamedTuple):
  active: jax.Array  # [B, T, M] bool, the active set A_t
  bias: jax.Array  # [B, T, M] log g_p (the reliability bias added to attention logits)
  gates: jax.Array  # [B, T, M] g_p
  scores: jax.Array  # [B, T, M] s_p(t)


def select_active(scores: jax.Array, valid: jax.Array, is_entity: jax.Array, entity_k: int,
                  relation_k: int, epsilon: float) -> Routing:
  """Active set from router scores: per-type top-k among valid slots whose gate passes epsilon.

  Args:
    scores: [B, T, M] router scores.
    valid: [B, M] bool, slot-bank padding mask.
    is_entity: [B, M] or [M] bool, True for entity slots, False for relation slots.
    entity_k, relation_k: how many entity / relation slots may be active (static).
    epsilon: gate threshold.
  """
  if entity_k < 0 or relation_k < 0:
    raise ValueError(f"entity_k={entity_k} and relation_k={relation_k} must be >= 0")
  is_entity = jnp.broadcast_to(is_entity, valid.shape)[:, None, :]
  gates = jax.nn.sigmoid(scores)
  eligible = valid[:, None, :] & (gates >= epsilon)
  ent_rank = _rank(scores, eligible & is_entity)
  rel_rank = _rank(scores, eligible & ~is_entity)
  active = (is_entity & (ent_rank < entity_k)) | (~is_entity & (rel_rank < relation_k))
  active = active & eligible
  return Routing(active=active, bias=jax.nn.log_sigmoid(scores), gates=gates, scores=scores)


def route(q, k, visual_term, feature_term, reliability, valid, is_entity, *, beta: float,
          bias: float, entity_k: int, relation_k: int, epsilon: float) -> Routing:
  """router_scores followed by select_active (see both)."""
  scores = router_scores(q, k, visual_term, feature_term, reliability, beta, bias)
  return select_active(scores, valid, is_entity, entity_k, relation_k, epsilon)


# ---------------------------------------------------------------- context: mentions in the output
# A slot's name (its key text: the subject of an entity slot, the relation of a relation slot) is
# tokenised as it would appear inside generated text and stored right-aligned in W places with
# -1 padding on the left: key_tokens [B, M, W]. The slot is "mentioned" at position t once the
# output (generated tokens only, never the prompt) up to and including token t contains that
# token sequence contiguously; the flag then stays on. Names longer than W tokens are matched on
# their last W tokens.


def key_matches(windows: jax.Array, key_tokens: jax.Array) -> jax.Array:
  """Does each window end with each slot's name? windows [B, T, W] (the last W output tokens at
  every position, -1 where there are fewer), key_tokens [B, M, W] -> [B, T, M] bool. A slot
  without a name (all -1) never matches."""
  hit = (key_tokens[:, None] < 0) | (key_tokens[:, None] == windows[:, :, None])
  return jnp.all(hit, axis=-1) & jnp.any(key_tokens >= 0, axis=-1)[:, None, :]


def output_mentions(tokens: jax.Array, output_mask: jax.Array,
                    key_tokens: jax.Array) -> jax.Array:
  """Teacher-forced mention flags: tokens [B, T], output_mask [B, T] (True on generated tokens:
  answer tokens and the EOS), key_tokens [B, M, W] -> [B, T, M] bool."""
  w = key_tokens.shape[-1]
  t = tokens.shape[1]
  out = jnp.where(output_mask, tokens, -1)
  padded = jnp.concatenate([jnp.full((tokens.shape[0], w - 1), -1, out.dtype), out], axis=1)
  idx = jnp.arange(t)[:, None] + jnp.arange(w)[None, :]  # [T, W] windows ending at t
  windows = padded[:, idx]  # [B, T, W]
  hits = key_matches(windows, key_tokens) & output_mask[:, :, None]
  return jnp.cumsum(hits, axis=1) > 0


def mention_step(window: jax.Array, mentioned: jax.Array, token: jax.Array,
                 key_tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
  """One decoding step of `output_mentions`: window [B, W] (last W generated tokens, -1 before
  the first), mentioned [B, M] bool, token [B] just generated -> updated (window, mentioned)."""
  window = jnp.concatenate([window[:, 1:], token[:, None].astype(window.dtype)], axis=1)
  return window, mentioned | key_matches(window[:, None], key_tokens)[:, 0]


# ---------------------------------------------------------------- calibration of reliabilities

def apply_temperature(logits: jax.Array, temperature: jax.Array) -> jax.Array:
  return jax.nn.sigmoid(logits / temperature)


def apply_platt(logits: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
  return jax.nn.sigmoid(a * logits + b)


def _bce(z, y, w):
  return jnp.sum(w * (jax.nn.softplus(z) - y * z)) / jnp.maximum(jnp.sum(w), 1.0)


def _fit_inputs(logits, labels, mask):
  """float32 (logits, labels, weights) with masked-out entries set to 0: selected away before
  any arithmetic, since a weight of 0 times a NaN there is still NaN (in the loss and in its
  gradient)."""
  w = jnp.ones(logits.shape, jnp.float32) if mask is None else mask.astype(jnp.float32)
  keep = w > 0
  return (jnp.where(keep, logits.astype(jnp.float32), 0.0),
          jnp.where(keep, labels.astype(jnp.float32), 0.0), w)


def _newton(loss, x0, steps):
  """Damped Newton iterations on a tiny convex problem (1 or 2 parameters)."""
  grad = jax.grad(loss)
  hess = jax.hessian(loss)

  def step(_, x):
    g = grad(x)
    h = hess(x) + 1e-6 * jnp.eye(x.shape[0], dtype=x.dtype)
    delta = jnp.linalg.solve(h, g)
    # Backtracking halves the step until the loss does not increase: keeps Newton stable when
    # labels are separable and the optimum runs off to infinity.
    def shrink(carry):
      t, _ = carry
      return t * 0.5, loss(x - t * 0.5 * delta)
    t, _ = jax.lax.while_loop(
        lambda c: (c[1] > loss(x)) & (c[0] > 1e-4), shrink, (1.0, loss(x - delta)))
    return x - t * delta

  return jax.lax.fori_loop(0, steps, step, x0)


@jax.jit
def fit_temperature(logits: jax.Array, labels: jax.Array,
                    mask: jax.Array | None = None) -> jax.Array:
  """Temperature T > 0 minimising the BCE of sigmoid(logits / T) against labels.

  logits, labels, mask: [N]. Fitted in log(1/T) so T stays positive.
  """
  logits, labels, w = _fit_inputs(logits, labels, mask)
  loss = lambda x: _bce(logits * jnp.exp(x[0]), labels, w)
  x = _newton(loss, jnp.zeros((1,), jnp.float32), 50)
  return jnp.exp(-x[0])


@jax.jit
def fit_platt(logits: jax.Array, labels: jax.Array,
              mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Platt scaling (a, b) minimising the BCE of sigmoid(a * logits + b) against labels; [N]."""
  logits, labels, w = _fit_inputs(logits, labels, mask)
  loss = lambda x: _bce(x[0] * logits + x[1], labels, w)
  x = _newton(loss, jnp.array([1.0, 0.0], jnp.float32), 50)
  return x[0], x[1]
