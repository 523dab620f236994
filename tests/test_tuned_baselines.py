"""The trained text baselines (modes flat_rag_tuned / no_retrieval_tuned, models.heads.TunedPrefix)
on the tiny config: what the adapter holds, training it with GraphLoom's trainer (L_gen only,
stopped on S_ans, backbone frozen), its checkpoint, and answering through GraphLoom.answer_batch
exactly as the trainer scored it."""

import json

import jax
import numpy as np
import pytest
from flax import nnx

from graphloom_jax.configs import tiny
from graphloom_jax.data import scenekb
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import heads as heads_lib
from graphloom_jax.pipeline import GraphLoom, graphloom
from graphloom_jax.training import data, trainer

from fakes import HashEmbed


def _config(target):
  cfg = tiny.get_config()
  cfg.train.target = target
  cfg.train.seq_len = 512  # evidence lines are bytes under the tiny tokenizer
  cfg.retrieval.n_max = 3
  cfg.train.num_steps = 6
  cfg.train.batch_size = 4
  cfg.train.grad_accum = 1
  cfg.train.warmup_steps = 1
  cfg.train.learning_rate = 3e-2
  cfg.train.log_every = 1
  cfg.train.eval_every = 3
  cfg.train.checkpoint_every = 3
  cfg.train.eval_examples = 6
  cfg.baseline.tuned_prefix_len = 3
  cfg.verify.revise = False  # the tiny random decoder's revisions only cost time here
  return cfg


@pytest.fixture(scope="module", params=["flat_rag_tuned", "no_retrieval_tuned"])
def trained(request, tmp_path_factory):
  cfg = _config(request.param)
  dec = decoder_lib.from_config(cfg.model)
  train_kb, val_kb = scenekb.load("train", root=scenekb.V1_FOLDER), scenekb.load("validation", root=scenekb.V1_FOLDER)
  system = GraphLoom(cfg, dec, HashEmbed(), kb_sources=[train_kb.kb_source()])
  tr = data.featurize(system, train_kb, train_kb.questions[:16], cfg.train.seq_len)
  va = data.featurize(system, val_kb, val_kb.questions[:6], cfg.train.seq_len)
  before = [np.asarray(x) for x in jax.tree.leaves(nnx.state(dec.model))]
  workdir = tmp_path_factory.mktemp(request.param)
  t = trainer.Trainer(cfg, dec.model, tr, va, workdir, progress=False, log=lambda *_: None)
  try:
    t.train()
  finally:
    t.close()
  return request.param, cfg, dec, system, tr, va, t, before, workdir, val_kb


def test_adapter_holds_one_prefix_per_memory_layer():
  cfg = _config("flat_rag_tuned")
  dec = decoder_lib.from_config(cfg.model)
  layers = dec.config.num_layers - dec.model.first_memory_layer(cfg.memory.first_layer)
  a = graphloom.new_heads(cfg, dec, 16, kind="tuned_prefix")
  assert heads_lib.count_params(a) == layers * 3 * dec.config.hidden_size
  mem, inputs = a.memory({"example": np.zeros((5, 1))})
  assert mem.prefix.shape == (layers, 5, 3, dec.config.hidden_size) and inputs is None
  assert not np.asarray(mem.slot_valid).any() and np.asarray(mem.prefix_mask).all()
  with pytest.raises(ValueError, match="train.target"):
    heads_lib.kind_of_target("lora")


def test_training_reads_the_modes_prompt_and_only_l_gen(trained):
  target, cfg, dec, system, tr, va, t, before, workdir, _ = trained
  text = system.fmt.decode([int(x) for x in tr["tokens"][0] if x != system.fmt.pad])
  assert ("Evidence:" in text) == (target == "flat_rag_tuned")
  after = [np.asarray(x) for x in jax.tree.leaves(nnx.state(dec.model))]
  assert all(np.array_equal(a, b) for a, b in zip(before, after))  # backbone frozen
  records = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
  steps = [r for r in records if "loss" in r]
  evals = [r for r in records if "s_ans" in r]
  assert steps and evals
  for r in steps:  # no slots: the routing losses are exactly zero, L = L_gen
    assert r["cal"] == r["cf"] == r["align"] == 0.0
    assert r["loss"] == pytest.approx(r["gen"], rel=1e-6)
  for r in evals:
    assert r["s_val"] == r["s_ans"] and "s_faith" not in r
  init = graphloom.new_heads(cfg, dec, 16, seed=cfg.seed, kind="tuned_prefix")
  assert not np.allclose(np.asarray(t.heads().prefix[...]), np.asarray(init.prefix[...]))
  assert steps[-1]["gen"] < steps[0]["gen"]


