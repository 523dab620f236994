"""GraphLoom's training objective (docs/method.md §6).

Shapes: B batch, T sequence length, V vocabulary, M slots, L_m memory layers, N heads.

  L = w_gen L_gen + w_cal L_cal + w_cf L_cf + w_align L_align     (1.0 / 0.5 / 0.3 / 0.2)
      + w_opt L_opt + w_ev L_ev                                     (0.0: off by default)

- L_gen: label-smoothed NLL of the gold answer tokens: (1 - eps) * (-log p(y)) + eps * mean over
  the vocabulary of -log p(v), averaged over the answer tokens of the batch.
- Slot utility u_p (the target of L_cal and L_cf) is gold-support membership of the slot's triple
  (see models/slots.py). We chose it over the drop in gold log-likelihood when the slot is
  removed because the latter needs one extra decoder pass per slot and, with a frozen backbone
  that has never seen slots, is mostly noise early in training; membership is exact wherever the
  data names its supporting facts, which both the embedded benchmark and MMQA do.
- L_cal: binary cross-entropy between the gate g_p(t) = sigmoid(s_p(t)) and u_p, over valid slots
  and answer steps: the gate is read as the probability that the slot is useful.
- L_cf: contrastive slot utility, per answer step a softmax over the valid slots' scores and
  -log of the probability mass on the useful ones (rows without a useful slot are skipped): useful
  slots must outrank the others, which is what the top-k selection needs.
- L_align: per answer step, p_attn = the decoder's attention mass on the active slots averaged
  over memory layers and heads and renormalised over the active set (stop-gradient), p_route =
  softmax of the router scores over the same set; KL(p_attn || p_route) averaged over the answer
  steps that have at least one active slot.
- L_opt (multiple-choice data only): the options compete. Each option's score is its
  length-normalised log-likelihood with the memory (what answering and S_ans rank options by);
  L_opt = -log softmax_j(score_j)[gold], averaged over questions. L_gen rewards any rise of the
  gold answer's likelihood, including one every option shares (a prior on answer format);
  L_opt only rewards what separates the gold option from the others.
- L_ev (GraphLoom's heads only): the evidence must explain the answer. With a_b = the mean
  log-likelihood of question b's gold answer tokens given its own memory and a'_b = the same
  given the memory built from another question's subgraph (the previous row of the batch),
  L_ev = mean_b softplus(a'_b - a_b) = -log sigmoid(a_b - a'_b). L_gen can be lowered by a
  prior that ignores the evidence; L_ev is unchanged by anything both memories share and only
  rewards what this question's subgraph adds.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

_NEG = -1e30


def _masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  mask = mask.astype(x.dtype)
  return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def generation_loss(logits: jax.Array, targets: jax.Array, mask: jax.Array,
                    smoothing: float) -> jax.Array:
  """logits [B, T, V] predicting targets [B, T] (int), mask [B, T] answer tokens -> scalar."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  uniform = -jnp.mean(logp, axis=-1)
  return _masked_mean((1.0 - smoothing) * nll + smoothing * uniform, mask)


def calibration_loss(scores: jax.Array, utility: jax.Array, valid: jax.Array,
                     step_mask: jax.Array) -> jax.Array:
  """scores [B, T, M], utility [B, M] in {0, 1}, valid [B, M], step_mask [B, T] -> scalar."""
  u = utility[:, None, :].astype(jnp.float32)
  bce = jax.nn.softplus(scores) - u * scores
  mask = valid[:, None, :] & step_mask[:, :, None]
  return _masked_mean(bce, mask)


def contrastive_loss(scores: jax.Array, utility: jax.Array, valid: jax.Array,
                     step_mask: jax.Array) -> jax.Array:
  """Same shapes as calibration_loss."""
  useful = valid & (utility > 0.5)
  all_lse = jax.nn.logsumexp(jnp.where(valid[:, None, :], scores, _NEG), axis=-1)
  pos_lse = jax.nn.logsumexp(jnp.where(useful[:, None, :], scores, _NEG), axis=-1)
  rows = step_mask & jnp.any(useful, axis=-1)[:, None]
  return _masked_mean(jnp.where(rows, all_lse - pos_lse, 0.0), rows)


def alignment_loss(scores: jax.Array, active: jax.Array, attention_mass: jax.Array,
                   step_mask: jax.Array) -> jax.Array:
  """scores, active [B, T, M]; attention_mass [L_m, B, T, N, M]; step_mask [B, T] -> scalar."""
  attn = jax.lax.stop_gradient(jnp.mean(attention_mass.astype(jnp.float32), axis=(0, 3)))
  attn = jnp.where(active, attn, 0.0)
  attn = attn / jnp.maximum(jnp.sum(attn, axis=-1, keepdims=True), 1e-30)
  log_route = jax.nn.log_softmax(jnp.where(active, scores, _NEG), axis=-1)
  log_attn = jnp.log(jnp.where(attn > 0, attn, 1.0))
  kl = jnp.sum(jnp.where(active & (attn > 0), attn * (log_attn - log_route), 0.0), axis=-1)
  rows = step_mask & jnp.any(active, axis=-1)
  return _masked_mean(kl, rows)


def option_loss(option_scores: jax.Array, answer_index: jax.Array) -> jax.Array:
  """option_scores [B, J] (length-normalised option log-likelihoods), answer_index [B] (int)
  -> scalar: mean over questions of -log softmax over the options, at the gold option."""
  logp = jax.nn.log_softmax(option_scores.astype(jnp.float32), axis=-1)
  return -jnp.mean(jnp.take_along_axis(logp, answer_index[:, None].astype(jnp.int32),
                                       axis=-1)[:, 0])


def answer_logprob(logits: jax.Array, targets: jax.Array, mask: jax.Array) -> jax.Array:
  """logits [B, T, V] predicting targets [B, T] (int), mask [B, T] answer tokens -> [B]: each
  row's mean log-probability of its answer tokens (0 for a row without any)."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  tok = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  m = mask.astype(jnp.float32)
  return jnp.sum(tok * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)


def evidence_loss(own: jax.Array, other: jax.Array) -> jax.Array:
  """own, other [B]: the gold answer's mean log-likelihood with the question's own memory and
  with another question's -> scalar mean of softplus(other - own)."""
  return jnp.mean(jax.nn.softplus(other.astype(jnp.float32) - own.astype(jnp.float32)))


# the terms, as config.train.loss_weights names them
NAMES = ("gen", "cal", "cf", "align", "opt", "ev")


class Losses(NamedTuple):
  total: jax.Array
  gen: jax.Array
  cal: jax.Array
  cf: jax.Array
  align: jax.Array
  opt: jax.Array
  ev: jax.Array


def total_loss(weights, gen, cal, cf, align, opt=0.0, ev=0.0) -> Losses:
  """Weighted sum; `weights` has fields or keys gen, cal, cf, align, opt, ev
  (config.train.loss_weights)."""
  terms = dict(gen=gen, cal=cal, cf=cf, align=align, opt=opt, ev=ev)
  total = sum(float(weights[k]) * terms[k] for k in NAMES)
  return Losses(total, *(jnp.asarray(terms[k], jnp.float32) for k in NAMES))
