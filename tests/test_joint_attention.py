"""KG-JSA++ joint attention vs a PyTorch re-implementation written from the formula:
concatenate [prefix; slots; self], mask, add the slot bias, one softmax, weighted sum of values.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from graphloom_jax.ops.joint_attention import joint_attention, merge_partials, partial_attention


def torch_joint_attention(q, sets, scale=None):
  """q [B,T,N,H]; sets: list of (k [B,S,K,H], v, mask [B,K,T,S] bool, bias [B,K,T,S] float).

  Query head n reads kv head n // G (transformers' repeat_kv); rows without any valid key
  give 0.
  """
  q = torch.as_tensor(np.array(q))
  b, t, n, h = q.shape
  k = torch.cat([torch.as_tensor(np.asarray(s[0])) for s in sets], dim=1)
  v = torch.cat([torch.as_tensor(np.asarray(s[1])) for s in sets], dim=1)
  mask = torch.cat([torch.as_tensor(np.array(s[2])) for s in sets], dim=-1)
  bias = torch.cat([torch.as_tensor(np.array(s[3])) for s in sets], dim=-1)
  g = n // k.shape[2]
  k = k.repeat_interleave(g, dim=2).permute(0, 2, 1, 3)  # [B, N, S, H]
  v = v.repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
  mask = mask.repeat_interleave(g, dim=1)  # [B, N, T, S]
  bias = bias.repeat_interleave(g, dim=1)
  scale = h ** -0.5 if scale is None else scale
  scores = q.permute(0, 2, 1, 3) @ k.transpose(-1, -2) * scale + bias
  scores = scores.masked_fill(~mask, float("-inf"))
  probs = torch.softmax(scores, dim=-1)
  probs = torch.nan_to_num(probs, nan=0.0)  # all -inf rows: softmax gives NaN, we want 0
  return (probs @ v).permute(0, 2, 1, 3).numpy()


def _case(rng, b=2, t=3, n=6, kv=2, h=16, p=5, m=4, s=11, slot_rank=3, self_rank=4):
  f = lambda *shape: rng.normal(size=shape).astype(np.float32)
  q = f(b, t, n, h)
  pk, pv, mk, mv, sk, sv = f(b, p, kv, h), f(b, p, kv, h), f(b, m, kv, h), f(b, m, kv, h), \
      f(b, s, kv, h), f(b, s, kv, h)
  # Left padding on the prefix, random active slots with fully masked rows, random per-group
  # self selection.
  prefix_mask = np.arange(p)[None] >= rng.integers(0, p, size=(b, 1))
  slot_full = rng.random((b, t, m)) < 0.5
  slot_full[0, 0] = False
  slot_full[-1, -1] = False
  self_full = rng.random((b, kv, t, s)) < 0.6
  bias_full = np.log(rng.uniform(0.05, 1.0, size=(b, t, m))).astype(np.float32)
  slot_mask = {2: slot_full[:, 0], 3: slot_full}[slot_rank]
  slot_bias = {2: bias_full[:, 0], 3: bias_full}[slot_rank]
  self_mask = {3: self_full[:, 0], 4: self_full}[self_rank]
  # The reference takes every mask and bias as explicit [B, K, T, S].
  full = lambda x, s_: np.broadcast_to(
      x[:, None, None, :] if x.ndim == 2 else (x[:, None] if x.ndim == 3 else x), (b, kv, t, s_))
  ref_sets = [
      (pk, pv, full(prefix_mask, p), np.zeros((b, kv, t, p), np.float32)),
      (mk, mv, full(slot_mask, m), full(slot_bias, m)),
      (sk, sv, full(self_mask, s), np.zeros((b, kv, t, s), np.float32)),
  ]
  args = (q, pk, pv, prefix_mask, mk, mv, slot_mask, sk, sv, self_mask)
  return args, dict(slot_bias=slot_bias), ref_sets


@pytest.mark.parametrize("impl", ["dense", "blockwise"])
@pytest.mark.parametrize("n,kv,slot_rank,self_rank", [(6, 2, 3, 4), (9, 3, 2, 3), (4, 4, 3, 3)])
def test_matches_torch_reference(impl, n, kv, slot_rank, self_rank, rng):
  args, kw, ref_sets = _case(rng, n=n, kv=kv, slot_rank=slot_rank, self_rank=self_rank)
  got = np.asarray(joint_attention(*map(jnp.asarray, args), **kw, impl=impl))
  want = torch_joint_attention(args[0], ref_sets)
  assert np.isfinite(got).all()
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_dense_and_blockwise_agree(rng):
  args, kw, _ = _case(rng, b=3, t=4, n=9, kv=3, h=64, p=32, m=8, s=88)
  args = tuple(map(jnp.asarray, args))
  dense = joint_attention(*args, **kw, impl="dense")
  block = joint_attention(*args, **kw, impl="blockwise")
  np.testing.assert_allclose(np.asarray(block), np.asarray(dense), atol=1e-6, rtol=0)


def test_gradients_of_both_forms_agree_and_stay_finite(rng):
  args, kw, _ = _case(rng)
  args = tuple(map(jnp.asarray, args))
  # Also a row with nothing valid at all: its gradient must be 0, not NaN.
  args = args[:3] + (args[3].at[1].set(False),) + args[4:6] + (
      args[6].at[1].set(False),) + args[7:9] + (args[9].at[1].set(False),)
  w = jnp.asarray(rng.normal(size=args[0].shape).astype(np.float32))

  def loss(impl, q, pk, mk, sk, bias):
    out = joint_attention(q, pk, args[2], args[3], mk, args[5], args[6], sk, args[8], args[9],
                          slot_bias=bias, impl=impl)
    return jnp.sum(out * w)

  diff = (0, 1, 2, 3, 4)
  gd = jax.grad(lambda *a: loss("dense", *a), argnums=diff)(
      args[0], args[1], args[4], args[7], kw["slot_bias"])
  gb = jax.grad(lambda *a: loss("blockwise", *a), argnums=diff)(
      args[0], args[1], args[4], args[7], kw["slot_bias"])
  for a, b in zip(gd, gb):
    assert np.isfinite(np.asarray(b)).all()
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=0)
  np.testing.assert_array_equal(np.asarray(gb[0][1]), 0.0)


@pytest.mark.parametrize("impl", ["dense", "blockwise"])
def test_rows_without_any_valid_key_are_zero(impl, rng):
  args, kw, ref_sets = _case(rng, b=2, t=2)
  args = list(args)
  args[3] = np.zeros_like(args[3])  # no prefix
  args[6] = np.zeros_like(args[6])  # no slot anywhere
  args[9] = args[9].copy()
  args[9][0] = False  # batch row 0 sees no self token either
  out = np.asarray(joint_attention(*map(jnp.asarray, args), **kw, impl=impl))
  np.testing.assert_array_equal(out[0], 0.0)
  assert np.abs(out[1]).max() > 0


def test_zero_gate_bias_equals_masking_the_slot(rng):
  args, kw, _ = _case(rng)
  args = tuple(map(jnp.asarray, args))
  slot_mask = args[6]
  bias = jnp.where(jnp.arange(slot_mask.shape[-1]) == 1, -jnp.inf, kw["slot_bias"])
  with_bias = joint_attention(*args, slot_bias=bias)
  masked = joint_attention(*args[:6], slot_mask & (jnp.arange(slot_mask.shape[-1]) != 1),
                           *args[7:], slot_bias=kw["slot_bias"])
  np.testing.assert_allclose(np.asarray(with_bias), np.asarray(masked), atol=1e-6, rtol=0)


@pytest.mark.parametrize("t,s", [(1, 300), (300, 300)])
def test_empty_memory_with_full_causal_self_is_causal_attention(t, s, rng):
  """P = 0, M = 0 and I_t = all previous tokens: torch's scaled_dot_product_attention.

  SDPA runs in float64: its own float32 result is ~9e-7 off the float64 one at 300 keys, so
  two float32 implementations cannot be held to 1e-6 of each other; ours is held to 1e-6 of
  the exact value."""
  b, n, kv, h = 2, 9, 3, 64
  q = rng.normal(size=(b, t, n, h)).astype(np.float32)
  k = rng.normal(size=(b, s, kv, h)).astype(np.float32)
  v = rng.normal(size=(b, s, kv, h)).astype(np.float32)
  causal = np.arange(s)[None, :] <= (s - t + np.arange(t))[:, None]  # [T, S]
  empty = np.zeros((b, 0, kv, h), np.float32)
  out = joint_attention(jnp.asarray(q), jnp.asarray(empty), jnp.asarray(empty),
                        jnp.zeros((b, 0), bool), jnp.asarray(empty), jnp.asarray(empty),
                        jnp.zeros((b, 0), bool), jnp.asarray(k), jnp.asarray(v),
                        jnp.asarray(np.broadcast_to(causal, (b, t, s))))
  g = n // kv
  qt = torch.as_tensor(q).double().transpose(1, 2)
  kt = torch.as_tensor(k).double().transpose(1, 2).repeat_interleave(g, dim=1)
  vt = torch.as_tensor(v).double().transpose(1, 2).repeat_interleave(g, dim=1)
  want = torch.nn.functional.scaled_dot_product_attention(
      qt, kt, vt, attn_mask=torch.as_tensor(causal)).transpose(1, 2).numpy()
  np.testing.assert_allclose(np.asarray(out), want, atol=1e-6, rtol=0)


def test_none_key_sets_are_absent(rng):
  args, _, ref_sets = _case(rng, m=3)
  args = tuple(map(jnp.asarray, args))
  got = joint_attention(args[0], None, None, None, args[4], args[5], args[6], None, None, None)
  want = torch_joint_attention(args[0], [(ref_sets[1][0], ref_sets[1][1], ref_sets[1][2],
                                          np.zeros_like(ref_sets[1][3]))])
  np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=0)


def test_partials_merge_to_one_softmax_and_lse_is_logsumexp(rng):
  b, t, n, kv, h, s = 2, 3, 6, 3, 8, 40
  q = jnp.asarray(rng.normal(size=(b, t, n, h)).astype(np.float32))
  k = jnp.asarray(rng.normal(size=(b, s, kv, h)).astype(np.float32))
  v = jnp.asarray(rng.normal(size=(b, s, kv, h)).astype(np.float32))
  mask = jnp.asarray(rng.random((b, kv, t, s)) < 0.5)
  whole, lse = partial_attention(q, k, v, mask)
  cuts = [0, 7, 8, 31, s]
  parts = [partial_attention(q, k[:, i:j], v[:, i:j], mask[..., i:j])
           for i, j in zip(cuts[:-1], cuts[1:])]
  np.testing.assert_allclose(np.asarray(merge_partials(parts)), np.asarray(whole), atol=1e-6)
  qt = torch.as_tensor(np.array(q)).permute(0, 2, 1, 3)  # [B, N, T, H]
  kt = torch.as_tensor(np.array(k)).permute(0, 2, 1, 3).repeat_interleave(n // kv, dim=1)
  scores = (qt @ kt.transpose(-1, -2)) * h ** -0.5
  scores = scores.masked_fill(~torch.as_tensor(np.array(mask)).repeat_interleave(
      n // kv, dim=1), float("-inf"))
  want = torch.logsumexp(scores, dim=-1).permute(0, 2, 1).numpy()  # [B, T, N]
  np.testing.assert_allclose(np.asarray(lse), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("change,message", [
    (lambda a: a.__setitem__(0, a[0][..., :7]), "head dim"),
    (lambda a: a.__setitem__(0, a[0][:, :, :5]), "multiple"),
    (lambda a: a.__setitem__(2, a[2][..., :1, :]), "prefix_k and prefix_v"),
    (lambda a: a.__setitem__(6, a[6][None, None]), "slot_mask must have rank"),
    (lambda a: a.__setitem__(9, a[9][..., :3]), "self_mask has 3 keys"),
])
def test_bad_inputs_name_the_input(change, message):
  args, _, _ = _case(np.random.default_rng(0))
  args = list(map(jnp.asarray, args))
  change(args)
  with pytest.raises(ValueError, match=message):
    joint_attention(*args)


def test_unknown_impl_is_rejected():
  args, _, _ = _case(np.random.default_rng(0))
  with pytest.raises(ValueError, match="impl must be one of"):
    joint_attention(*map(jnp.asarray, args), impl="flash")
