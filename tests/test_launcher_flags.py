"""Launchers check every flag before loading a model: run from a folder outside the repository
(configs are found relative to the package), each bad flag fails with a message naming it, and
nothing was loaded (no load message, no file written)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from graphloom_jax import configs

ROOT = pathlib.Path(__file__).resolve().parents[1]
# What the launchers print (or write) once a model is loading or loaded.
LOAD_SIGNS = ("loaded in", "GraphLoom trainable parameters", "Loading", "wrote ")


def _run(module, args, cwd):
  """`module` (launch.NAME) through its installed console script, graphloom-NAME."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  name = module.removeprefix("launch.").replace("_", "-")
  script = pathlib.Path(sys.executable).parent / f"graphloom-{name}"
  proc = subprocess.run([str(script), *args], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=300)
  return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture()
def outside(tmp_path):
  """A working directory outside the repository, with a few input files."""
  (tmp_path / "empty.jsonl").write_text("")
  (tmp_path / "bad.jsonl").write_text('{"subject": "horse"\n')
  (tmp_path / "good.jsonl").write_text(json.dumps(
      {"subject": "horse", "relation": "in front of", "object": "fence"}) + "\n")
  (tmp_path / "a_file").write_text("x")
  assert not tmp_path.resolve().is_relative_to(ROOT)
  return tmp_path


CASES = [
    # (module, args, text the error must contain)
    ("launch.answer", ["--num_examples=0"], "--num_examples=0: must be >= 1"),
    ("launch.answer", ["--num_questions=-4"], "--num_examples=-4"),  # the old name, an alias
    ("launch.answer", ["--batch_size=0"], "--batch_size=0"),
    ("launch.answer", ["--triples_file=good.jsonl"], "--triples_file is only used with --question"),
    ("launch.answer", ["--options=a,b"], "--options is only used with --question"),
    ("launch.answer", ["--question=What is the horse in front of?"],
     "--question needs --triples_file"),
    ("launch.answer", ["--question=Why?", "--triples_file=missing.jsonl"],
     "--triples_file=missing.jsonl: no such file"),
    ("launch.answer", ["--question=Why?", "--triples_file=empty.jsonl"],
     "--triples_file=empty.jsonl: the file is empty"),
    ("launch.answer", ["--question=Why?", "--triples_file=bad.jsonl"], "--triples_file=bad.jsonl"),
    ("launch.answer", ["--question=Why?", "--triples_file=."], "--triples_file=.: not a regular"),
    ("launch.answer", ["--question=  ", "--triples_file=good.jsonl"], "--question is empty"),
    ("launch.answer", ["--question=Why?", "--triples_file=good.jsonl", "--options=only"],
     "--options=only: give at least 2"),
    ("launch.answer", ["--question=Why?", "--triples_file=good.jsonl", "--compare"],
     "--compare"),
    ("launch.answer", ["--question=Why?", "--triples_file=good.jsonl", "--num_examples=3"],
     "--num_examples selects SceneKB questions"),
    ("launch.answer", ["--question=Why?", "--triples_file=good.jsonl", "--num_questions=3"],
     "--num_examples selects SceneKB questions"),
    ("launch.answer", ["--heads=nowhere"], "--heads=nowhere: no such folder"),
    ("launch.answer", ["--split=dev"], "--split=dev"),
    ("launch.answer", ["--root=."], "--root=.: not a SceneKB folder"),
    ("launch.answer", ["--question=Why?", "--triples_file=good.jsonl", "--root=."],
     "--root selects SceneKB questions"),
    ("launch.answer", ["--output=."], "--output=.: is a folder"),
    ("launch.answer", ["--predictions=."], "--output=.: is a folder"),
    ("launch.answer", ["--config=configs/tiny.py", "--config.model.weights=/no/such/model"],
     "--config.model.weights=/no/such/model: no such file"),
    ("launch.answer", ["--config=configs/missing.py"], "no config file 'configs/missing.py'"),
    ("launch.train", ["--workdir=a_file"], "--workdir=a_file: is a file"),
    ("launch.train", ["--workdir=run", "--config.train.num_steps=0"],
     "--config.train.num_steps=0: must be >= 1"),
    ("launch.train", ["--workdir=run", "--config=configs/tiny.py",
                      "--config.model.dtype=float16"], "--config.model.dtype=float16"),
    ("launch.convert", ["--weights=missing", "--workdir=out"], "--weights=missing: no such file"),
    ("launch.convert", ["--workdir=a_file"], "--workdir=a_file: is a file"),
    ("launch.convert", ["--config=configs/tiny.py", "--workdir=o"],
     "--config.model.weights=random: no such file"),
    ("launch.convert", ["--config.model.weights=missing", "--workdir=o"],
     "--config.model.weights=missing: no such file"),
    ("launch.generate", ["--prompt=Hi", "--config.model.weights=missing.gguf"],
     "--config.model.weights=missing.gguf: no such file"),
    ("launch.generate", ["--prompt=Hi", "--config.model.dtype=float16"],
     "--config.model.dtype=float16: must be float32 or bfloat16"),
    ("launch.generate", ["--prompt=Hi", "--config=configs/tiny.py", "--max_new_tokens=600"],
     "--config.model.weights=random: no such file"),  # a random model has no tokenizer
    ("launch.generate", ["--prompt=Hi", "--temperature=-1"], "--temperature=-1.0"),
    ("launch.generate", ["--prompt=Hi", "--temperature=nan"], "--temperature=nan"),
    ("launch.generate", ["--prompt=Hi", "--temperature=0.7", "--top_p=1.5"], "--top_p=1.5"),
    ("launch.generate", ["--prompt=Hi", "--seed=-1"], "--seed=-1"),
    ("launch.generate", ["--prompt=Hi", "--max_new_tokens=0"], "--max_new_tokens=0"),
    ("launch.generate", ["--prompt=Hi", "--max_seq_len=0"], "--max_seq_len=0"),
    ("launch.generate", ["--prompt= "], "--prompt number 1 is empty"),
    ("launch.generate", ["--prompt=Hi", "--weights=missing.gguf"], "--weights=missing.gguf"),
    ("launch.retrieve", ["--num_examples=-1"], "--num_examples=-1"),
    ("launch.retrieve", ["--distractor_instances=-2"], "--distractor_instances=-2"),
    ("launch.retrieve", ["--config.retrieval.second_round=sometimes"],
     "--config.retrieval.second_round=sometimes"),
    ("launch.retrieve", ["--output=."], "--output=.: is a folder"),
    ("launch.evaluate_retrieval", ["--task=evidence_completion", "--workdir=o",
                                   "--budgets=10,x"], "--budgets=10,x"),
    ("launch.evaluate_retrieval", ["--task=sequential_pool", "--workdir=o",
                                   "--max_slices=0"], "--max_slices=0"),
    ("launch.evaluate_retrieval", ["--task=sequential_pool", "--workdir=o",
                                   "--grail_dir=nowhere"], "--grail_dir=nowhere"),
    ("launch.evaluate_retrieval", ["--task=sequential_pool", "--workdir=o", "--data=mmqa"],
     "--config.grail.mmqa_dir=FOLDER"),
    ("launch.train_grail", ["--workdir=a_file"], "--workdir=a_file: is a file"),
    ("launch.train_grail", ["--output_dir=a_file"], "--workdir=a_file: is a file"),
    ("launch.train_grail", ["--workdir=o", "--config.grail.data=mmqa"],
     "--config.grail.mmqa_dir=FOLDER"),
]


