"""Honest config: every key of graphloom_jax/defaults.py (tiny config) is read during a tiny GraphLoom
answer plus training featurisation and one training step; an unknown key on the
command line is an error that names it."""

import pathlib
import subprocess
import sys

import ml_collections

from graphloom_jax.configs import tiny
from graphloom_jax.data import scenekb
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import GraphLoom, graphloom
from graphloom_jax.training import data, trainer

from fakes import HashEmbed

# Read by other entry points: the GRAIL trainer and its GraphLoom writer (tests/test_grail.py,
# tests/test_retrieval_factory.py).
ELSEWHERE = ("grail.",)
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _leaves(c, prefix=""):
  for k, v in c.items():
    if isinstance(v, ml_collections.ConfigDict) and k != "prior_seconds":
      yield from _leaves(v, f"{prefix}{k}.")
    else:
      yield f"{prefix}{k}"


class Reads:
  """Records every field read on a ConfigDict tree (attribute or item access)."""

  def __init__(self, config, monkeypatch):
    self.paths, self.seen = {}, set()

    def walk(c, prefix):
      self.paths[id(c)] = prefix
      for k, v in c.items():
        if isinstance(v, ml_collections.ConfigDict):
          walk(v, f"{prefix}{k}.")

    walk(config, "")
    get_attr, get_item = ml_collections.ConfigDict.__getattr__, ml_collections.ConfigDict.__getitem__

    self.paused = 0

    def record(obj, key):
      prefix = self.paths.get(id(obj))
      if self.paused:
        return
      if prefix is not None and isinstance(key, str):
        self.seen.add(prefix + key)

    def getattr_(obj, key):
      record(obj, key)
      return get_attr(obj, key)

    def getitem_(obj, key):
      record(obj, key)
      return get_item(obj, key)

    # Whole-config operations (serialising a section into a cache key or config.json, copying)
    # touch every key without using it.
    for name in ("to_json_best_effort", "to_json", "to_dict", "copy_and_resolve_references",
                 "items", "values", "keys", "__iter__", "__contains__"):
      method = getattr(ml_collections.ConfigDict, name)

      def paused(*args, _method=method, **kwargs):
        self.paused += 1
        try:
          return _method(*args, **kwargs)
        finally:
          self.paused -= 1

      monkeypatch.setattr(ml_collections.ConfigDict, name, paused)
    monkeypatch.setattr(ml_collections.ConfigDict, "__getattr__", getattr_)
    monkeypatch.setattr(ml_collections.ConfigDict, "__getitem__", getitem_)

  def unread(self, config):
    return sorted(k for k in _leaves(config) if not k.startswith(ELSEWHERE)
                  and k not in self.seen and not any(s.startswith(k + ".") for s in self.seen))


def _run(config, tmp_path):
  """A tiny GraphLoom answer, featurisation and one training step."""
  config.train.num_steps = 1
  config.train.batch_size = 2
  config.train.grad_accum = 1
  config.train.max_train_examples = 2
  config.train.eval_examples = 2
  dec = decoder_lib.from_config(config.model)
  tr, va = data.load_training_data(config, dec, tmp_path / "features", embedder=HashEmbed(),
                             log=lambda *_: None)
  t = trainer.Trainer(config, dec.model, tr, va, tmp_path / "run", progress=False,
                      log=lambda *_: None)
  try:
    t.train()
  finally:
    t.close()
  # open-answer featurisation of a path dataset (train.data_config, train.split_protocol)
  saved = (config.train.data, config.train.data_root)
  config.train.data, config.train.data_config = "pathquestion", "PQ-3H"
  config.train.data_root = str(ROOT / "tests" / "data" / "pathquestion")
  config.graph.singularize = False
  data.load_training_data(config, dec, None, embedder=HashEmbed(), log=lambda *_: None)
  config.train.data, config.train.data_root = saved
  config.graph.singularize = True
  kb = scenekb.load("validation", root=scenekb.V1_FOLDER)
  graphloom.save_heads(graphloom.new_heads(config, dec, 384), tmp_path / "heads", config)
  # a trained text baseline's adapter too (baseline.tuned_prefix_len)
  graphloom.save_heads(graphloom.new_heads(config, dec, 384, kind="tuned_prefix"),
                       tmp_path / "adapter", config)
  system = GraphLoom.from_config(config, heads=str(tmp_path / "heads"),
                                 adapters={"flat_rag_tuned": str(tmp_path / "adapter")},
                                 kb_sources=[kb.kb_source()])
  q = kb.questions[0]
  for mode in ("graphloom", "flat_rag_tuned"):
    system.answer(q.question, kb.scene_graph(q.extra["instance_id"]),
                  options=q.extra["options"], mode=mode)


def test_every_config_key_is_read(tmp_path, monkeypatch):
  config = tiny.get_config()
  config.memory.sparse = True  # the sparse settings are read only when sparse decoding is on
  config.memory.unread_probe = 1  # the check itself must notice an unread key
  reads = Reads(config, monkeypatch)
  _run(config, tmp_path)
  unread = reads.unread(config)
  assert unread == ["memory.unread_probe"], unread


PARSE = """
from absl import app
from ml_collections import config_flags
config = config_flags.DEFINE_config_file("config", "configs/tiny.py")
app.run(lambda argv: print(config.value.memory.first_layer))
"""


def test_unknown_command_line_key_is_an_error():
  """Overrides parse as the launchers parse them (a fresh process: absl flags are global)."""
  run = lambda *args: subprocess.run([sys.executable, "-c", PARSE, "--config=configs/tiny.py",
                                      *args], capture_output=True,
                                     text=True, cwd=ROOT, timeout=120)
  bad = run("--config.memory.frist_layer=4")
  assert bad.returncode != 0 and "frist_layer" in bad.stderr  # named, with a suggestion
  good = run("--config.memory.first_layer=1")
  assert good.returncode == 0 and good.stdout.strip() == "1", good.stderr
