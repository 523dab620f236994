"""The trainer's contrastive terms.

The options' loss (config.train.loss_weights.opt): options scored as continuations of the prompt
their question's row read equal the full option rows' scores (with each question's own and with
another question's evidence), the step's L_opt is the cross-entropy (PyTorch) of the validation
step's option scores, the weight enters the loss and the update, and a run on open-answer data
is refused with the config key named.

The evidence loss (config.train.loss_weights.ev): the step's L_ev is softplus of the gap
between the gold answer's mean log-likelihood with the previous row's subgraph and with the
row's own (PyTorch, from the logits of two plain forwards), only the subgraph's arrays move,
the weight enters the loss and the update, and adapters or single-row batches are refused."""

import dataclasses

import jax
import numpy as np
import pytest
import torch

from graphloom_jax.configs import tiny
from graphloom_jax.data import scenekb
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import GraphLoom
from graphloom_jax.training import data, trainer

from fakes import HashEmbed


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  cfg = tiny.get_config()
  cfg.train.batch_size = 4
  cfg.train.grad_accum = 1
  cfg.train.eval_examples = 4
  dec = decoder_lib.from_config(cfg.model)
  train_kb = scenekb.load("train", root=scenekb.V1_FOLDER)
  val_kb = scenekb.load("validation", root=scenekb.V1_FOLDER)
  system = GraphLoom(cfg, dec, HashEmbed(), kb_sources=[train_kb.kb_source()])
  tr = data.featurize(system, train_kb, train_kb.questions[:8], cfg.train.seq_len)
  va = data.featurize(system, val_kb, val_kb.questions[:4], cfg.train.seq_len)
  t = trainer.Trainer(cfg, dec.model, tr, va, tmp_path_factory.mktemp("run"), progress=False,
                      log=lambda *_: None)
  yield cfg, dec, t, tr, va
  t.close()


def _kw(t):
  return dict(heads_def=t.heads_def, backbone_def=t.backbone_def, first_layer=t.first_layer)


def _train(t, batch, h, **kw):
  params = jax.tree.map(lambda x: x.copy(), t.params)
  opt = jax.tree.map(lambda x: x.copy(), t.opt_state)
  new, _, metrics = trainer.train_step(params, opt, t.rest, t.backbone_state, batch, h=h,
                                       **_kw(t), **kw)
  return jax.device_get((jax.tree.leaves(new), metrics))


def test_option_steps_width():
  mask = np.zeros((2, 3, 40), bool)
  mask[0, 1, 10:13] = True
  mask[1, 2, 20:29] = True  # 9 option tokens
  assert data.option_steps({"mc_option_mask": mask}) == 16
  assert data.option_steps({"mc_option_mask": mask[:1]}) == 8
  assert data.option_steps({"loss_mask": mask[:, 0]}) == 0  # open answers: no option rows


def test_option_continuations_give_the_full_rows_scores(setup):
  _, _, t, tr, _ = setup
  batch = {k: v[:4] for k, v in tr.items()}
  width = data.option_steps(tr)
  assert 0 < width < batch["mc_tokens"].shape[-1]
  assert t.option_steps == width
  full = trainer.eval_step(t.params, t.rest, t.backbone_state, batch, **_kw(t))
  part = trainer.eval_step(t.params, t.rest, t.backbone_state, batch, option_steps=width,
                           **_kw(t))
  np.testing.assert_allclose(part["option_scores"], full["option_scores"], rtol=1e-5,
                             atol=1e-5)
  # another question's evidence: the continuations read the memory as the full rows do
  rolled = {k: (v if k in ("tokens", "valid", "output_mask", "targets", "loss_mask")
                or k.startswith("mc_") or k == "answer_index" else np.roll(v, 1, axis=0))
            for k, v in batch.items()}
  full_r = trainer.eval_step(t.params, t.rest, t.backbone_state, rolled, **_kw(t))
  part_r = trainer.eval_step(t.params, t.rest, t.backbone_state, rolled, option_steps=width,
                             **_kw(t))
  np.testing.assert_allclose(part_r["option_scores"], full_r["option_scores"], rtol=1e-5,
                             atol=1e-5)
  moved = np.asarray(full_r["option_scores"]) - np.asarray(full["option_scores"])
  assert np.abs(moved).max() > 1e-3
  # continuations that run past the end of the rows (clipped positions) count each token once
  cut = data.trim_batch(batch)
  wide = trainer.eval_step(t.params, t.rest, t.backbone_state, cut,
                           option_steps=cut["tokens"].shape[1], **_kw(t))
  np.testing.assert_allclose(wide["option_scores"], full["option_scores"], rtol=1e-5,
                             atol=1e-5)


