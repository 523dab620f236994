"""Variable-length training rows: `trim_batch` cuts a batch to its power-of-two length bucket
without changing the step's values (train and validation steps on full and trimmed batches
agree), and length-grouped batches cover every example once per epoch with less padding than
plain shuffling."""

import jax
import numpy as np
import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import scenekb
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import GraphLoom, prompts
from graphloom_jax.training import data, trainer

from fakes import HashEmbed


@pytest.mark.parametrize("n,smallest,want", [(1, 64, 64), (64, 64, 64), (65, 64, 128),
                                             (300, 64, 512), (5, 8, 8), (9, 8, 16)])
def test_power_bucket(n, smallest, want):
  assert prompts.power_bucket(n, smallest) == want


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  cfg = tiny.get_config()
  cfg.train.seq_len = 512  # far longer than the tiny config's rows: most of a row is padding
  cfg.train.batch_size = 4
  cfg.train.grad_accum = 1
  cfg.train.eval_examples = 4
  dec = decoder_lib.from_config(cfg.model)
  train_kb, val_kb = scenekb.load("train", root=scenekb.V1_FOLDER), scenekb.load("validation", root=scenekb.V1_FOLDER)
  system = GraphLoom(cfg, dec, HashEmbed(), kb_sources=[train_kb.kb_source()])
  tr = data.featurize(system, train_kb, train_kb.questions[:12], cfg.train.seq_len)
  va = data.featurize(system, val_kb, val_kb.questions[:4], cfg.train.seq_len)
  t = trainer.Trainer(cfg, dec.model, tr, va, tmp_path_factory.mktemp("run"), progress=False,
                      log=lambda *_: None)
  yield t, tr, va
  t.close()


def test_trimmed_batches_compute_the_same_steps(setup):
  t, tr, va = setup
  full = {k: v[:4] for k, v in tr.items()}
  cut = data.trim_batch(full)
  length = cut["tokens"].shape[1]
  assert length < 512 and length == prompts.power_bucket(int(data.row_lengths(full).max()))
  assert cut["mc_tokens"].shape[-1] == length and cut["slot_utility"].shape == \
      full["slot_utility"].shape
  _assert_same_steps(t, [(full, 0, full), (cut, 0, cut)])


def _assert_same_steps(t, runs):
  """A train step (from the trainer's params) and an eval step for each (train batch,
  answer_steps, eval batch) of `runs` give the same metrics, updated params and outputs."""
  kw = dict(heads_def=t.heads_def, backbone_def=t.backbone_def, first_layer=t.first_layer)
  outs = []
  for batch, width, eval_batch in runs:
    params = jax.tree.map(lambda x: x.copy(), t.params)
    opt = jax.tree.map(lambda x: x.copy(), t.opt_state)
    new, _, metrics = trainer.train_step(params, opt, t.rest, t.backbone_state, batch, h=t.h,
                                         answer_steps=width, **kw)
    ev = trainer.eval_step(t.params, t.rest, t.backbone_state, eval_batch, answer_steps=width,
                           **kw)
    outs.append(jax.device_get((jax.tree.leaves(new), metrics, ev)))
  (p_ref, m_ref, e_ref), (p_got, m_got, e_got) = outs
  for k in m_ref:
    np.testing.assert_allclose(m_got[k], m_ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
  for a, b in zip(p_got, p_ref):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for k in e_ref:
    np.testing.assert_allclose(e_got[k], e_ref[k], rtol=1e-5, atol=1e-5, err_msg=k)
  return m_ref


def test_trainer_with_length_buckets_evaluates_the_same(setup):
  t, _, va = setup
  plain = t.evaluate(va)
  t.config.train.length_buckets = True
  try:
    bucketed = t.evaluate(va)
  finally:
    t.config.train.length_buckets = False
  assert bucketed.keys() == plain.keys()
  for k in plain:
    assert bucketed[k] == pytest.approx(plain[k], rel=1e-5, abs=1e-6), k


def _arrays(lengths, s=64):
  valid = np.arange(s)[None] < np.asarray(lengths)[:, None]
  return {"tokens": np.where(valid, 7, 0).astype(np.int32), "valid": valid,
          "id": np.arange(len(lengths))}


@pytest.mark.parametrize("seed", range(5))
def test_length_grouped_batches_cover_each_epoch_with_less_padding(seed):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, 64, size=22)
  arrays = _arrays(lengths)
  batch, per_epoch = 4, 22 // 4
  grouped = data.batches(arrays, batch, seed, group_by_length=per_epoch)
  for epoch in range(3):
    ids = np.concatenate([grouped[epoch * per_epoch + k]["id"] for k in range(per_epoch)])
    assert len(set(ids)) == per_epoch * batch  # each example at most once per epoch
    # one chunk holds the whole epoch: sorted batches minimise the summed batch maxima over
    # every way of cutting these examples into batches, a random cut included
    waste = lambda b: int(lengths[b["id"]].max())
    rows = [grouped[epoch * per_epoch + k] for k in range(per_epoch)]
    sorted_cut = sorted(lengths[ids], reverse=True)
    assert sum(map(waste, rows)) == sum(sorted_cut[::batch])
    random_cut = np.split(rng.permutation(ids), per_epoch)
    assert sum(map(waste, rows)) <= sum(int(lengths[c].max()) for c in random_cut)
  # deterministic in the seed, a new order every epoch
  again = data.batches(arrays, batch, seed, group_by_length=per_epoch)
  assert all((again[i]["id"] == grouped[i]["id"]).all() for i in range(3 * per_epoch))
  assert any((grouped[i]["id"] != grouped[i + per_epoch]["id"]).any() for i in range(per_epoch))
  with pytest.raises(ValueError, match="group_by_length must be >= 0"):
    data.batches(arrays, batch, seed, group_by_length=-1)


