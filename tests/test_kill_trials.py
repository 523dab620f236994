"""benchmarks/robustness/kill_trials.py itself: one index trial end to end (the full 20-trial run of every
kind is too slow for the suite; its figures are in benchmarks/robustness/kill_trials.md)."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_one_index_kill_trial_loads_the_old_or_new_version(tmp_path):
  out = tmp_path / "kill.md"
  proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "robustness" / "kill_trials.py"),
                         "--trials=1", "--kinds=index", f"--workdir={tmp_path / 'work'}",
                         f"--output={out}"], cwd=tmp_path, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  # trials | killed mid-run (the kill may land after the save finished) | loadable | equal
  row = re.compile(r"\| index \| 1 \| [01] \| 1 \| 1 \|")
  assert row.search(proc.stdout) and row.search(out.read_text()), proc.stdout[-2000:]
  assert re.search(r"load gives the (old|new) version", proc.stdout)


def test_unknown_kind_is_a_usage_error(tmp_path):
  proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "robustness" / "kill_trials.py"),
                         "--kinds=index,bogus"], cwd=tmp_path, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode != 0 and "--kinds: unknown ['bogus']" in proc.stderr