def test_option_loss_in_the_train_step(setup):
  _, _, t, tr, _ = setup
  batch = {k: v[4:8] for k, v in tr.items()}
  assert t.h.w_opt == 0.0  # off by default: the step reports 0 and runs no option rows
  h = dataclasses.replace(t.h, warmup_steps=0)  # a first step that moves the params
  p_off, m_off = _train(t, batch, h, answer_steps=t.answer_steps)
  assert float(m_off["opt"]) == 0.0

  h = dataclasses.replace(h, w_opt=2.0)
  p_on, m_on = _train(t, batch, h, answer_steps=t.answer_steps, option_steps=t.option_steps)
  # L_opt is the cross-entropy of the validation step's option scores (full rows, before the
  # update), computed here with PyTorch
  ev = trainer.eval_step(t.params, t.rest, t.backbone_state, batch, **_kw(t))
  want = torch.nn.functional.cross_entropy(torch.tensor(np.asarray(ev["option_scores"])),
                                           torch.tensor(batch["answer_index"]).long())
  np.testing.assert_allclose(float(m_on["opt"]), want.item(), rtol=1e-5, atol=1e-6)
  assert float(m_on["opt"]) > 0
  np.testing.assert_allclose(float(m_on["loss"]), float(m_off["loss"]) + 2.0 * want.item(),
                             rtol=1e-5, atol=1e-5)
  for k in ("gen", "cal", "cf", "align"):  # the other terms are untouched
    np.testing.assert_allclose(float(m_on[k]), float(m_off[k]), rtol=1e-5, atol=1e-6)
  # the untrained heads barely move the tiny decoder's option likelihoods: a small but real
  # change of the gradient (float32 noise is ~1e-7 here)
  assert abs(float(m_on["grad_norm"]) - float(m_off["grad_norm"])) > 1e-5
  assert any(not np.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(p_on, p_off))
  # the continuations give the full option rows' loss and update
  p_full, m_full = _train(t, batch, h, answer_steps=t.answer_steps)
  np.testing.assert_allclose(float(m_full["loss"]), float(m_on["loss"]), rtol=1e-5, atol=1e-6)
  for a, b in zip(p_full, p_on):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_adapter_gets_the_option_loss_without_slot_losses(setup):
  _, _, t, _, _ = setup
  h = dataclasses.replace(t.h, routed=False, w_opt=0.5, w_ev=1.0)
  assert h.weights() == dict(gen=t.h.w_gen, cal=0.0, cf=0.0, align=0.0, opt=0.5, ev=0.0)
  assert t.h.weights()["cal"] == t.h.w_cal > 0


def test_option_loss_on_open_answers_is_refused(setup, tmp_path):
  cfg, dec, _, tr, va = setup
  cfg = cfg.copy_and_resolve_references()
  cfg.train.loss_weights.opt = 1.0
  strip = lambda a: {k: v for k, v in a.items()
                     if not k.startswith("mc_") and k != "answer_index"}
  with pytest.raises(ValueError, match=r"config.train.loss_weights.opt=1.0.*open answers"):
    trainer.Trainer(cfg, dec.model, strip(tr), strip(va), tmp_path / "open", progress=False,
                    log=lambda *_: None)
  t = trainer.Trainer(cfg, dec.model, tr, va, tmp_path / "mc", progress=False,
                      log=lambda *_: None)
  try:
    with pytest.raises(ValueError, match="needs multiple-choice rows"):
      trainer.train_step(t.params, t.opt_state, t.rest, t.backbone_state, strip(tr), h=t.h,
                         **_kw(t))
  finally:
    t.close()


def _two_step_trainer(setup, workdir, **train):
  """A trainer of 2 steps (logged each step, evaluated at the end) with `train` overrides."""
  cfg, dec, _, tr, va = setup
  cfg = cfg.copy_and_resolve_references()
  cfg.train.update(num_steps=2, log_every=1, eval_every=2, **train)
  return trainer.Trainer(cfg, dec.model, tr, va, workdir, progress=False, log=lambda *_: None)


def test_training_with_the_option_loss_logs_it(setup, tmp_path):
  t = _two_step_trainer(setup, tmp_path / "run",
                        loss_weights=dict(setup[0].train.loss_weights, opt=1.0))
  try:
    t.train()
  finally:
    t.close()
  logged = [r for r in t.history if "opt" in r]
  assert len(logged) == 2 and all(r["opt"] > 0 for r in logged)
  assert any("s_ans" in r for r in t.history)


