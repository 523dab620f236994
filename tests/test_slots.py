"""HieraSlot bank construction, projection and the fusion prefix vs PyTorch references."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from graphloom_jax.models import fusion, slots


class HashEmbed:
  """A deterministic fake embedder: one random unit vector per distinct text; counts calls."""

  def __init__(self, dim=12):
    self.dim, self.table, self.calls = dim, {}, 0

  def vec(self, text):
    if text not in self.table:
      rng = np.random.default_rng(abs(hash(("hash-embed", text))) % 2**32)
      v = rng.standard_normal(self.dim)
      self.table[text] = (v / np.linalg.norm(v)).astype(np.float32)
    return self.table[text]

  def __call__(self, texts):
    self.calls += 1
    return np.stack([self.vec(t) for t in texts])


TRIPLES = [
    dict(subject="cup", relation="on", object="table", score=0.9, conf_ext=0.8, centrality=0.5),
    dict(subject="Table", relation="in", object="kitchen", score=0.7, conf_ext=1.0, centrality=1.0),
    dict(subject="man", relation="holding", object="cup", score=0.4, conf_ext=0.6, centrality=0.2),
]


def torch_bank(triples, emb, bank_size, question, gold):
  """Reference: the documented layout written out slot by slot."""
  n = bank_size // 2
  triples = sorted(enumerate(triples), key=lambda it: -it[1]["score"])[:n]
  keys = torch.zeros(bank_size, emb.dim)
  values = torch.zeros(bank_size, emb.dim)
  feats = torch.zeros(bank_size, 5)
  util = torch.zeros(bank_size)
  q = " " + " ".join(re.findall(r"\w+", question.lower())) + " "
  gold = {tuple(" ".join(g[f].lower().split()) for f in ("subject", "relation", "object"))
          for g in gold}
  for j, (_, t) in enumerate(triples):
    s, r, o = t["subject"], t["relation"], t["object"]
    u = float((s.lower(), r.lower(), o.lower()) in gold)
    for p, k, v, e in ((j, s, f"{r} {o}", 1.0), (n + j, r, f"{s} {o}", 0.0)):
      keys[p] = torch.tensor(emb.vec(k))
      values[p] = torch.tensor(emb.vec(v))
      feats[p] = torch.tensor([t["score"], t["conf_ext"], t["centrality"],
                               float(f" {k.lower()} " in q), e])
      util[p] = u
  return keys, values, feats, util


@pytest.mark.parametrize("bank_size", [8, 4])
def test_bank_matches_reference(bank_size):
  emb = HashEmbed()
  question = "Where is the table that the cup is on?"
  gold = [dict(subject="cup", relation="on", object="TABLE")]
  bank = slots.build_bank(TRIPLES, emb, bank_size, question=question, gold=gold)
  keys, values, feats, util = torch_bank(TRIPLES, emb, bank_size, question, gold)
  np.testing.assert_allclose(bank.keys, keys.numpy(), atol=1e-7)
  np.testing.assert_allclose(bank.values, values.numpy(), atol=1e-7)
  np.testing.assert_allclose(bank.features, feats.numpy(), atol=1e-7)
  np.testing.assert_array_equal(bank.utility, util.numpy())
  n = bank_size // 2
  kept = min(n, len(TRIPLES))
  np.testing.assert_array_equal(bank.valid, np.r_[np.arange(n) < kept, np.arange(n) < kept])
  np.testing.assert_array_equal(bank.is_entity, np.arange(bank_size) < n)
  assert emb.calls == 1  # one embedder call for all unique texts
  if bank_size == 4:  # only the two best-scored triples survive
    np.testing.assert_array_equal(bank.triple_index, [0, 1, 0, 1])
  # "table" and "on" occur in the question, "in" does not (word-boundary match)
  assert bank.features[0, 3] == 1.0 and bank.features[n, 3] == 1.0 and bank.features[n + 1, 3] == 0


def test_bank_key_tokens_for_the_mention_feature():
  words = {}
  tokenize = lambda text: [words.setdefault(w, len(words)) for w in text.split()]
  bank = slots.build_bank(TRIPLES, HashEmbed(), 8, tokenize=tokenize)
  w = slots.MENTION_TOKENS
  n = 4
  for j, t in enumerate(TRIPLES[:n]):
    for p, key in ((j, t["subject"]), (n + j, t["relation"])):
      ids = tokenize(" " + key)[-w:]
      np.testing.assert_array_equal(bank.key_tokens[p], [-1] * (w - len(ids)) + ids)
  np.testing.assert_array_equal(bank.key_tokens[~bank.valid], -1)
  long = slots.key_token_row("a b c d e f g h i j", tokenize)  # the last W tokens are kept
  np.testing.assert_array_equal(long, tokenize("c d e f g h i j"))
  assert (slots.build_bank(TRIPLES, HashEmbed(), 8).key_tokens == -1).all()  # no tokenizer


def test_bank_value_tokens_for_token_values():
  words = {}
  tokenize = lambda text: [words.setdefault(w, len(words)) for w in text.split()]
  bank = slots.build_bank(TRIPLES, HashEmbed(), 8, tokenize=tokenize)
  v, n = slots.VALUE_TOKENS, 4
  for j, t in enumerate(TRIPLES[:n]):
    for p, value in ((j, f"{t['relation']} {t['object']}"), (n + j, f"{t['subject']} "
                                                               f"{t['object']}")):
      ids = tokenize(" " + value)[-v:]
      np.testing.assert_array_equal(bank.value_tokens[p], [-1] * (v - len(ids)) + ids)
  np.testing.assert_array_equal(bank.value_tokens[~bank.valid], -1)
  assert (slots.build_bank(TRIPLES, HashEmbed(), 8).value_tokens == -1).all()


def test_bank_bad_inputs_name_the_triple():
  emb = HashEmbed()
  bad = [dict(TRIPLES[0]), dict(TRIPLES[1], conf_ext=1.5)]
  with pytest.raises(ValueError, match=r"triple 1: conf_ext=1.5"):
    slots.build_bank(bad, emb, 8)
  missing = [dict(subject="a", relation="b", object="c", score=0.5, conf_ext=0.5)]
  with pytest.raises(KeyError, match=r"triple 0 .* 'centrality'"):
    slots.build_bank(missing, emb, 8)
  with pytest.raises(ValueError, match="bank_size=7"):
    slots.build_bank(TRIPLES, emb, 7)
  with pytest.raises(ValueError, match="embed returned shape"):
    slots.build_bank(TRIPLES, lambda texts: np.zeros((1, 3)), 8)


def test_empty_bank_and_stack():
  emb = HashEmbed()
  empty = slots.build_bank([], emb, 6)
  full = slots.build_bank(TRIPLES, emb, 6)
  assert not empty.valid.any() and empty.keys.shape == (6, emb.dim)
  batch = slots.stack_banks([empty, full])
  assert batch["keys"].shape == (2, 6, emb.dim) and batch["valid"].sum() == 6
  with pytest.raises(ValueError, match="differ in shape"):
    slots.stack_banks([empty, slots.build_bank(TRIPLES, emb, 8)])


def test_projection_matches_torch():
  proj = slots.SlotProjection(12, 20, rngs=nnx.Rngs(1))
  assert proj.down is None
  rng = np.random.default_rng(0)
  k = rng.standard_normal((2, 6, 12)).astype(np.float32)
  v = rng.standard_normal((2, 6, 12)).astype(np.float32)
  valid = rng.uniform(size=(2, 6)) < 0.7
  pk, pv = proj(jnp.asarray(k), jnp.asarray(v), jnp.asarray(valid))
  lin = torch.nn.Linear(12, 20)
  with torch.no_grad():
    lin.weight.copy_(torch.tensor(np.asarray(proj.proj.kernel[...]).T))
    lin.bias.copy_(torch.tensor(np.asarray(proj.proj.bias[...])))
    m = torch.tensor(valid)[..., None].float()
    np.testing.assert_allclose(np.asarray(pk), (lin(torch.tensor(k)) * m).numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(pv), (lin(torch.tensor(v)) * m).numpy(), atol=1e-5)


def test_low_rank_projection_matches_torch():
  proj = slots.SlotProjection(12, 20, rank=3, rngs=nnx.Rngs(1))
  rng = np.random.default_rng(4)
  k = rng.standard_normal((2, 6, 12)).astype(np.float32)
  valid = np.ones((2, 6), bool)
  pk, _ = proj(jnp.asarray(k), jnp.asarray(k), jnp.asarray(valid))
  T = lambda x: torch.tensor(np.asarray(x))
  want = T(k) @ T(proj.down.kernel[...]) @ T(proj.proj.kernel[...]) + T(proj.proj.bias[...])
  np.testing.assert_allclose(np.asarray(pk), want.numpy(), atol=1e-5)
  assert sum(x.size for x in jax.tree.leaves(nnx.state(proj, nnx.Param))) == 12 * 3 + 3 * 20 + 20
  with pytest.raises(ValueError, match="rank=-1"):
    slots.SlotProjection(12, 20, rank=-1, rngs=nnx.Rngs(1))


@pytest.mark.parametrize("num_layers", [0, 3])
def test_fusion_prefix_matches_torch(num_layers):
  b, r, i, e, q, d, p, c = 2, 5, 7, 12, 4, 16, 3, 8
  mod = fusion.FusionPrefix(i, e, d, p, fusion_dim=c, num_layers=num_layers, rngs=nnx.Rngs(2))
  rng = np.random.default_rng(1)
  img = rng.standard_normal((b, r, i)).astype(np.float32)
  img_mask = np.array([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0]], bool)
  ques = rng.standard_normal((b, e)).astype(np.float32)
  ev = rng.standard_normal((b, q, e)).astype(np.float32)
  ev_mask = np.array([[1, 0, 1, 1], [1, 1, 0, 0]], bool)
  prefix, mask = mod(*(jnp.asarray(x) for x in (img, img_mask, ques, ev, ev_mask)))

  T = lambda x: torch.tensor(np.asarray(x))
  lin = lambda x, m: T(x) @ T(m.kernel[...]) + T(m.bias[...])
  te = T(mod.type_embed[...])
  tokens = torch.cat([lin(img, mod.image_in) + te[0], lin(ques, mod.text_in)[:, None] + te[1],
                      lin(ev, mod.text_in) + te[2]], 1)
  msk = torch.cat([T(img_mask), torch.ones(b, 1, dtype=torch.bool), T(ev_mask)], 1)
  qs = T(mod.queries[...])
  logits = torch.einsum("pc,bsc->bps", qs, tokens) / math.sqrt(c)
  logits = logits.masked_fill(~msk[:, None], float("-inf"))
  ctx = torch.softmax(logits, -1) @ tokens
  want = torch.tanh(ctx + qs) @ T(mod.out.kernel[...]) + T(mod.out.bias[...])
  if num_layers:
    want = want[None] * T(mod.layer_gain[...])[:, None, None] + T(mod.layer_offset[...])[
        :, None, None]
    assert prefix.shape == (num_layers, b, p, d)
  np.testing.assert_allclose(np.asarray(prefix), want.numpy(), atol=1e-5)
  assert np.asarray(mask).all()