def test_checkpoint_round_trip_and_kind_checks(trained, tmp_path):
  target, cfg, dec, *_ = trained
  t = trained[6]
  folder = graphloom.save_heads(t.heads(), tmp_path / "adapter", cfg, {"target": target})
  meta = json.loads((folder / "heads.json").read_text())
  assert meta["kind"] == "tuned_prefix" and set(meta["config"]) == set(
      graphloom.ADAPTER_SHAPE_KEYS)
  back = graphloom.load_heads(folder, cfg, dec, 16, kind="tuned_prefix")
  np.testing.assert_array_equal(np.asarray(back.prefix[...]), np.asarray(t.heads().prefix[...]))
  with pytest.raises(ValueError, match="'tuned_prefix' heads where 'graphloom'"):
    graphloom.load_heads(folder, cfg, dec, 16, kind="graphloom")
  other = cfg.copy_and_resolve_references()
  other.baseline.tuned_prefix_len = 4
  with pytest.raises(ValueError, match="tuned_prefix_len"):
    graphloom.load_heads(folder, other, dec, 16)


def test_answering_scores_options_as_the_trainer_did(trained):
  """GraphLoom.answer_batch in the tuned mode scores each option with the same prompt and memory
  as the trainer's validation step: the two paths cannot drift apart."""
  target, cfg, dec, system, tr, va, t, _, _, val_kb = trained
  adapter = t.heads()
  gl = GraphLoom(cfg, dec, HashEmbed(), adapters={target: adapter},
                 kb_sources=system.kb_sources)
  qs = val_kb.questions[:6]
  got = gl.answer_batch([q.question for q in qs],
                        [val_kb.scene_graph(q.extra["instance_id"]) for q in qs],
                        options=[q.extra["options"] for q in qs], mode=target)
  batch = {k: v[:6] for k, v in va.items()}
  params, rest = nnx.split(adapter, nnx.Param, ...)[1:]
  heads_def = nnx.split(adapter, nnx.Param, ...)[0]
  backbone_def, backbone_state = nnx.split(dec.model)
  want = trainer.eval_step(params, rest, backbone_state, batch, heads_def=heads_def,
                           backbone_def=backbone_def,
                           first_layer=t.first_layer)["option_scores"]
  np.testing.assert_allclose([a.option_scores for a in got], np.asarray(want), atol=1e-4)
  assert all(a.mode == target and a.evidence == [] for a in got)
  # the adapter is read: zero-shot scores differ
  zero = gl.answer_batch([q.question for q in qs[:2]],
                         [val_kb.scene_graph(q.extra["instance_id"]) for q in qs[:2]],
                         options=[q.extra["options"] for q in qs[:2]],
                         mode=target.replace("_tuned", ""))
  assert not np.allclose([a.option_scores for a in zero], [a.option_scores for a in got[:2]])


def test_modes_need_their_adapter_and_no_retrieval_tuned_needs_no_graph(trained):
  target, cfg, dec, system, *_ = trained
  gl = GraphLoom(cfg, dec, HashEmbed(), kb_sources=system.kb_sources)
  with pytest.raises(ValueError, match="adapters="):
    gl.answer_batch(["What is the man holding?"], [None], mode=target)
  if target == "no_retrieval_tuned":
    gl = GraphLoom(cfg, dec, HashEmbed(), adapters={target: trained[6].heads()})
    a = gl.answer("What is the man holding?", None, options=["cup", "kite"], mode=target)
    assert a.retrieved == [] and len(a.option_scores) == 2
  with pytest.raises(ValueError, match="TunedPrefix"):
    GraphLoom(cfg, dec, HashEmbed(), adapters={"graphloom": trained[6].heads()})
