"""The GraphLoom trainer on the tiny config: frozen backbone, optimizer state, kill-and-resume,
8-device data parallel vs 1 device, SceneKB featurisation."""

import json

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from graphloom_jax.configs import tiny
from graphloom_jax.data import registry, scenekb
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import heads as heads_lib
from graphloom_jax.pipeline import GraphLoom, prompts
from graphloom_jax.training import data, trainer

from fakes import HashEmbed


@pytest.fixture(scope="module")
def setup():
  cfg = tiny.get_config()
  cfg.train.num_steps = 6
  cfg.train.batch_size = 8
  cfg.train.grad_accum = 2
  cfg.train.log_every = 2
  cfg.train.eval_every = 100  # evaluation only at the last step
  cfg.train.checkpoint_every = 2
  cfg.train.eval_examples = 8
  dec = decoder_lib.from_config(cfg.model)
  train_kb, val_kb = scenekb.load("train", root=scenekb.V1_FOLDER), scenekb.load("validation", root=scenekb.V1_FOLDER)
  system = GraphLoom(cfg, dec, HashEmbed(), kb_sources=[train_kb.kb_source()])
  tr = data.featurize(system, train_kb, train_kb.questions[:40], cfg.train.seq_len)
  va = data.featurize(system, val_kb, val_kb.questions[:8], cfg.train.seq_len)
  return cfg, dec, tr, va, system


def _run(setup, workdir, devices=None, on_step=None):
  cfg, dec, tr, va, _ = setup
  t = trainer.Trainer(cfg, dec.model, tr, va, workdir, devices=devices, progress=False,
                      on_step=on_step, log=lambda *_: None)
  try:
    t.train()
  finally:
    t.close()
  return t


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


@pytest.fixture(scope="module")
def full_run(setup, tmp_path_factory):
  """An uninterrupted 6-step run over all 8 devices, shared by the tests below."""
  before = _leaves(nnx.state(setup[1].model))
  workdir = tmp_path_factory.mktemp("full")
  return _run(setup, workdir), before, workdir


def test_frozen_backbone_and_optimizer_state(setup, full_run):
  cfg, dec, _, _, _ = setup
  t, before, tmp_path = full_run
  after = _leaves(nnx.state(dec.model))
  for a, b in zip(before, after):
    np.testing.assert_array_equal(a, b)  # bit-identical
  state_after = _leaves(t.backbone_state)
  for a, b in zip(before, state_after):
    np.testing.assert_array_equal(a, b)

  param_shapes = sorted(x.shape for x in _leaves(t.params))
  opt_arrays = [x for x in _leaves(t.opt_state) if x.ndim > 0]
  # MultiSteps keeps accumulated gradients, AdamW keeps mu and nu: three copies of the heads.
  assert sorted(x.shape for x in opt_arrays) == sorted(param_shapes * 3)
  num = sum(int(np.prod(s)) for s in param_shapes)
  assert num == t.num_params == heads_lib.count_params(t.heads())
  assert sum(x.size for x in opt_arrays) == 3 * num

  lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  losses = [l for l in lines if "loss" in l]
  assert [l["step"] for l in losses] == [2, 4, 6]
  assert all(np.isfinite(l["loss"]) and l["loss"] > 0 for l in losses)
  evals = [l for l in lines if "s_val" in l]
  assert len(evals) == 1 and evals[0]["s_val"] == pytest.approx(
      0.7 * evals[0]["s_ans"] + 0.3 * evals[0]["s_faith"])
  assert list((tmp_path / "tensorboard").iterdir())


class Killed(Exception):
  pass


def test_kill_and_resume_matches_uninterrupted(setup, full_run, tmp_path):
  full = full_run[0]

  def kill(step):
    if step == 5:  # after the step-4 checkpoint: steps 5 is lost and redone on resume
      raise Killed()

  with pytest.raises(Killed):
    _run(setup, tmp_path / "killed", on_step=kill)
  resumed = _run(setup, tmp_path / "killed")
  assert resumed.step == 6 and resumed.micro_step == 12
  for a, b in zip(_leaves(full.params), _leaves(resumed.params)):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(_leaves(full.opt_state), _leaves(resumed.opt_state)):
    np.testing.assert_array_equal(a, b)
  steps = [json.loads(l)["step"] for l in (tmp_path / "killed" / "metrics.jsonl").read_text()
           .splitlines() if "loss" in l]
  assert steps == [2, 4, 6]  # the lost step-6 log of the killed run is not duplicated


