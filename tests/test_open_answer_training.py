"""Open-answer training (PathQuestion / WorldCup2014): features without option rows, the
greedy-match validation score against free greedy decoding, and a tiny training run."""

import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import pathquestion
from graphloom_jax.evaluation import answers
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import prompts
from graphloom_jax.training import data, trainer

from fakes import HashEmbed

DATA = pathlib.Path(__file__).resolve().parent / "data"


def _greedy_decode(table, prompt, steps):
  """Free greedy decoding with a next-token table {prefix: logits}."""
  seq = list(prompt)
  for _ in range(steps):
    seq.append(int(np.argmax(table(tuple(seq)))))
  return seq[len(prompt):]


@pytest.mark.parametrize("seed", range(20))
def test_greedy_match_equals_free_greedy_decoding(seed):
  rng = np.random.default_rng(seed)
  vocab, prompt_len, answer_len = 4, 3, 3
  cache = {}

  def table(prefix):  # a fixed random next-token distribution per prefix
    if prefix not in cache:
      cache[prefix] = rng.normal(size=vocab)
    return cache[prefix]

  prompt = list(rng.integers(0, vocab, prompt_len))
  target = list(rng.integers(0, vocab, answer_len))
  if seed % 2:  # half the cases: the target is what greedy decoding writes
    target = _greedy_decode(table, prompt, answer_len)
  tokens = prompt + target
  t = len(tokens)
  logits = np.stack([table(tuple(tokens[:i + 1])) for i in range(t)])[None]
  targets = np.array(tokens[1:] + [0])[None]
  steps = np.zeros((1, t), bool)
  steps[0, prompt_len - 1:t - 1] = True
  got = bool(answers.greedy_match(jnp.asarray(logits), jnp.asarray(targets),
                                  jnp.asarray(steps))[0])
  assert got == (_greedy_decode(table, prompt, answer_len) == target)


@pytest.fixture(scope="module")
def path_setup(tmp_path_factory):
  cfg = tiny.get_config()
  cfg.train.data = "pathquestion"
  cfg.train.data_config = "PQ-3H"
  cfg.train.data_root = str(DATA / "pathquestion")
  cfg.graph.singularize = False
  cfg.train.num_steps = 2
  cfg.train.batch_size = 2
  cfg.train.grad_accum = 1
  cfg.train.eval_every = 100
  cfg.train.checkpoint_every = 100
  dec = decoder_lib.from_config(cfg.model)
  tr, va = data.load_training_data(cfg, dec, tmp_path_factory.mktemp("features"),
                                   embedder=HashEmbed(), log=lambda *_: None)
  return cfg, dec, tr, va


def test_open_answer_features(path_setup):
  cfg, dec, tr, va = path_setup
  ds = pathquestion.load("PQ-3H", root=DATA / "pathquestion")
  train = ds.split("train")
  assert tr["tokens"].shape[0] == len(train) == 2 and va["tokens"].shape[0] == 2
  assert not any(k.startswith("mc_") for k in tr) and "answer_index" not in tr
  tok = prompts.TextFormat.for_decoder(dec).tok
  for i, q in enumerate(train):
    # the generated part of the row is the first gold answer and EOS
    answer_ids = np.asarray(tr["tokens"][i])[np.asarray(tr["output_mask"][i])]
    assert tok.decode(answer_ids.tolist()).strip() == q.answers[0]
    assert answer_ids[-1] in tok.eos_ids
    # the path's triples are among the slots and marked useful
    assert tr["slot_utility"][i].sum() > 0


def test_open_answer_training_runs_and_scores(path_setup, tmp_path):
  cfg, dec, tr, va = path_setup
  t = trainer.Trainer(cfg, dec.model, tr, va, tmp_path / "run", progress=False,
                      log=lambda *_: None)
  try:
    t.train()
    got = t.evaluate()
  finally:
    t.close()
  assert 0.0 <= got["s_ans"] <= 1.0 and got["eval_examples"] == 2
  assert 0.0 <= got["s_faith"] <= 1.0


def test_bad_path_dataset_config():
  cfg = tiny.get_config()
  cfg.train.data = "pathquestion"
  cfg.train.data_config = "PQ-9H"
  cfg.train.data_root = str(DATA / "pathquestion")
  cfg.graph.singularize = False
  with pytest.raises(ValueError, match="data_config='PQ-9H'"):
    data.load_training_data(cfg, None, embedder=HashEmbed())
  cfg.train.data_config, cfg.train.data_root = "PQ-3H", ""
  with pytest.raises(ValueError, match="data_root is empty"):
    data.load_training_data(cfg, None, embedder=HashEmbed())
  cfg.train.data_root = str(DATA / "pathquestion")
  cfg.graph.singularize = True
  with pytest.raises(ValueError, match="singularize"):
    data.load_training_data(cfg, None, embedder=HashEmbed())
  cfg.train.data = "webqsp"
  with pytest.raises(ValueError, match="expected one of"):
    data.load_training_data(cfg, None, embedder=HashEmbed())