def test_answer_steps_and_window_cover_every_answer_step():
  mask = np.zeros((3, 40), bool)
  mask[0, 5:8] = True  # 3 steps
  mask[1, 20:29] = True  # 9 steps
  assert data.answer_steps({"loss_mask": mask}) == 16
  assert data.answer_steps({"loss_mask": mask[:1]}) == 8
  assert data.answer_steps({"loss_mask": mask[:, :6]}) == 6  # at most S
  at = np.asarray(trainer.answer_window(mask, 16))
  np.testing.assert_array_equal(at[0], np.arange(5, 21))
  np.testing.assert_array_equal(at[1], np.minimum(np.arange(20, 36), 39))
  np.testing.assert_array_equal(at[2], np.arange(16))  # no answer: a window of non-steps
  for row, pos in zip(mask, at):  # every answer step is in the window, once
    assert sorted(set(pos[row[pos]])) == list(np.flatnonzero(row))
    assert row[pos].sum() == row.sum()


def test_answer_window_steps_compute_the_same_values(setup):
  """Logits over the answer window only (train_step / eval_step `answer_steps`) give the same
  loss, gradients, update and validation outputs as logits over every position."""
  t, tr, _ = setup
  batch = data.trim_batch({k: v[4:8] for k, v in tr.items()})
  window = data.answer_steps(tr)
  assert window < batch["tokens"].shape[1]
  assert t.answer_steps == window  # what the trainer's own steps use
  open_rows = {k: v for k, v in batch.items() if not k.startswith("mc_")}  # greedy_match
  metrics = _assert_same_steps(t, [(batch, 0, open_rows), (batch, window, open_rows)])
  assert metrics["gen"] > 0


def test_logits_at_gathers_the_full_logits(setup):
  t, tr, _ = setup
  from flax import nnx
  from graphloom_jax.models import llama
  model = nnx.merge(t.backbone_def, t.backbone_state)
  tokens = tr["tokens"][:2, :64]
  at = np.array([[3, 7, 63], [0, 0, 10]])
  cache = llama.KVCache.init(model.config, 2, 64, model.dtype)
  full, _, _ = model(tokens, cache)
  part, _, _ = model(tokens, cache, logits_at=at)
  assert part.shape == (2, 3, full.shape[-1])
  np.testing.assert_allclose(part, np.take_along_axis(np.asarray(full), at[..., None], axis=1),
                             rtol=1e-5, atol=1e-5)