@pytest.mark.parametrize("module, args, message", CASES,
                         ids=[f"{m.split('.')[1]}:{' '.join(a)}" for m, a, _ in CASES])
def test_bad_flag_fails_before_any_model_load(outside, module, args, message):
  before = sorted(p.name for p in outside.iterdir())
  rc, out = _run(module, args, outside)
  assert rc != 0, out[-3000:]
  assert message in out, out[-3000:]
  assert not any(sign in out for sign in LOAD_SIGNS), out[-3000:]
  assert "Traceback" not in out, out[-3000:]
  assert sorted(p.name for p in outside.iterdir()) == before  # nothing written


def test_configs_resolve_from_any_directory(outside, monkeypatch):
  monkeypatch.chdir(outside)
  tiny = configs.resolve_path("configs/tiny.py")
  assert pathlib.Path(tiny) == ROOT / "configs" / "tiny.py"
  assert configs.resolve_path("tiny.py") == tiny
  assert configs.resolve_path("configs/tiny.py:arg") == tiny + ":arg"
  # a file of that name in the working directory wins
  (outside / "configs").mkdir()
  (outside / "configs" / "tiny.py").write_text("def get_config():\n  return None\n")
  assert configs.resolve_path("configs/tiny.py") == str(outside / "configs" / "tiny.py")
  with pytest.raises(ValueError, match="no config file 'nope.py'"):
    configs.resolve_path("nope.py")
  with pytest.raises(ValueError, match="empty config path"):
    configs.resolve_path("")


def test_default_config_is_used_from_another_directory(outside):
  """The default --config (a repository-relative path) loads from outside the repository: the
  launcher gets past flag parsing to its own checks, which read the config."""
  rc, out = _run("launch.train", ["--workdir=a_file"], outside)
  assert rc != 0 and "--workdir=a_file: is a file" in out, out[-3000:]
  assert "Flags parsing error" not in out
  rc, out = _run("launch.answer", ["--config=configs/tiny.py", "--num_examples=0"], outside)
  assert "--num_examples=0: must be >= 1" in out and "Flags parsing error" not in out
