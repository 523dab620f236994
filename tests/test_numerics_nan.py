"""NaN where it is masked out never reaches a result (selected away, not multiplied by zero);
NaN where it counts is refused with a clear error."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graphloom_jax.models import router as router_lib
from graphloom_jax.ops import joint_attention as ja
from graphloom_jax.ops import routing


def _qkv(rng, b=2, t=5, n=4, k=2, s=7, h=8):
  q = rng.standard_normal((b, t, n, h)).astype(np.float32)
  keys = rng.standard_normal((b, s, k, h)).astype(np.float32)
  values = rng.standard_normal((b, s, k, h)).astype(np.float32)
  return q, keys, values


@pytest.mark.parametrize("rank", [2, 3])
def test_nan_in_masked_keys_and_values_does_not_reach_output_or_gradient(rng, rank):
  q, k, v = _qkv(rng)
  valid = rng.uniform(size=(2, 7)) < 0.6
  valid[:, 0] = True
  mask = valid if rank == 2 else np.broadcast_to(valid[:, None], (2, 5, 7))
  clean_k, clean_v = np.where(valid[..., None, None], k, 0), np.where(valid[..., None, None], v, 0)
  dirty_k, dirty_v = (np.where(valid[..., None, None], x, np.nan) for x in (k, v))
  want, want_lse = ja.partial_attention(q, clean_k, clean_v, mask)
  got, got_lse = ja.partial_attention(q, dirty_k, dirty_v, mask)
  assert np.isfinite(np.asarray(got)).all()
  np.testing.assert_allclose(got, want, atol=1e-6)
  np.testing.assert_allclose(got_lse, want_lse, atol=1e-6)
  grad = jax.grad(lambda q_: ja.partial_attention(q_, dirty_k, dirty_v, mask)[0].sum())(q)
  assert np.isfinite(np.asarray(grad)).all()


def test_joint_attention_nan_inactive_slots(rng):
  q, self_k, self_v = _qkv(rng)
  slot_k = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
  slot_v = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
  active = np.array([[True, False, True], [False, False, True]])
  dirty_k = np.where(active[..., None, None], slot_k, np.nan)
  dirty_v = np.where(active[..., None, None], slot_v, np.nan)
  prefix = np.zeros((2, 0, 2, 8), np.float32)
  for impl in ("dense", "blockwise"):
    want = ja.joint_attention(q, prefix, prefix, None, np.where(active[..., None, None], slot_k, 0),
                              np.where(active[..., None, None], slot_v, 0), active, self_k,
                              self_v, None, impl=impl)
    got = ja.joint_attention(q, prefix, prefix, None, dirty_k, dirty_v, active, self_k, self_v,
                             None, impl=impl)
    np.testing.assert_allclose(got, want, atol=1e-6, err_msg=impl)


def test_calibration_fits_ignore_nan_in_masked_entries(rng):
  z = (rng.standard_normal(200) * 2).astype(np.float32)
  y = (rng.uniform(size=200) < 1 / (1 + np.exp(-z))).astype(np.float32)
  mask = jnp.asarray(np.arange(200) < 150)
  clean = jnp.asarray(np.where(mask, z, 0.0).astype(np.float32))
  dirty = jnp.asarray(np.where(mask, z, np.nan).astype(np.float32))
  dirty_y = jnp.asarray(np.where(mask, y, np.nan).astype(np.float32))
  want_t = float(routing.fit_temperature(clean, jnp.asarray(y), mask))
  assert np.isfinite(want_t) and want_t > 0
  assert float(routing.fit_temperature(dirty, dirty_y, mask)) == want_t
  want_ab = np.asarray(routing.fit_platt(clean, jnp.asarray(y), mask))
  np.testing.assert_array_equal(np.asarray(routing.fit_platt(dirty, dirty_y, mask)), want_ab)


@pytest.mark.parametrize("calibration", ["temperature", "platt"])
def test_router_fit_calibration_refuses_nan_reliability(rng, calibration):
  router = router_lib.Router(4, 3, 5, calibration=calibration, rngs=nnx.Rngs(0))
  rel = rng.uniform(0.05, 0.95, (4, 6)).astype(np.float32)
  util = (rng.uniform(size=(4, 6)) < 0.5).astype(np.float32)
  valid = np.ones((4, 6), bool)
  rel[2, 3] = np.nan
  with pytest.raises(ValueError, match=r"reliability.*NaN.*slot \(2, 3\)"):
    router.fit_calibration(jnp.asarray(rel), jnp.asarray(util), jnp.asarray(valid))
  valid[2, 3] = False  # a padding slot may hold anything
  router.fit_calibration(jnp.asarray(rel), jnp.asarray(util), jnp.asarray(valid))
  params = router.temperature[...] if calibration == "temperature" else router.platt[...]
  assert np.isfinite(np.asarray(params)).all()