def test_data_parallel_matches_single_device(setup, full_run, tmp_path):
  assert len(jax.devices()) == 8
  eight, _, eight_dir = full_run
  one = _run(setup, tmp_path / "one", devices=jax.devices()[:1])
  assert one.mesh.devices.size == 1 and eight.mesh.devices.size == 8
  for a, b in zip(_leaves(one.params), _leaves(eight.params)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-5)
  la = [json.loads(l) for l in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
  lb = [json.loads(l) for l in (eight_dir / "metrics.jsonl").read_text().splitlines()]
  for x, y in zip(la, lb):
    for k in ("loss", "gen", "cal", "cf", "align", "s_ans", "s_faith"):
      if k in x:
        assert x[k] == pytest.approx(y[k], abs=1e-4), k


def test_schedule_and_accumulation():
  cfg = tiny.get_config()
  h = trainer.Hyper.from_config(cfg)
  s = trainer.schedule(h)
  assert float(s(0)) == 0.0
  assert float(s(h.warmup_steps)) == pytest.approx(h.learning_rate)
  assert float(s(h.num_steps)) == pytest.approx(h.end_learning_rate, rel=1e-3)
  tx = trainer.optimizer(h)
  p = {"w": np.ones(3, np.float32)}
  st = tx.init(p)
  g = {"w": np.full(3, 0.5, np.float32)}
  updates = []
  for _ in range(4):
    u, st = tx.update(g, st, p)
    updates.append(np.asarray(u["w"]))
  # micro-steps 1 and 3 only accumulate; step 2 applies learning rate 0 (warm-up start),
  # step 4 a real AdamW update
  assert all(np.all(x == 0) for x in updates[:3])
  assert np.all(updates[3] < 0)
  assert isinstance(st, optax.MultiStepsState)


def test_features_shapes_and_errors(setup):
  cfg, _, tr, _, system = setup
  n, s = tr["tokens"].shape
  assert s == cfg.train.seq_len and tr["slot_keys"].shape == (n, cfg.memory.bank_size, 16)
  # the loss mask covers exactly the answer tokens plus EOS after the prompt
  row = 0
  tok = prompts.ByteTokenizer(512)
  answer = tok.decode(tr["targets"][row][tr["loss_mask"][row]])
  kb = scenekb.load("train", root=scenekb.V1_FOLDER)
  assert answer.strip() == kb.questions[0].answer_texts[0]
  assert tr["targets"][row][tr["loss_mask"][row]][-1] == prompts.ByteTokenizer.eos_id
  assert np.all(tr["mc_option_mask"].sum(-1) > 0)
  with pytest.raises(ValueError, match="exceed the row length 8"):
    data.featurize(system, kb, kb.questions[:1], 8)
  with pytest.raises(ValueError, match="cannot fill one batch"):
    data.batches({k: v[:3] for k, v in tr.items()}, 4, 0)
  with pytest.raises(ValueError, match="at least 259"):
    prompts.ByteTokenizer(100)
  ds = data.batches(tr, 8, 0)
  np.testing.assert_array_equal(ds[7]["tokens"], data.batches(tr, 8, 0)[7]["tokens"])


def test_decoder_with_bound_router_matches_training_forward(setup):
  """Decoder.logits with the bound router (answering) equals the forward the trainer runs,
  `pipeline.decode.heads_forward`."""
  from graphloom_jax.models import heads as heads_mod
  from graphloom_jax.pipeline import decode
  from graphloom_jax.models import router as router_lib
  import jax.numpy as jnp
  cfg, dec, tr, _, _ = setup
  heads = heads_mod.GraphLoomHeads(cfg, dec.config.hidden_size, 16, 16, 1, rngs=nnx.Rngs(5))
  batch = {k: jnp.asarray(v[:2]) for k, v in tr.items()}
  mem, inputs = heads.memory(batch)
  got = dec.logits(np.asarray(batch["tokens"]), np.asarray(batch["valid"]), memory=mem,
                   router=router_lib.BoundRouter(heads.router, inputs))
  want, attn, _ = decode.heads_forward(heads, dec.model, batch, first_layer=-1,
                                       return_slot_attention=True)
  np.testing.assert_allclose(got, np.asarray(want), atol=1e-5)
  assert attn.shape[-1] == cfg.memory.bank_size
  plain = dec.logits(np.asarray(batch["tokens"]), np.asarray(batch["valid"]))
  assert np.abs(plain - got).max() > 1e-4  # the memory changes the output


def test_token_values_reach_the_decoder_from_the_batch(setup):
  """fusion.token_values: the heads pass the batch's slot_value_tokens to the decoder, which
  then answers differently with the same parameters; off, the tokens are not read."""
  from graphloom_jax.pipeline import decode
  import jax.numpy as jnp
  cfg, dec, tr, _, _ = setup
  on_cfg = cfg.copy_and_resolve_references()
  on_cfg.fusion.token_values = True
  off = heads_lib.GraphLoomHeads(cfg, dec.config.hidden_size, 16, 16, 1, rngs=nnx.Rngs(5))
  on = heads_lib.GraphLoomHeads(on_cfg, dec.config.hidden_size, 16, 16, 1, rngs=nnx.Rngs(5))
  batch = {k: jnp.asarray(v[:2]) for k, v in tr.items()}
  assert (tr["slot_value_tokens"][tr["slot_valid"]] >= 0).any(axis=-1).all()
  assert off.memory(batch)[0].slot_value_tokens is None
  np.testing.assert_array_equal(np.asarray(on.memory(batch)[0].slot_value_tokens),
                                tr["slot_value_tokens"][:2])
  run = lambda heads, b: np.asarray(decode.heads_forward(heads, dec.model, b, first_layer=-1)[0])
  assert np.abs(run(on, batch) - run(off, batch)).max() > 1e-4
  blank = dict(batch, slot_value_tokens=jnp.full_like(batch["slot_value_tokens"], -1))
  np.testing.assert_allclose(run(on, blank), run(off, batch), atol=1e-5)  # nothing to add
  np.testing.assert_array_equal(run(off, blank), run(off, batch))  # off: never read


def test_flat_prompt():
  fmt = prompts.TextFormat(prompts.ByteTokenizer(512))
  ids = fmt.evidence_prompt_ids("Q?", ["a b c.", "d e f."])
  assert "Evidence:\na b c.\nd e f.\nQuestion: Q?" in fmt.tok.decode(ids)


def test_early_stopping_and_best_checkpoint(setup, tmp_path, monkeypatch):
  cfg, dec, tr, va, _ = setup
  cfg = cfg.copy_and_resolve_references()
  cfg.train.eval_every = 2
  cfg.train.patience = 1
  # S_val 0.5 then 0.4: the second evaluation does not improve -> stop at step 4 of 6.
  scores = iter([0.5, 0.4, 0.9])
  monkeypatch.setattr(trainer.Trainer, "evaluate", lambda self, arrays=None: {
      "s_ans": 0.0, "s_faith": 0.0, "s_val": next(scores)})
  t = trainer.Trainer(cfg, dec.model, tr, va, tmp_path, progress=False, log=lambda *_: None)
  try:
    t.train()
    assert t.step == 4 and t.best == 0.5
    assert t.best_ckpt.latest_step() == 2 and t.latest.latest_step() == 4
  finally:
    t.close()


def test_lazy_graphs_build_each_instance_once_and_forget_it_after_last_use(setup):
  """Featurising holds one chunk's instance graphs: each instance_id is built once, kept while
  a later example still needs it, dropped after its last; the features equal those of graphs
  built all at once beforehand."""
  cfg, _, tr, _, system = setup
  kb = scenekb.load("train", root=scenekb.V1_FOLDER)
  examples = [registry.scenekb_example(q) for q in kb.questions[:40]]
  built = []

  def triples(ex):
    built.append(ex.instance_id)
    return kb.scene_graph(ex.instance_id)

  graphs = data.LazyGraphs(system, examples, triples)
  last = {ex.instance_id: j for j, ex in enumerate(examples)}
  for j in range(len(examples)):
    graphs[j]
    alive = set(graphs._built)
    assert alive == {i for i, k in last.items() if k > j and i in built}
  assert sorted(built) == sorted(set(ex.instance_id for ex in examples))
  assert len(built) < len(examples)  # some scenes have several questions
  assert graphs.builds == len(built)
  lazy = data.featurize_examples(system, examples, lambda ex: kb.scene_graph(ex.instance_id),
                                 cfg.train.seq_len)
  for k in tr:
    np.testing.assert_array_equal(lazy[k], tr[k], err_msg=k)


def test_heads_only_keys_share_the_feature_cache(setup):
  """Each key of data.HEADS_ONLY_KEYS changed: the same features and the same cache key; a
  featurisation key (memory.bank_size) changed: another key."""
  cfg, dec, tr, _, system = setup
  kb = scenekb.load("train", root=scenekb.V1_FOLDER)
  examples = [registry.scenekb_example(q) for q in kb.questions[:16]]
  base = data.cache_key(system, examples, cfg.train.seq_len)
  changed = {"memory.first_layer": 0, "fusion.dim": 2 * cfg.fusion.dim,
             "fusion.per_layer": not cfg.fusion.per_layer, "fusion.slot_rank": 4,
             "fusion.token_values": not cfg.fusion.token_values}
  assert set(changed) == set(data.HEADS_ONLY_KEYS)

  def variant(key, value):
    c = cfg.copy_and_resolve_references()
    section, name = key.split(".")
    c[section][name] = value
    return GraphLoom(c, dec, HashEmbed(), kb_sources=[kb.kb_source()])

  for key, value in changed.items():
    other = variant(key, value)
    assert data.cache_key(other, examples, cfg.train.seq_len) == base, key
    arrays = data.featurize_examples(other, examples, lambda ex: kb.scene_graph(ex.instance_id),
                                     cfg.train.seq_len)
    for k in tr:
      np.testing.assert_array_equal(arrays[k], tr[k][:16], err_msg=f"{key}: {k}")
  other = variant("memory.bank_size", cfg.memory.bank_size + 2)
  assert data.cache_key(other, examples, cfg.train.seq_len) != base
