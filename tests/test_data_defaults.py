"""No library default points outside the project: the VG150 vocabulary ships with the package,
and MMQA paths must be given (with an error that names the setting)."""

import json
import pathlib

import pytest

from graphloom_jax.data import build_benchmark
from graphloom_jax.data import grail_sets

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_vg150_vocab_ships_with_the_package():
  vocab = build_benchmark.DEFAULT_VOCAB.resolve()
  assert vocab.is_relative_to(ROOT / "graphloom_jax")
  data = json.loads(vocab.read_text())
  assert len(data["objects"]) == 150 and len(data["predicates"]) == 50
  assert "man" in data["objects"] and "riding" in data["predicates"]
  assert data["objects"] == sorted(data["objects"])


def test_mmqa_evidence_set_needs_a_folder():
  with pytest.raises(ValueError, match=r"needs mmqa_dir.*--config\.grail\.mmqa_dir"):
    grail_sets.load_evidence_set("mmqa")


def _config_strings(d, prefix=""):
  for k, v in d.items():
    if hasattr(v, "items"):
      yield from _config_strings(v, f"{prefix}{k}.")
    elif isinstance(v, str):
      yield prefix + k, v


@pytest.mark.parametrize("name", ["base", "grail", "tiny", "smollm2", "llama3_8b"])
def test_config_paths_stay_inside_the_project(name):
  import importlib
  module = importlib.import_module(f"configs.{name}")
  c = module.get_config() if hasattr(module, "get_config") else module.get_base_config()
  for key, value in _config_strings(c):
    path = pathlib.PurePosixPath(value)
    assert not path.is_absolute() and ".." not in path.parts, (name, key, value)


def test_no_source_file_reads_beside_the_project():
  """No library, launcher, benchmark, config or test names the folder beside the clone (data
  comes from committed fixtures or through flags)."""
  name = "sha" + "red"  # spelled apart so that this file does not match itself
  needles = (f"../{name}", f'"{name}"', f"{name}/data")
  offenders = []
  for folder in ("graphloom_jax", "configs", "launch", "benchmarks", "tests"):
    for path in sorted((ROOT / folder).rglob("*.py")):
      text = path.read_text(encoding="utf-8")
      for needle in needles:
        if needle in text:
          offenders.append(f"{path.relative_to(ROOT)}: {needle}")
  assert not offenders


@pytest.mark.parametrize("argv,flag", [
    (["launch.train_grail", "--config.grail.data=mmqa"], "--config.grail.data=mmqa"),
    (["launch.evaluate_retrieval", "--task=sequential_pool", "--data=mmqa"], "--data=mmqa"),
])
def test_mmqa_launchers_name_the_flag(tmp_path, argv, flag):
  from fakes import assert_usage_errors
  assert_usage_errors(argv, [([], f"{flag} needs --config.grail.mmqa_dir=FOLDER"),
                             ([f"--config.grail.mmqa_dir={tmp_path / 'nowhere'}"],
                              "no such folder")], tmp_path / "out")
