"""benchmarks/robustness/probe_inputs.py without its launcher probes (those are subprocesses; the launcher
flags have their own tests): no probe may end as a silent wrong result or a crash."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_library_probes_give_no_silent_wrong_result_and_no_crash(tmp_path):
  proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "robustness" / "probe_inputs.py"),
                         "--launchers=false"], cwd=tmp_path, capture_output=True, text=True,
                        timeout=600)
  total = re.search(r"\| \*\*all\*\* \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|",
                    proc.stdout)
  assert total, proc.stdout[-3000:] + proc.stderr[-3000:]
  probes, clear, unclear, silent, crash, correct = map(int, total.groups())
  assert (silent, crash) == (0, 0), proc.stdout[-3000:]
  assert probes == clear + unclear + silent + crash + correct and probes >= 100
  assert proc.returncode == 0
