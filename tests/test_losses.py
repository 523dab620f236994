"""The GraphLoom losses vs PyTorch re-implementations: values (1e-5) and gradients (1e-4)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from graphloom_jax.training import losses


def t_gen(logits, targets, mask, eps):
  logp = torch.log_softmax(logits, -1)
  nll = torch.nn.functional.nll_loss(logp.reshape(-1, logp.shape[-1]), targets.reshape(-1),
                                     reduction="none").reshape(targets.shape)
  # torch's own label smoothing spreads eps uniformly over the vocabulary, as ours does.
  ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                         label_smoothing=eps, reduction="none")
  ce = ce.reshape(targets.shape)
  assert torch.allclose(ce, (1 - eps) * nll - eps * logp.mean(-1), atol=1e-5)
  m = mask.float()
  return (ce * m).sum() / m.sum().clamp(min=1)


def t_cal(scores, util, valid, step):
  m = (valid[:, None, :] & step[:, :, None]).float()
  bce = torch.nn.functional.binary_cross_entropy_with_logits(
      scores, util[:, None, :].expand_as(scores), reduction="none")
  return (bce * m).sum() / m.sum().clamp(min=1)


def t_cf(scores, util, valid, step):
  total, count = scores.new_zeros(()), 0
  for b in range(scores.shape[0]):
    pos = valid[b] & (util[b] > 0.5)
    if not pos.any():
      continue
    for t in range(scores.shape[1]):
      if step[b, t]:
        s = scores[b, t]
        total = total + torch.logsumexp(s[valid[b]], 0) - torch.logsumexp(s[pos], 0)
        count += 1
  return total / max(count, 1)


def t_align(scores, active, attn_mass, step):
  attn = attn_mass.mean(dim=(0, 3)).detach()
  total, count = scores.new_zeros(()), 0
  for b in range(scores.shape[0]):
    for t in range(scores.shape[1]):
      a = active[b, t]
      if step[b, t] and a.any():
        p = attn[b, t][a] / attn[b, t][a].sum()
        logq = torch.log_softmax(scores[b, t][a], 0)
        total = total + torch.sum(p * (torch.log(p) - logq))
        count += 1
  return total / max(count, 1)


def _case(seed, b=3, t=6, m=10, v=17, layers=2, heads=3):
  rng = np.random.default_rng(seed)
  x = dict(
      logits=rng.standard_normal((b, t, v)).astype(np.float32) * 2,
      targets=rng.integers(0, v, (b, t)),
      mask=rng.uniform(size=(b, t)) < 0.6,
      scores=rng.standard_normal((b, t, m)).astype(np.float32) * 2,
      util=(rng.uniform(size=(b, m)) < 0.3).astype(np.float32),
      valid=rng.uniform(size=(b, m)) < 0.8,
      active=rng.uniform(size=(b, t, m)) < 0.35,
      attn=rng.dirichlet(np.ones(m + 5), (layers, b, t, heads))[..., :m].astype(np.float32),
  )
  x["util"][0] = 0.0  # a row without useful slots is skipped by the contrastive loss
  x["mask"][0, 0] = True
  return x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_losses_and_gradients_match_torch(seed):
  x = _case(seed)
  j = {k: jnp.asarray(v) for k, v in x.items()}
  tt = {k: torch.tensor(v) for k, v in x.items()}
  tt["targets"] = tt["targets"].long()

  jax_fns = {
      "gen": (lambda lg: losses.generation_loss(lg, j["targets"], j["mask"], 0.1), "logits"),
      "cal": (lambda s: losses.calibration_loss(s, j["util"], j["valid"], j["mask"]), "scores"),
      "cf": (lambda s: losses.contrastive_loss(s, j["util"], j["valid"], j["mask"]), "scores"),
      "align": (lambda s: losses.alignment_loss(s, j["active"], j["attn"], j["mask"]), "scores"),
  }
  torch_fns = {
      "gen": lambda lg: t_gen(lg, tt["targets"], tt["mask"], 0.1),
      "cal": lambda s: t_cal(s, tt["util"], tt["valid"], tt["mask"]),
      "cf": lambda s: t_cf(s, tt["util"], tt["valid"], tt["mask"]),
      "align": lambda s: t_align(s, tt["active"], tt["attn"], tt["mask"]),
  }
  for name, (fn, arg) in jax_fns.items():
    val, grad = jax.value_and_grad(fn)(j[arg])
    inp = tt[arg].clone().requires_grad_(True)
    want = torch_fns[name](inp)
    want.backward()
    np.testing.assert_allclose(float(val), want.item(), atol=1e-5, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(np.asarray(grad), inp.grad.numpy(), atol=1e-4, err_msg=name)
    assert float(val) > 0, name


def test_alignment_attention_side_has_no_gradient():
  x = _case(3)
  f = lambda a: losses.alignment_loss(jnp.asarray(x["scores"]), jnp.asarray(x["active"]), a,
                                      jnp.asarray(x["mask"]))
  assert float(jnp.abs(jax.grad(f)(jnp.asarray(x["attn"]))).max()) == 0.0


def test_alignment_zero_when_router_matches_attention():
  # Router scores = log attention mass on the active slots -> identical distributions.
  rng = np.random.default_rng(4)
  attn = rng.dirichlet(np.ones(6), (1, 2, 3, 1)).astype(np.float32)  # one layer, one head
  active = np.array([[[1, 1, 0, 1, 0, 0]] * 3] * 2, bool)
  scores = np.log(attn[0, :, :, 0]) + 5.0
  val = losses.alignment_loss(jnp.asarray(scores), jnp.asarray(active), jnp.asarray(attn),
                              jnp.ones((2, 3), bool))
  assert abs(float(val)) < 1e-6


def test_empty_masks_give_zero_not_nan():
  s = jnp.zeros((2, 3, 4))
  none = jnp.zeros((2, 3), bool)
  for v in (losses.calibration_loss(s, jnp.zeros((2, 4)), jnp.ones((2, 4), bool), none),
            losses.contrastive_loss(s, jnp.zeros((2, 4)), jnp.ones((2, 4), bool), none + True),
            losses.alignment_loss(s, jnp.zeros((2, 3, 4), bool), jnp.ones((1, 2, 3, 1, 4)),
                                  none + True)):
    assert float(v) == 0.0
  g = jax.grad(lambda s: losses.alignment_loss(s, jnp.zeros((2, 3, 4), bool),
                                               jnp.ones((1, 2, 3, 1, 4)), none + True))(s)
  assert np.all(np.isfinite(np.asarray(g)))


def test_total_loss_weights():
  w = dict(gen=1.0, cal=0.5, cf=0.3, align=0.2, opt=0.0, ev=0.0)
  out = losses.total_loss(w, 2.0, 4.0, 10.0, 5.0)
  assert out.total == pytest.approx(2.0 + 2.0 + 3.0 + 1.0)
  assert float(out.opt) == 0.0 and float(out.ev) == 0.0
  out = losses.total_loss(dict(w, opt=2.0), 2.0, 4.0, 10.0, 5.0, 0.25)
  assert out.total == pytest.approx(8.0 + 0.5) and float(out.opt) == 0.25
  out = losses.total_loss(dict(w, ev=3.0), 2.0, 4.0, 10.0, 5.0, 0.25, 0.5)
  assert out.total == pytest.approx(8.0 + 1.5) and float(out.ev) == 0.5
  with pytest.raises(KeyError):
    losses.total_loss(dict(gen=1.0, cal=0.5, cf=0.3, align=0.2, opt=0.0), 2.0, 4.0, 10.0, 5.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_option_loss_matches_torch_cross_entropy(seed):
  rng = np.random.default_rng(seed)
  scores = (rng.standard_normal((5, 4)) * 3 - 2).astype(np.float32)  # mean log-probs, < 0
  gold = rng.integers(0, 4, 5)
  val, grad = jax.value_and_grad(losses.option_loss)(jnp.asarray(scores), jnp.asarray(gold))
  inp = torch.tensor(scores, requires_grad=True)
  want = torch.nn.functional.cross_entropy(inp, torch.tensor(gold).long())
  want.backward()
  np.testing.assert_allclose(float(val), want.item(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(grad), inp.grad.numpy(), atol=1e-6)
  # the loss sees only differences between a question's options: a shift shared by all of
  # them (a prior on the answer format) changes nothing
  shifted = losses.option_loss(jnp.asarray(scores + 7.0), jnp.asarray(gold))
  np.testing.assert_allclose(float(shifted), float(val), rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_evidence_loss_matches_torch(seed):
  rng = np.random.default_rng(seed)
  b, t, v = 3, 6, 11
  logits = rng.normal(size=(b, t, v)).astype(np.float32)
  other = rng.normal(size=(b, t, v)).astype(np.float32)
  targets = rng.integers(0, v, size=(b, t))
  mask = rng.random((b, t)) < 0.5
  mask[0] = False  # a row without answer tokens: mean log-likelihood 0 on both sides
  mask[1, 2] = True

  def ref(lo, ot):
    def mean_lp(x):
      tok = torch.log_softmax(x, -1).gather(-1, torch.tensor(targets)[..., None])[..., 0]
      m = torch.tensor(mask).float()
      return (tok * m).sum(1) / m.sum(1).clamp(min=1)
    return torch.nn.functional.softplus(mean_lp(ot) - mean_lp(lo)).mean()

  tl, to = torch.tensor(logits, requires_grad=True), torch.tensor(other, requires_grad=True)
  want = ref(tl, to)
  want.backward()
  tg = jnp.asarray(targets)
  fn = lambda lo, ot: losses.evidence_loss(losses.answer_logprob(lo, tg, mask),
                                           losses.answer_logprob(ot, tg, mask))
  got = fn(jnp.asarray(logits), jnp.asarray(other))
  np.testing.assert_allclose(float(got), want.item(), rtol=1e-5, atol=1e-6)
  g_own, g_other = jax.grad(fn, argnums=(0, 1))(jnp.asarray(logits), jnp.asarray(other))
  np.testing.assert_allclose(np.asarray(g_own), tl.grad.numpy(), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(np.asarray(g_other), to.grad.numpy(), rtol=1e-4, atol=1e-6)