def _answer_logprob_torch(logits, targets, mask):
  logp = torch.log_softmax(torch.tensor(np.asarray(logits, np.float32)), -1)
  tok = logp.gather(-1, torch.tensor(np.asarray(targets)).long()[..., None])[..., 0]
  m = torch.tensor(np.asarray(mask)).float()
  return (tok * m).sum(1) / m.sum(1).clamp(min=1)


def test_other_evidence_moves_only_the_subgraph(setup):
  _, _, _, tr, _ = setup
  batch = {k: v[:4] for k, v in tr.items()}
  other = jax.device_get(trainer.other_evidence(batch))
  moved = {k for k in batch if not np.array_equal(other[k], batch[k])}
  assert moved <= {"slot_keys", "slot_values", "slot_features", "slot_reliability",
                   "slot_valid", "slot_is_entity", "slot_key_tokens", "slot_value_tokens",
                   "slot_triple", "evidence", "evidence_mask"}
  assert {"slot_keys", "evidence"} <= moved  # the tiny questions' subgraphs differ
  for k in moved:  # row b reads row b - 1's subgraph
    np.testing.assert_array_equal(other[k][1:], batch[k][:-1])
    np.testing.assert_array_equal(other[k][0], batch[k][-1])


def test_evidence_loss_in_the_train_step(setup):
  _, _, t, tr, _ = setup
  batch = {k: v[4:8] for k, v in tr.items()}
  assert t.h.w_ev == 0.0  # off by default
  h = dataclasses.replace(t.h, warmup_steps=0)
  p_off, m_off = _train(t, batch, h, answer_steps=t.answer_steps)
  assert float(m_off["ev"]) == 0.0
  h_on = dataclasses.replace(h, w_ev=2.0)
  p_on, m_on = _train(t, batch, h_on, answer_steps=t.answer_steps)
  # the reference: two plain forwards over every position (no answer window), in torch
  own = trainer._forward(t.heads_def, t.params, t.rest, t.backbone_def, t.backbone_state, batch,
                         t.first_layer)[0]
  other = trainer._forward(t.heads_def, t.params, t.rest, t.backbone_def, t.backbone_state,
                           trainer.other_evidence(batch), t.first_layer)[0]
  a = _answer_logprob_torch(own, batch["targets"], batch["loss_mask"])
  a_other = _answer_logprob_torch(other, batch["targets"], batch["loss_mask"])
  assert torch.all(a_other != a)
  want = torch.nn.functional.softplus(a_other - a).mean().item()
  np.testing.assert_allclose(float(m_on["ev"]), want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(float(m_on["loss"]), float(m_off["loss"]) + 2.0 * want,
                             rtol=1e-5, atol=1e-5)
  for k in ("gen", "cal", "cf", "align", "opt"):
    np.testing.assert_allclose(float(m_on[k]), float(m_off[k]), rtol=1e-5, atol=1e-6)
  assert abs(float(m_on["grad_norm"]) - float(m_off["grad_norm"])) > 1e-5
  assert any(not np.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(p_on, p_off))


def test_evidence_loss_refusals(setup, tmp_path):
  cfg, dec, _, tr, va = setup
  cfg = cfg.copy_and_resolve_references()
  cfg.train.loss_weights.ev = 1.0
  adapter = cfg.copy_and_resolve_references()
  adapter.train.target = "no_retrieval_tuned"
  with pytest.raises(ValueError, match=r"loss_weights.ev=1.0.*no_retrieval_tuned"):
    trainer.Trainer(adapter, dec.model, tr, va, tmp_path / "adapter", progress=False,
                    log=lambda *_: None)
  single = cfg.copy_and_resolve_references()
  single.train.batch_size = 1
  with pytest.raises(ValueError, match=r"loss_weights.ev=1.0.*batch_size=1"):
    trainer.Trainer(single, dec.model, tr, va, tmp_path / "single", progress=False,
                    log=lambda *_: None)


def test_training_with_the_evidence_loss_logs_it_and_the_shuffled_control(setup, tmp_path):
  t = _two_step_trainer(setup, tmp_path / "run", eval_shuffled_evidence=True,
                        loss_weights=dict(setup[0].train.loss_weights, ev=1.0))
  try:
    t.train()
    logged = [r for r in t.history if "ev" in r]
    assert len(logged) == 2 and all(r["ev"] > 0 for r in logged)
    (record,) = [r for r in t.history if "s_ans" in r]
    # the control is S_ans over the validation arrays with the subgraphs rolled by one question
    rolled = trainer.other_evidence(t.val_arrays)
    assert not np.array_equal(rolled["slot_keys"], t.val_arrays["slot_keys"])
    assert record["s_ans_shuffled"] == t.evaluate(rolled)["s_ans"]
    assert record["s_ans"] == t.evaluate()["s_ans"]
  finally:
    t.close()
