"""GRAIL steering ops against a PyTorch re-implementation (values and gradients) and closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from graphloom_jax.ops import steering

TOL = 1e-5


# ---------------------------------------------------------------- PyTorch reference


def t_context_vector(q, ev, mask, tau):
  logits = torch.einsum("bd,bed->be", q, ev) / tau
  logits = logits.masked_fill(~mask, float("-inf"))
  a = torch.softmax(logits, dim=-1)
  a = torch.nan_to_num(a, nan=0.0)  # all-masked rows: softmax of all -inf
  return torch.einsum("be,bed->bd", a, ev)


def t_gate(w, b, q, h):
  return torch.sigmoid(torch.cat([q, h], -1) @ w + b)


def t_subtract(q, h, g):
  nrm2 = (h * h).sum(-1)
  coef = torch.where(nrm2 > 1e-12, (q * h).sum(-1) / nrm2.clamp_min(1e-12), torch.zeros_like(nrm2))
  if g.dim() == 1:
    g = g[:, None]
  return q - g * coef[:, None] * h


def t_info_nce(qs, ps, hn, hmask, temp, ids, emask):
  qs = torch.nn.functional.normalize(qs, dim=-1)
  ps = torch.nn.functional.normalize(ps, dim=-1)
  hn = torch.nn.functional.normalize(hn, dim=-1)
  losses = []
  for i in range(qs.shape[0]):
    if not emask[i]:
      continue
    cands = [ps[i]]
    for j in range(qs.shape[0]):
      if j != i and emask[j] and ids[j] != ids[i]:
        cands.append(ps[j])
    for n in range(hn.shape[1]):
      if hmask[i, n]:
        cands.append(hn[i, n])
    logits = torch.stack(cands) @ qs[i] / temp
    losses.append(-torch.log_softmax(logits, 0)[0])
  return torch.stack(losses).mean()


def _t(x, grad=False):
  return torch.tensor(np.asarray(x), dtype=torch.float32, requires_grad=grad)


def _inputs(rng, b=5, e=4, d=16):
  q = rng.standard_normal((b, d)).astype(np.float32)
  q /= np.linalg.norm(q, axis=-1, keepdims=True)
  ev = rng.standard_normal((b, e, d)).astype(np.float32)
  ev /= np.linalg.norm(ev, axis=-1, keepdims=True)
  mask = rng.random((b, e)) < 0.7
  mask[0] = False  # an empty evidence set
  mask[1] = True
  return q, ev, mask


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("tau", [0.1, 1.0])
def test_context_vector_matches_torch_with_grads(tau, rng):
  q, ev, mask = _inputs(rng)
  r = rng.standard_normal(q.shape).astype(np.float32)

  def f(q, ev):
    return jnp.sum(steering.context_vector(q, ev, mask, tau) * r)

  h = steering.context_vector(q, ev, mask, tau)
  gq, gev = jax.grad(f, argnums=(0, 1))(q, ev)

  tq, tev = _t(q, True), _t(ev, True)
  th = t_context_vector(tq, tev, torch.tensor(mask), tau)
  (th * _t(r)).sum().backward()
  np.testing.assert_allclose(h, th.detach().numpy(), atol=TOL)
  np.testing.assert_allclose(gq, tq.grad.numpy(), atol=TOL)
  np.testing.assert_allclose(gev, tev.grad.numpy(), atol=TOL)
  np.testing.assert_array_equal(np.asarray(h)[0], 0.0)


@pytest.mark.parametrize("kind", ["scalar", "vector"])
def test_gate_and_subtraction_match_torch_with_grads(kind, rng):
  q, ev, mask = _inputs(rng, d=12)
  d = q.shape[-1]
  params = steering.init_gate(jax.random.key(int(rng.integers(1 << 30))), d, kind, scale=0.5)
  params["b"] = params["b"] + jnp.asarray(rng.standard_normal(params["b"].shape), jnp.float32)
  r = rng.standard_normal(q.shape).astype(np.float32)
  tau = 0.2

  def f(params, q, ev):
    h = steering.context_vector(q, ev, mask, tau)
    g = steering.gap_gate(params, q, h)
    return jnp.sum(steering.subtractive_steer(q, h, g) * r), g

  (val, g), grads = jax.value_and_grad(f, argnums=(0, 1, 2), has_aux=True)(params, q, ev)

  tw, tb = _t(params["w"], True), _t(params["b"], True)
  tq, tev = _t(q, True), _t(ev, True)
  th = t_context_vector(tq, tev, torch.tensor(mask), tau)
  tg = t_gate(tw, tb, tq, th)
  tval = (t_subtract(tq, th, tg) * _t(r)).sum()
  tval.backward()
  np.testing.assert_allclose(g, tg.detach().numpy(), atol=TOL)
  np.testing.assert_allclose(val, tval.item(), atol=TOL)
  np.testing.assert_allclose(grads[0]["w"], tw.grad.numpy(), atol=TOL)
  np.testing.assert_allclose(grads[0]["b"], tb.grad.numpy(), atol=TOL)
  np.testing.assert_allclose(grads[1], tq.grad.numpy(), atol=TOL)
  np.testing.assert_allclose(grads[2], tev.grad.numpy(), atol=TOL)
  assert g.shape == ((q.shape[0],) if kind == "scalar" else q.shape)


def test_info_nce_matches_torch_with_grads(rng):
  b, n, d = 6, 3, 10
  qs = rng.standard_normal((b, d)).astype(np.float32)
  ps = rng.standard_normal((b, d)).astype(np.float32)
  hn = rng.standard_normal((b, n, d)).astype(np.float32)
  hmask = rng.random((b, n)) < 0.6
  hmask[0] = False
  ids = np.array([0, 1, 1, 2, 3, 4])  # examples 1 and 2 share their positive
  emask = np.array([True, True, True, True, True, False])  # one padded example
  temp = 0.07

  def f(qs, ps, hn):
    return steering.info_nce(qs, ps, hn, hmask, temp, ids, emask)

  loss, grads = jax.value_and_grad(f, argnums=(0, 1, 2))(qs, ps, hn)
  tq, tp, th = _t(qs, True), _t(ps, True), _t(hn, True)
  tloss = t_info_nce(tq, tp, th, hmask, temp, ids, emask)
  tloss.backward()
  np.testing.assert_allclose(loss, tloss.item(), atol=TOL, rtol=TOL)
  np.testing.assert_allclose(grads[0], tq.grad.numpy(), atol=TOL)
  np.testing.assert_allclose(grads[1], tp.grad.numpy(), atol=TOL)
  np.testing.assert_allclose(grads[2], th.grad.numpy(), atol=TOL)
  # The padded example contributes nothing, in either role.
  np.testing.assert_array_equal(grads[0][-1], 0.0)
  np.testing.assert_array_equal(grads[1][-1], 0.0)


def test_info_nce_end_to_end_gradient_through_steering_matches_torch(rng):
  q, ev, mask = _inputs(rng, b=6, e=3, d=8)
  pos = rng.standard_normal(q.shape).astype(np.float32)
  hn = ev  # already-covered evidence as the hard negatives
  params = steering.init_gate(jax.random.key(int(rng.integers(1 << 30))), q.shape[-1], "scalar",
                              scale=0.7)
  tau, temp = 0.1, 0.05

  def f(params):
    h = steering.context_vector(q, ev, mask, tau)
    qg = steering.subtractive_steer(q, h, steering.gap_gate(params, q, h))
    return steering.info_nce(qg, pos, hn, mask, temp)

  loss, grads = jax.value_and_grad(f)(params)
  tw, tb = _t(params["w"], True), _t(params["b"], True)
  tq, tev = _t(q), _t(ev)
  th = t_context_vector(tq, tev, torch.tensor(mask), tau)
  tqg = t_subtract(tq, th, t_gate(tw, tb, tq, th))
  tloss = t_info_nce(tqg, _t(pos), tev, mask, temp, np.arange(6), np.ones(6, bool))
  tloss.backward()
  np.testing.assert_allclose(loss, tloss.item(), atol=TOL, rtol=TOL)
  np.testing.assert_allclose(grads["w"], tw.grad.numpy(), atol=TOL)
  np.testing.assert_allclose(grads["b"], tb.grad.numpy(), atol=TOL)


# ---------------------------------------------------------------- closed forms


def test_full_gate_makes_q_gap_orthogonal_to_context(rng):
  q, ev, mask = _inputs(rng, b=8, e=5, d=32)
  mask[0] = True
  h = steering.context_vector(q, ev, mask, 0.3)
  q_gap = steering.subtractive_steer(q, h, jnp.ones((q.shape[0],)))
  # float32 round-off scales with the vectors' norms: check the cosine, not the raw dot
  cosine = jnp.sum(q_gap * h, -1) / (jnp.linalg.norm(q_gap, axis=-1) * jnp.linalg.norm(h, axis=-1))
  np.testing.assert_allclose(cosine, 0.0, atol=1e-5)
  # Hand-computed: q minus its projection onto h.
  hh = np.asarray(h, np.float64)
  proj = (np.sum(q * hh, -1) / np.sum(hh * hh, -1))[:, None] * hh
  np.testing.assert_allclose(q_gap, q - proj, atol=1e-5)


def test_zero_gate_or_empty_evidence_leaves_query_unchanged(rng):
  q, ev, mask = _inputs(rng)
  h = steering.context_vector(q, ev, mask, 0.1)
  np.testing.assert_array_equal(steering.subtractive_steer(q, h, jnp.zeros((q.shape[0],))), q)
  empty = np.zeros_like(mask)
  h0 = steering.context_vector(q, ev, empty, 0.1)
  np.testing.assert_array_equal(h0, 0.0)
  np.testing.assert_array_equal(steering.subtractive_steer(q, h0, jnp.ones((q.shape[0],))), q)
  np.testing.assert_array_equal(steering.additive_steer(q, h0), q)


def test_empty_evidence_and_zero_context_have_finite_gradients(rng):
  q, ev, _ = _inputs(rng)
  empty = np.zeros(ev.shape[:2], bool)
  params = steering.init_gate(jax.random.key(0), q.shape[-1])

  def f(params, q, ev):
    h = steering.context_vector(q, ev, empty, 0.1)
    qg = steering.subtractive_steer(q, h, steering.gap_gate(params, q, h))
    return steering.info_nce(qg, ev[:, 0], ev, empty)

  grads = jax.grad(f, argnums=(0, 1, 2))(params, q, ev)
  for leaf in jax.tree.leaves(grads):
    assert np.all(np.isfinite(np.asarray(leaf)))
  # With no context, q_gap = q exactly, so the gate gets no gradient.
  np.testing.assert_array_equal(grads[0]["w"], 0.0)
  zero = jnp.zeros((1, 4))
  assert np.all(np.isfinite(np.asarray(steering.l2_normalize(zero))))


def test_context_vector_hand_computed_and_low_temperature_limit():
  e = np.eye(3, dtype=np.float32)[None]  # [1,3,3]
  q = np.array([[1.0, 0.5, 0.0]], np.float32)
  mask = np.array([[True, True, False]])
  a = np.exp(np.array([1.0, 0.5]) / 0.5)
  a /= a.sum()
  np.testing.assert_allclose(steering.context_vector(q, e, mask, 0.5),
                             [[a[0], a[1], 0.0]], atol=1e-6)
  np.testing.assert_allclose(steering.context_vector(q, e, mask, 1e-3), [[1.0, 0.0, 0.0]],
                             atol=1e-6)


def test_info_nce_hand_computed():
  # One example, positive at cosine 1, one hard negative at cosine 0: -log(e^{1/t}/(e^{1/t}+1)).
  t = 0.5
  q = np.array([[1.0, 0.0]], np.float32)
  loss = steering.info_nce(q, 3 * q, np.array([[[0.0, 2.0]]], np.float32),
                           np.array([[True]]), t)
  np.testing.assert_allclose(loss, np.log1p(np.exp(-1 / t)), rtol=1e-6)
  loss_masked = steering.info_nce(q, q, np.array([[[0.0, 2.0]]], np.float32),
                                  np.array([[False]]), t)
  np.testing.assert_allclose(loss_masked, 0.0, atol=1e-7)


def test_init_gate_rejects_unknown_kind():
  with pytest.raises(ValueError, match="'diagonal'"):
    steering.init_gate(jax.random.key(0), 4, "diagonal")
