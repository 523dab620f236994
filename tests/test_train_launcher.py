"""`python -m launch.train --config=configs/tiny.py --workdir=DIR` end to end: the loss falls,
one JSON line per logged step lands in DIR/metrics.jsonl, and a rerun resumes from DIR."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from graphloom_jax import assets

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not assets.available("minilm"), reason="embedded MiniLM not installed")
def test_tiny_training_run_and_resume(tmp_path):
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/tiny.py",
         f"--workdir={tmp_path}"]
  subprocess.run(cmd + ["--config.train.num_steps=20"], cwd=ROOT, env=env, check=True,
                 capture_output=True, timeout=900)
  lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  losses = [(l["step"], l["loss"]) for l in lines if "loss" in l]
  assert [s for s, _ in losses] == [5, 10, 15, 20]
  assert losses[-1][1] < losses[0][1]
  # a longer rerun in the same workdir continues from step 20 instead of starting over
  subprocess.run(cmd + ["--config.train.num_steps=30"], cwd=ROOT, env=env, check=True,
                 capture_output=True, timeout=900)
  lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [l["step"] for l in lines if "loss" in l] == [5, 10, 15, 20, 25, 30]
  # what produced the run: versions, commit, devices and config, with no absolute path
  record = json.loads((tmp_path / "provenance.json").read_text())
  assert record["versions"]["jax"] and record["devices"]["backend"] == "cpu"
  assert record["config"]["train"]["num_steps"] == 30
  heads = json.loads((tmp_path / "heads" / "heads.json").read_text())
  assert heads["provenance"]["git"]["commit"] == record["git"]["commit"]
  assert not _absolute_paths(heads), _absolute_paths(heads)


def _absolute_paths(obj) -> list[str]:
  if isinstance(obj, dict):
    return [p for v in obj.values() for p in _absolute_paths(v)]
  if isinstance(obj, list):
    return [p for v in obj for p in _absolute_paths(v)]
  return [obj] if isinstance(obj, str) and obj.startswith(("/", "~")) else []
