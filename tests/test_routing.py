"""Router score, active-set selection and reliability calibration vs PyTorch / SciPy references."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
import torch
from flax import nnx

from graphloom_jax.models import memory as memory_lib
from graphloom_jax.models import router as router_lib
from graphloom_jax.ops import routing


def torch_scores(q, k, vis, feat, rel, beta, bias):
  rel = rel.clamp(1e-6, 1 - 1e-6)
  logit = torch.log(rel) - torch.log1p(-rel)
  if feat.dim() == 2:
    feat = feat[:, None, :]
  return q @ k.transpose(1, 2) + vis[:, :, None] + feat + beta * logit[:, None, :] + bias


def torch_select(scores, valid, is_entity, ek, rk, eps):
  """Per (b, t) row: sort each type's eligible slots by score, stable (ties -> lower index)."""
  b, t, m = scores.shape
  gates = torch.sigmoid(scores)
  active = torch.zeros(b, t, m, dtype=torch.bool)
  for i in range(b):
    for j in range(t):
      for want_entity, k in ((True, ek), (False, rk)):
        idx = [p for p in range(m) if valid[i, p] and bool(is_entity[i, p]) == want_entity
               and gates[i, j, p] >= eps]
        order = sorted(idx, key=lambda p: (-float(scores[i, j, p]), p))
        for p in order[:k]:
          active[i, j, p] = True
  return active, torch.nn.functional.logsigmoid(scores), gates


