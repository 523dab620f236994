"""Sparse self-KV selection (sink + recent + similar) vs a float64 numpy re-implementation by
explicit sorting, property tests over shapes and budgets, and a whole sparse decoding step vs
PyTorch.

Test keys are built so that each token's (or, with block-constant keys, each block's) cosine to
its kv group's mean query is a chosen value on a grid at least 0.02 apart: the float32 JAX
scores and the float64 reference then rank identically, and copied keys give exact ties, which
must go to the lower cache index. Block mode is checked on both kinds of keys: block-constant
ones (every token of a block ties with its block) and per-token ones (block means are then
whatever the tokens make them, and tokens inside a block differ). Block mode scores the keys it
gathers from the candidate blocks, and XLA may round the cosine of one key differently from
that of its bit-identical copy at another position of the gathered array (vectorised remainder
lanes): there exact ties are accepted in any order, everything else must match exactly, and the
lower-slot rule is checked on a hand-made case.
"""

import itertools
import math

import hypothesis
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from graphloom_jax.ops import sparse_kv
from graphloom_jax.ops.joint_attention import joint_attention


def make_case(rng, b, s, kv, g, h, block_size=0, ties=False, holes=False):
  """q [B, N, H], keys [B, S, K, H] float32 with well-separated cosines; valid [B, S]; length."""
  n = kv * g
  u = rng.normal(size=(b, kv, h))
  u /= np.linalg.norm(u, axis=-1, keepdims=True)
  a = rng.uniform(0.5, 1.5, size=(b, kv, g, 1))
  d = 0.3 * rng.normal(size=(b, kv, g, h))
  d -= d.mean(axis=2, keepdims=True)  # the group mean is exactly a-bar * u
  q = (a * u[:, :, None] + d).reshape(b, n, h)
  units = s if block_size == 0 else -(-s // block_size)
  grid = np.linspace(-0.95, 0.95, max(units, 2))
  c = np.stack([np.stack([rng.permutation(grid)[:units] for _ in range(kv)], -1)
                for _ in range(b)])  # [B, units, K]
  w = rng.normal(size=(b, units, kv, h))
  w -= np.einsum("bukh,bkh->buk", w, u)[..., None] * u[:, None]
  w /= np.maximum(np.linalg.norm(w, axis=-1, keepdims=True), 1e-9)
  r = rng.uniform(0.5, 2.0, size=(b, units, kv, 1))
  base = r * (c[..., None] * u[:, None] + np.sqrt(1 - c[..., None] ** 2) * w)
  if ties and units > 1:
    for _ in range(max(1, units // 4)):
      i, j = rng.choice(units, size=2, replace=False)
      base[:, j] = base[:, i]
  keys = base if block_size == 0 else np.repeat(base, block_size, axis=1)[:, :s]
  pad = rng.integers(0, s // 2 + 1, size=(b, 1))
  valid = np.arange(s)[None] >= pad
  if holes:
    valid &= rng.random((b, s)) < 0.8
  length = rng.integers(0, s + 1, size=(b,))
  return (q.astype(np.float32), keys.astype(np.float32), valid, length.astype(np.int32))


def _cos(x, y):
  """Cosine of x [H] with each row of y [..., H], float64."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  return (y @ x) / (np.linalg.norm(x) * np.linalg.norm(y, axis=-1))


def ref_select(q, keys, valid, length, ns, nr, nsim, block_size=0, num_blocks=0, tol=1e-6):
  """{(b, g): (sink, recent, similar)} lists of cache slots, by explicit sorting in float64.

  Token mode: `similar` is the list. Block mode: `similar` is a list of acceptable lists, one per
  set of candidate blocks that the float32 scores may pick (see `_block_sets`); each is the
  top-nsim remaining tokens of those blocks by their own cosine (ties to the lower slot).
  """
  b, s, kv, _ = keys.shape
  g = q.shape[1] // kv
  out = {}
  for bi in range(b):
    cand = [x for x in range(s) if valid[bi, x] and x < length[bi]]
    sink = cand[:ns]
    recent = [x for x in cand[max(len(cand) - nr, 0):] if x not in sink] if nr else []
    rest = [x for x in cand if x not in sink and x not in recent]
    for gi in range(kv):
      qs = np.asarray(q[bi, gi * g:(gi + 1) * g], np.float64).mean(0)
      tok = _cos(qs, keys[bi, :, gi])  # [S]
      if block_size == 0:
        similar = sorted(rest, key=lambda x: (-tok[x], x))[:nsim]
      else:
        blocks = {}
        for x in rest:
          blocks.setdefault(x // block_size, []).append(x)
        score = {}
        for blk in blocks:
          members = [x for x in cand if x // block_size == blk]
          score[blk] = float(_cos(qs, np.asarray(keys[bi, members, gi], np.float64).sum(0)))
        nsel = min(-(-s // block_size), sparse_kv.candidate_blocks(nsim, block_size, num_blocks))
        ranked = sorted(blocks, key=lambda blk: (-score[blk], blk))
        similar = []
        for chosen in _block_sets(ranked, score, nsel, tol):
          pool = [x for blk in chosen for x in blocks[blk]]
          best = sorted(pool, key=lambda x: (-tok[x], x))[:nsim]
          if best not in similar:
            similar.append(best)
      out[bi, gi] = (sink, recent, similar)
  return out


def _block_sets(ranked, score, nsel, tol=1e-6):
  """Every set of nsel candidate blocks that differs from `ranked[:nsel]` only among blocks
  tied (within tol) with the last one taken.

  A copied block ties exactly in float64, but when the two copies hold different numbers of
  candidates (a block cut by padding or by the cache length) their float32 sums are 2k and 3k,
  which differ in the last bit: either block is then a correct answer. Token mode has no such
  case (its copies are bit-identical), so there the lower-index rule is checked exactly.
  """
  if len(ranked) <= nsel:
    return [ranked]
  edge = score[ranked[nsel - 1]]
  sure = [c for c in ranked if score[c] > edge + tol]
  tied = [c for c in ranked if abs(score[c] - edge) <= tol]
  return [sure + list(c) for c in itertools.combinations(tied, nsel - len(sure))]


def _ranked_alike(got, want, score, tol=1e-5):
  """got equals want up to the order and choice among tokens whose float64 scores are within
  tol (float32 may rank near-ties either way)."""
  return (len(got) == len(want) == len(set(got))
          and all(abs(score[a] - score[w]) <= tol for a, w in zip(got, want)))


def check_selection(q, keys, valid, length, ns, nr, nsim, block_size, num_blocks=0):
  idx, ok = sparse_kv.select_sparse_kv(
      jnp.asarray(q), jnp.asarray(keys), jnp.asarray(valid), jnp.asarray(length),
      num_sink=ns, num_recent=nr, num_similar=nsim, block_size=block_size,
      num_blocks=num_blocks)
  idx, ok = np.asarray(idx), np.asarray(ok)
  b, s, kv, _ = keys.shape
  budget = ns + nr + nsim
  assert idx.dtype == np.int32 and idx.shape == ok.shape == (b, kv, budget)
  assert ((idx >= 0) & (idx < s)).all()
  np.testing.assert_array_equal(idx[~ok], 0)
  ref = ref_select(q, keys, valid, length, ns, nr, nsim, block_size, num_blocks)
  for (bi, gi), (sink, recent, similar) in ref.items():
    cand = [x for x in range(s) if valid[bi, x] and x < length[bi]]
    row, row_ok = idx[bi, gi], ok[bi, gi]
    chosen = row[row_ok].tolist()
    assert len(set(chosen)) == len(chosen), f"duplicates in {chosen}"
    assert set(chosen) <= set(cand)
    assert row[:ns][row_ok[:ns]].tolist() == sink
    assert row[ns:ns + nr][row_ok[ns:ns + nr]].tolist() == recent
    got = row[ns + nr:][row_ok[ns + nr:]].tolist()
    if block_size:  # exact ties (copied keys) may come in either order here; see the header
      g = q.shape[1] // kv
      tok = _cos(q[bi, gi * g:(gi + 1) * g].astype(np.float64).mean(0), keys[bi, :, gi])
      assert any(_ranked_alike(got, want, tok, tol=1e-9) for want in similar), (
          f"{got} not among {similar}")
    else:
      assert got == similar
    assert set(cand[:ns]) | set(cand[max(len(cand) - nr, 0):] if nr else []) <= set(chosen)
    rest = [x for x in cand if x not in sink and x not in recent]
    spanned = len({x // block_size for x in rest}) if block_size else 0
    if len(cand) <= budget and (
        not block_size or spanned <= sparse_kv.candidate_blocks(nsim, block_size, num_blocks)):
      assert sorted(chosen) == cand


@hypothesis.settings(max_examples=30)
@hypothesis.given(
    b=st.integers(1, 3), s=st.integers(1, 96), kv=st.integers(1, 3), g=st.integers(1, 3),
    h=st.integers(2, 16), ns=st.integers(0, 6), nr=st.integers(0, 24), nsim=st.integers(0, 12),
    block_size=st.sampled_from([0, 0, 1, 3, 8]), block_keys=st.booleans(),
    num_blocks=st.sampled_from([0, 1, 2, 3]), ties=st.booleans(), holes=st.booleans(),
    seed=st.integers(0, 2 ** 31 - 1))
def test_selection_properties(b, s, kv, g, h, ns, nr, nsim, block_size, block_keys, num_blocks,
                              ties, holes, seed):
  """num_blocks > 0 shrinks block mode's pool: the default (POOL_KEYS worth) spans these short
  caches whole, where block mode is token mode."""
  rng = np.random.default_rng(seed)
  case = make_case(rng, b, s, kv, g, h, block_size if block_keys else 0, ties, holes)
  check_selection(*case, ns, nr, nsim, block_size, num_blocks)


def test_default_budget_on_a_long_padded_cache(rng):
  for block_size, key_block, num_blocks in ((0, 0, 0), (16, 16, 0), (16, 16, 3), (16, 0, 4),
                                            (64, 0, 0), (64, 0, 2)):
    check_selection(*make_case(rng, 2, 700, 3, 3, 64, key_block, ties=True), 4, 64, 20,
                    block_size, num_blocks)


def test_block_mode_on_random_keys_follows_the_rule(rng):
  """Default budget and block size on random keys, for pools of 2, 4 and the default n_b blocks:
  block mode's similar tokens are exactly the float64 reference of the rule (top blocks by
  block-mean cosine, then top tokens by their own cosine inside them), and every token of the
  exact top-20 that lies in the candidate blocks is selected, so the overlap with the exact
  top-20 is the share of it inside the pool. The overlaps are printed (run with -s): on random
  keys block means carry little signal, so they are about the pool's share of the cache."""
  b, s, kv, g, h, ns, nr, nsim, bs = 2, 2048, 3, 3, 64, 4, 64, 20, 64
  q = rng.normal(size=(b, kv * g, h)).astype(np.float32)
  keys = rng.normal(size=(b, s, kv, h)).astype(np.float32)
  valid = np.ones((b, s), bool)
  length = np.full((b,), s, np.int32)
  kw = dict(num_sink=ns, num_recent=nr, num_similar=nsim)
  args = (jnp.asarray(q), jnp.asarray(keys), jnp.asarray(valid), jnp.asarray(length))
  exact = np.asarray(sparse_kv.select_sparse_kv(*args, **kw, block_size=0)[0])
  ref_token = ref_select(q, keys, valid, length, ns, nr, nsim, 0)
  report = []
  for num_blocks in (2, 4, 0):
    idx, ok = (np.asarray(a) for a in sparse_kv.select_sparse_kv(
        *args, **kw, block_size=bs, num_blocks=num_blocks))
    assert ok.all()
    ref_block = ref_select(q, keys, valid, length, ns, nr, nsim, bs, num_blocks, tol=1e-5)
    nsel = sparse_kv.candidate_blocks(nsim, bs, num_blocks)
    overlaps = []
    for (bi, gi), (sink, recent, options) in ref_block.items():
      qs = q[bi, gi * g:(gi + 1) * g].astype(np.float64).mean(0)
      tok = _cos(qs, keys[bi, :, gi])
      got = idx[bi, gi, ns + nr:].tolist()
      assert any(_ranked_alike(got, want, tok) for want in options), (got, options)
      assert _ranked_alike(exact[bi, gi, ns + nr:].tolist(), ref_token[bi, gi][2], tok)
      top = set(ref_token[bi, gi][2])
      # The pool: the nsel blocks holding remaining slots with the best block-mean cosine.
      ranked_blocks = sorted({x // bs for x in range(s) if x not in sink + recent},
                             key=lambda c: -float(_cos(qs, keys[bi, c * bs:(c + 1) * bs, gi]
                                                       .astype(np.float64).sum(0))))
      in_pool = {x for x in top if x // bs in ranked_blocks[:nsel]}
      assert in_pool <= set(got)
      overlaps.append(len(top & set(got)) / nsim)
      assert overlaps[-1] == len(in_pool) / nsim
    report.append(f"n_b = {nsel}: {np.mean(overlaps):.1%}")
  print(f"block mode vs exact top-{nsim} on random keys, S = {s}, blocks of {bs}, mean overlap "
        f"over {b * kv} (row, group) pairs: " + ", ".join(report))


def test_block_mode_with_every_block_equals_token_mode(rng):
  """With n_b >= C every remaining token is in the pool: block mode is token mode."""
  for holes in (False, True):
    q, keys, valid, length = make_case(rng, 2, 300, 3, 3, 32, holes=holes)
    args = (jnp.asarray(q), jnp.asarray(keys), jnp.asarray(valid), jnp.asarray(length))
    kw = dict(num_sink=3, num_recent=20, num_similar=15)
    token = sparse_kv.select_sparse_kv(*args, **kw)
    block = sparse_kv.select_sparse_kv(*args, **kw, block_size=16, num_blocks=19)
    for got, want in zip(block, token):
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_block_mode_ranks_tokens_inside_the_best_blocks():
  """Two blocks of 4: the block means favour block 1, whose best token is slot 6; block 0's
  best single token (slot 1) is the most similar of all but is not in the chosen block. Equal
  cosines inside the chosen block go to the lower slot."""
  h = 2
  q = np.array([[[1.0, 0.0]]], np.float32)
  keys = np.zeros((1, 8, 1, h), np.float32)
  keys[0, :4, 0] = [[0.0, 1.0], [1.0, 0.0], [-1.0, 0.1], [0.0, -1.0]]  # mean ~ (0, 0.025)
  keys[0, 4:, 0] = [[0.6, 0.8], [0.6, -0.8], [0.8, 0.6], [0.6, 0.8]]  # cosines .6 .6 .8 .6
  idx, ok = sparse_kv.select_sparse_kv(jnp.asarray(q), jnp.asarray(keys), jnp.ones((1, 8), bool),
                                       8, num_sink=0, num_recent=0, num_similar=3, block_size=4,
                                       num_blocks=1)
  assert np.asarray(ok).all()
  assert np.asarray(idx)[0, 0].tolist() == [6, 4, 5]
  token = sparse_kv.select_sparse_kv(jnp.asarray(q), jnp.asarray(keys), jnp.ones((1, 8), bool),
                                     8, num_sink=0, num_recent=0, num_similar=3)
  assert np.asarray(token[0])[0, 0].tolist() == [1, 6, 4]


def test_short_cache_selects_every_candidate(rng):
  q, keys, valid, _ = make_case(rng, 2, 120, 3, 3, 16)
  length = np.array([50, 120], np.int32)
  valid[1, :40] = False  # 80 candidates: fewer than the 88 budget
  idx, ok = sparse_kv.select_sparse_kv(jnp.asarray(q), jnp.asarray(keys), jnp.asarray(valid),
                                       jnp.asarray(length), num_sink=4, num_recent=64,
                                       num_similar=20)
  for bi in range(2):
    cand = np.flatnonzero(valid[bi] & (np.arange(120) < length[bi])).tolist()
    for gi in range(3):
      assert sorted(np.asarray(idx)[bi, gi][np.asarray(ok)[bi, gi]].tolist()) == cand


def test_equal_similarity_goes_to_the_lower_index():
  h = 4
  q = np.zeros((1, 1, h), np.float32)
  q[0, 0, 0] = 1.0
  keys = np.tile(np.array([0.0, 1.0, 0.0, 0.0], np.float32), (1, 12, 1, 1))
  keys[0, [3, 6, 9], 0] = [1.0, 0.0, 0.0, 0.0]  # three equally most similar slots
  idx, ok = sparse_kv.select_sparse_kv(jnp.asarray(q), jnp.asarray(keys), jnp.ones((1, 12), bool),
                                       12, num_sink=1, num_recent=1, num_similar=2)
  assert np.asarray(ok).all()
  assert np.asarray(idx)[0, 0].tolist() == [0, 11, 3, 6]


def test_gather_kv_takes_each_groups_own_tokens(rng):
  b, s, kv, h, i = 2, 30, 3, 8, 7
  ck = rng.normal(size=(b, s, kv, h)).astype(np.float32)
  cv = rng.normal(size=(b, s, kv, h)).astype(np.float32)
  idx = rng.integers(0, s, size=(b, kv, i)).astype(np.int32)
  k_sel, v_sel = sparse_kv.gather_kv(jnp.asarray(ck), jnp.asarray(cv), jnp.asarray(idx))
  want_k = np.empty((b, i, kv, h), np.float32)
  want_v = np.empty((b, i, kv, h), np.float32)
  for bi in range(b):
    for gi in range(kv):
      for j in range(i):
        want_k[bi, j, gi] = ck[bi, idx[bi, gi, j], gi]
        want_v[bi, j, gi] = cv[bi, idx[bi, gi, j], gi]
  np.testing.assert_array_equal(np.asarray(k_sel), want_k)
  np.testing.assert_array_equal(np.asarray(v_sel), want_v)
  stacked_k = jnp.stack([jnp.zeros_like(jnp.asarray(ck)), jnp.asarray(ck)])  # [L=2, B, S, K, H]
  stacked_v = jnp.stack([jnp.zeros_like(jnp.asarray(cv)), jnp.asarray(cv)])
  k_l, v_l = sparse_kv.gather_kv(stacked_k, stacked_v, jnp.asarray(idx), jnp.int32(1))
  np.testing.assert_array_equal(np.asarray(k_l), want_k)
  np.testing.assert_array_equal(np.asarray(v_l), want_v)


def test_incremental_block_summaries_equal_recomputed_ones(rng):
  b, s, kv, h, bs = 3, 45, 2, 8, 8
  keys = rng.normal(size=(b, s, kv, h)).astype(np.float32)
  valid = np.arange(s)[None] >= np.array([[0], [5], [17]])
  prompt = 20
  sums, counts = sparse_kv.block_summaries(jnp.asarray(keys), jnp.asarray(valid), prompt, bs)
  for pos in range(prompt, s):
    sums, counts = sparse_kv.update_block_summaries(
        sums, counts, jnp.asarray(keys[:, pos]), pos, jnp.asarray(valid[:, pos]), block_size=bs)
  want_sums, want_counts = sparse_kv.block_summaries(
      jnp.asarray(keys), jnp.asarray(valid), s, bs)
  np.testing.assert_array_equal(np.asarray(counts), np.asarray(want_counts))
  np.testing.assert_allclose(np.asarray(sums), np.asarray(want_sums), atol=1e-5, rtol=0)
  brute = np.zeros_like(np.asarray(want_sums))
  for x in range(s):
    brute[:, x // bs] += np.where(valid[:, x, None, None], keys[:, x], 0)
  np.testing.assert_allclose(np.asarray(sums), brute, atol=1e-5, rtol=0)
  q = jnp.asarray(rng.normal(size=(b, 2 * kv, h)).astype(np.float32))
  given = sparse_kv.select_sparse_kv(q, jnp.asarray(keys), jnp.asarray(valid), s, num_sink=2,
                                     num_recent=4, num_similar=10, block_size=bs,
                                     block_sums=sums, block_counts=counts)
  inner = sparse_kv.select_sparse_kv(q, jnp.asarray(keys), jnp.asarray(valid), s, num_sink=2,
                                     num_recent=4, num_similar=10, block_size=bs)
  shared = sparse_kv.select_sparse_kv(
      q, jnp.asarray(keys), jnp.asarray(valid), s, num_sink=2, num_recent=4, num_similar=10,
      block_size=bs, block_sums=sums, block_counts=counts,
      positional=sparse_kv.positional_selection(jnp.asarray(valid), s, num_sink=2,
                                                num_recent=4, block_size=bs))
  for got in (given, shared):
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(inner[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(inner[1]))


def torch_attention(q, sets):
  """q [B, N, H] one decoding step; sets: (k [B, S, K, H], v, mask [B, K, S]); 0 if no key."""
  q = torch.as_tensor(q)
  k = torch.cat([torch.as_tensor(x[0]) for x in sets], dim=1)
  v = torch.cat([torch.as_tensor(x[1]) for x in sets], dim=1)
  mask = torch.cat([torch.as_tensor(np.array(x[2])) for x in sets], dim=-1)
  g = q.shape[1] // k.shape[2]
  k = k.repeat_interleave(g, dim=2)  # [B, S, N, H]
  v = v.repeat_interleave(g, dim=2)
  mask = mask.repeat_interleave(g, dim=1)  # [B, N, S]
  scores = torch.einsum("bnh,bsnh->bns", q, k) / math.sqrt(q.shape[-1])
  probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
  return torch.einsum("bns,bsnh->bnh", probs, v).numpy()


@pytest.mark.parametrize("block_size", [0, 16])
def test_sparse_decode_step_matches_torch(block_size, rng):
  """Selection + gather + joint attention over [prefix; slots; I_t] vs torch: the reference
  selects by explicit sorting and attends by the formula."""
  b, s, kv, g, h, p, m = 3, 300, 3, 3, 64, 32, 4
  q, keys, valid, length = make_case(rng, b, s, kv, g, h, block_size)
  length = np.array([300, 260, 95], np.int32)
  valid = np.arange(s)[None] >= np.array([[0], [37], [5]])
  values = rng.normal(size=keys.shape).astype(np.float32)
  pk, pv = (rng.normal(size=(b, p, kv, h)).astype(np.float32) for _ in range(2))
  mk, mv = (rng.normal(size=(b, m, kv, h)).astype(np.float32) for _ in range(2))
  prefix_mask = np.arange(p)[None] >= np.array([[0], [10], [31]])
  slot_mask = rng.random((b, 1, m)) < 0.6
  slot_mask[1] = False  # a row with every slot masked
  idx, ok = sparse_kv.select_sparse_kv(jnp.asarray(q), jnp.asarray(keys), jnp.asarray(valid),
                                       jnp.asarray(length), num_sink=4, num_recent=64,
                                       num_similar=20, block_size=block_size)
  k_sel, v_sel = sparse_kv.gather_kv(jnp.asarray(keys), jnp.asarray(values), idx)
  out = joint_attention(jnp.asarray(q)[:, None], jnp.asarray(pk), jnp.asarray(pv),
                        jnp.asarray(prefix_mask), jnp.asarray(mk), jnp.asarray(mv),
                        jnp.asarray(slot_mask), k_sel, v_sel, ok[:, :, None, :])[:, 0]

  ref = ref_select(q, keys, valid, length, 4, 64, 20, block_size)
  self_mask = np.zeros((b, kv, s), bool)
  idx_np, ok_np = np.asarray(idx), np.asarray(ok)
  for (bi, gi), (sink, recent, similar) in ref.items():
    if block_size:  # the reference order among tied blocks that the selection agrees with
      got = idx_np[bi, gi, 68:][ok_np[bi, gi, 68:]].tolist()
      similar = got if got in similar else similar[0]
    self_mask[bi, gi, sink + recent + similar] = True
  want = torch_attention(q, [
      (pk, pv, np.broadcast_to(prefix_mask[:, None], (b, kv, p))),
      (mk, mv, np.broadcast_to(slot_mask, (b, kv, m))),
      (keys, values, self_mask)])
  assert np.isfinite(np.asarray(out)).all()
  np.testing.assert_allclose(np.asarray(out), want, atol=1e-5, rtol=0)


def test_bad_inputs_name_the_input():
  q = jnp.zeros((2, 6, 8))
  keys = jnp.zeros((2, 40, 3, 8))
  valid = jnp.ones((2, 40), bool)
  kw = dict(num_sink=2, num_recent=4, num_similar=4)
  with pytest.raises(ValueError, match="valid must be"):
    sparse_kv.select_sparse_kv(q, keys, valid[:, :30], 40, **kw)
  with pytest.raises(ValueError, match="length must be"):
    sparse_kv.select_sparse_kv(q, keys, valid, jnp.array([1, 2, 3]), **kw)
  with pytest.raises(ValueError, match="multiple"):
    sparse_kv.select_sparse_kv(q[:, :5], keys, valid, 40, **kw)
  with pytest.raises(ValueError, match="budgets must be >= 0"):
    sparse_kv.select_sparse_kv(q, keys, valid, 40, num_sink=-1, num_recent=4, num_similar=4)
  sums, counts = sparse_kv.block_summaries(keys, valid, 40, 8)
  with pytest.raises(ValueError, match="needs 10"):
    sparse_kv.select_sparse_kv(q, keys, valid, 40, **kw, block_size=4, block_sums=sums,
                               block_counts=counts)
  with pytest.raises(ValueError, match="new_k must be"):
    sparse_kv.update_block_summaries(sums, counts, jnp.zeros((2, 8)), 3, block_size=8)
  with pytest.raises(ValueError, match="positional has"):
    sparse_kv.select_sparse_kv(q, keys, valid, 40, **kw, positional=sparse_kv.positional_selection(
        valid, 40, num_sink=3, num_recent=4))
  with pytest.raises(ValueError, match="computed without block_size"):
    sparse_kv.select_sparse_kv(q, keys, valid, 40, **kw, block_size=8, block_sums=sums,
                               block_counts=counts, positional=sparse_kv.positional_selection(
                                   valid, 40, num_sink=2, num_recent=4))
  with pytest.raises(ValueError, match="idx must be"):
    sparse_kv.gather_kv(keys, keys, jnp.zeros((2, 5), jnp.int32))
