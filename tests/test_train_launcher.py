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