def _inputs(seed, b=3, t=5, m=12, r=8):
  rng = np.random.default_rng(seed)
  f = lambda *s: rng.standard_normal(s).astype(np.float32)
  return dict(q=f(b, t, r), k=f(b, m, r), vis=f(b, t), feat=f(b, m),
              rel=rng.uniform(0, 1, (b, m)).astype(np.float32),
              valid=rng.uniform(size=(b, m)) < 0.8,
              is_entity=np.broadcast_to(np.arange(m) < m // 2, (b, m)).copy())


@pytest.mark.parametrize("seed", [0, 1])
def test_router_score_matches_torch(seed):
  x = _inputs(seed)
  x["rel"][0, 0], x["rel"][0, 1] = 1.0, 0.0  # certain triples must stay finite
  got = routing.router_scores(*(jnp.asarray(x[n]) for n in ("q", "k", "vis", "feat", "rel")),
                              beta=2.0, bias=-1.0)
  want = torch_scores(*(torch.tensor(x[n]) for n in ("q", "k", "vis", "feat", "rel")), 2.0, -1.0)
  np.testing.assert_allclose(np.asarray(got), want.numpy(), atol=1e-5, rtol=1e-5)
  assert np.all(np.isfinite(np.asarray(got)))


def test_router_score_per_position_features():
  x = _inputs(2)
  feat = np.random.default_rng(3).standard_normal((3, 5, 12)).astype(np.float32)
  got = routing.router_scores(jnp.asarray(x["q"]), jnp.asarray(x["k"]), jnp.asarray(x["vis"]),
                              jnp.asarray(feat), jnp.asarray(x["rel"]), 2.0, -1.0)
  want = torch_scores(torch.tensor(x["q"]), torch.tensor(x["k"]), torch.tensor(x["vis"]),
                      torch.tensor(feat), torch.tensor(x["rel"]), 2.0, -1.0)
  np.testing.assert_allclose(np.asarray(got), want.numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed,quantize", [(0, False), (1, True), (2, True)])
def test_select_active_matches_torch(seed, quantize):
  rng = np.random.default_rng(seed)
  b, t, m = 3, 6, 14
  scores = rng.standard_normal((b, t, m)).astype(np.float32)
  if quantize:  # many exact ties: the tie-breaking rule must agree
    scores = np.round(scores * 2) / 2
  valid = rng.uniform(size=(b, m)) < 0.8
  is_entity = np.broadcast_to(np.arange(m) % 3 != 0, (b, m)).copy()
  got = routing.select_active(jnp.asarray(scores), jnp.asarray(valid), jnp.asarray(is_entity),
                              2, 2, 0.3)
  active, bias, gates = torch_select(torch.tensor(scores), valid, is_entity, 2, 2, 0.3)
  np.testing.assert_array_equal(np.asarray(got.active), active.numpy())
  np.testing.assert_allclose(np.asarray(got.bias), bias.numpy(), atol=1e-6)
  np.testing.assert_allclose(np.asarray(got.gates), gates.numpy(), atol=1e-6)
  a = np.asarray(got.active)
  assert np.all(a.sum(-1) <= 4)
  assert not np.any(a & ~valid[:, None, :])
  assert np.all(np.asarray(got.gates)[a] >= 0.3)


def test_select_active_threshold_and_quota_cases():
  # One row, 4 entity + 4 relation slots. sigmoid(-1) = 0.27 < 0.3 is below the gate.
  scores = jnp.array([[[3.0, 3.0, 2.0, -1.0, 0.5, -1.0, -2.0, 1.0]]])
  valid = jnp.array([[True, True, True, True, True, True, True, False]])
  is_entity = jnp.array([True] * 4 + [False] * 4)
  r = routing.select_active(scores, valid, is_entity, 2, 2, 0.3)
  # entity: tie 3.0/3.0 -> both (slots 0, 1); relation: slot 4 only (5, 6 below gate, 7 invalid)
  np.testing.assert_array_equal(np.asarray(r.active[0, 0]),
                                [True, True, False, False, True, False, False, False])
  with pytest.raises(ValueError, match="entity_k"):
    routing.select_active(scores, valid, is_entity, -1, 2, 0.3)


def test_router_module_matches_torch():
  rngs = nnx.Rngs(0)
  b, t, m, d, v, f = 2, 4, 10, 16, 6, 5
  router = router_lib.Router(d, v, f, router_dim=8, feature_hidden=7, rngs=rngs)
  rng = np.random.default_rng(5)
  h = rng.standard_normal((b, t, d)).astype(np.float32)
  keys = rng.standard_normal((b, m, d)).astype(np.float32)
  valid = rng.uniform(size=(b, m)) < 0.9
  inputs = router_lib.RouterInputs(
      features=jnp.asarray(rng.uniform(size=(b, m, f)).astype(np.float32)),
      reliability=jnp.asarray(rng.uniform(size=(b, m)).astype(np.float32)),
      visual=jnp.asarray(rng.standard_normal((b, v)).astype(np.float32)),
      is_entity=jnp.asarray(np.broadcast_to(np.arange(m) < m // 2, (b, m))))
  router.temperature[...] = jnp.asarray(1.7)
  mentioned = rng.uniform(size=(b, t, m)) < 0.3
  mem = memory_lib.empty(b, d, num_slots=m).replace(slot_keys=jnp.asarray(keys),
                                                    slot_valid=jnp.asarray(valid),
                                                    slot_mentioned=jnp.asarray(mentioned))
  active, bias = jax.jit(lambda h: router.route_fn(inputs)(h, mem))(jnp.asarray(h))
  # BoundRouter (the decode loop's form) routes identically
  bound = router_lib.BoundRouter(router, inputs)
  b_active, b_bias = jax.jit(lambda h: bound(h, mem))(jnp.asarray(h))
  np.testing.assert_array_equal(np.asarray(b_active), np.asarray(active))
  np.testing.assert_allclose(np.asarray(b_bias), np.asarray(bias), atol=1e-6)

  T = lambda x: torch.tensor(np.asarray(x))
  wq, wk, wv = T(router.q_proj.kernel[...]), T(router.k_proj.kernel[...]), T(router.w_v.kernel[...])
  w1, b1 = T(router.phi_hidden.kernel[...]), T(router.phi_hidden.bias[...])
  w2, b2 = T(router.phi_out.kernel[...]), T(router.phi_out.bias[...])
  q = T(h) @ wq / math.sqrt(8)
  k = T(keys) @ wk
  vis = (T(inputs.visual) @ wv)[:, 0][:, None].expand(b, t)
  # phi on [static features ; mentioned-in-output flag] per position
  f_t = torch.cat([T(inputs.features)[:, None].expand(b, t, m, f),
                   T(mentioned.astype(np.float32))[..., None]], dim=-1)
  feat = (torch.tanh(f_t @ w1 + b1) @ w2 + b2)[..., 0]
  rel = T(inputs.reliability).clamp(0.01, 0.99)
  c = torch.sigmoid((torch.log(rel) - torch.log1p(-rel)) / 1.7)
  s = torch_scores(q, k, vis, feat, c, 2.0, -1.0)
  want_active, want_bias, _ = torch_select(s, valid, np.asarray(inputs.is_entity), 2, 2, 0.3)
  np.testing.assert_allclose(np.asarray(bias), want_bias.numpy(), atol=1e-5)
  np.testing.assert_array_equal(np.asarray(active), want_active.numpy())


def test_router_rejects_mismatched_mentions():
  router = router_lib.Router(8, 4, 5, rngs=nnx.Rngs(0))
  inputs = router_lib.RouterInputs(jnp.zeros((1, 6, 5)), jnp.full((1, 6), 0.5), jnp.zeros((1, 4)),
                                   jnp.ones((1, 6), bool))
  with pytest.raises(ValueError, match="slot_mentioned has shape"):
    router(jnp.zeros((1, 3, 8)), jnp.zeros((1, 6, 8)), jnp.ones((1, 6), bool), inputs,
           jnp.zeros((1, 2, 6), bool))


def _py_mentions(tokens, output_mask, key_tokens):
  """Plain-Python reference: slot p is mentioned at t when its name's token list occurs
  contiguously in the output tokens at positions <= t."""
  b, t = tokens.shape
  out = np.zeros((b, t, key_tokens.shape[1]), bool)
  for bi in range(b):
    for p, row in enumerate(key_tokens[bi]):
      name = [x for x in row.tolist() if x >= 0]
      for ti in range(t):
        gen = [int(x) for x, ok in zip(tokens[bi, :ti + 1], output_mask[bi, :ti + 1]) if ok]
        out[bi, ti, p] = bool(name) and any(gen[j:j + len(name)] == name
                                            for j in range(len(gen) - len(name) + 1))
  return out


def test_output_mentions_match_a_python_search(rng):
  b, t, m, w, vocab = 3, 24, 7, 4, 6  # a small vocabulary: many partial and repeated matches
  tokens = rng.integers(0, vocab, size=(b, t)).astype(np.int32)
  start = rng.integers(0, t, size=(b, 1))
  output_mask = np.arange(t)[None] >= start
  output_mask[0, -3:] = False  # right padding
  key_tokens = np.full((b, m, w), -1, np.int32)
  for bi in range(b):
    for p in range(m - 1):  # the last slot has no name
      n = int(rng.integers(1, w + 1))
      if p < 3:  # names copied from the output, so some really occur
        j = int(rng.integers(0, t - n + 1))
        key_tokens[bi, p, w - n:] = tokens[bi, j:j + n]
      else:
        key_tokens[bi, p, w - n:] = rng.integers(0, vocab, size=n)
  want = _py_mentions(tokens, output_mask, key_tokens)
  got = np.asarray(routing.output_mentions(jnp.asarray(tokens), jnp.asarray(output_mask),
                                           jnp.asarray(key_tokens)))
  np.testing.assert_array_equal(got, want)
  assert want.any() and not want.all()
  # the decode loop's incremental form gives the same flags, one generated token at a time
  for bi in range(b):
    gen = [i for i in range(t) if output_mask[bi, i]]
    window = jnp.full((1, w), -1, jnp.int32)
    flags = jnp.zeros((1, m), bool)
    for i in gen:
      window, flags = routing.mention_step(window, flags, jnp.asarray(tokens[bi, i:i + 1]),
                                           jnp.asarray(key_tokens[bi:bi + 1]))
      np.testing.assert_array_equal(np.asarray(flags)[0], want[bi, i])


def test_router_rejects_bad_config():
  with pytest.raises(ValueError, match="calibration"):
    router_lib.Router(4, 4, 5, calibration="isotonic", rngs=nnx.Rngs(0))


def _scipy_fit(z, y, platt):
  def nll(x):
    a, b = (x[0], x[1]) if platt else (np.exp(x[0]), 0.0)
    u = a * z + b
    return np.mean(np.logaddexp(0, u) - y * u)
  res = scipy.optimize.minimize(nll, [1.0, 0.0] if platt else [0.0], method="BFGS",
                                options=dict(gtol=1e-10))
  return res.x


@pytest.mark.parametrize("seed", [0, 1])
def test_calibration_fits_match_scipy(seed):
  rng = np.random.default_rng(seed)
  n = 400
  z = rng.standard_normal(n) * 3.0
  # Overconfident raw logits: the true log-odds are 0.4 z + 0.5.
  y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(0.4 * z + 0.5)))).astype(np.float64)
  pad = np.concatenate([z, rng.standard_normal(50) * 9]).astype(np.float32)
  ypad = np.concatenate([y, np.ones(50)]).astype(np.float32)
  mask = np.arange(n + 50) < n  # the padding must not move the fit
  temp = float(routing.fit_temperature(jnp.asarray(pad), jnp.asarray(ypad), jnp.asarray(mask)))
  a, b = routing.fit_platt(jnp.asarray(pad), jnp.asarray(ypad), jnp.asarray(mask))
  want_t = 1 / np.exp(_scipy_fit(z, y, False)[0])
  want_a, want_b = _scipy_fit(z, y, True)
  np.testing.assert_allclose(temp, want_t, rtol=1e-4)
  np.testing.assert_allclose([float(a), float(b)], [want_a, want_b], rtol=1e-4, atol=1e-5)
  assert temp > 1.5  # overconfident logits get softened


def test_router_fit_calibration_platt_updates_reliability():
  router = router_lib.Router(4, 3, 5, calibration="platt", rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  conf = rng.uniform(0.01, 0.99, 300).astype(np.float32)
  useful = (rng.uniform(size=300) < 0.5).astype(np.float32)  # conf carries no information
  router.fit_calibration(jnp.asarray(conf), jnp.asarray(useful))
  c = np.asarray(router.calibrate(jnp.asarray(conf)))
  assert abs(float(router.platt[...][0])) < 0.2  # slope near 0: reliability is uninformative
  np.testing.assert_allclose(c.mean(), useful.mean(), atol=0.02)
