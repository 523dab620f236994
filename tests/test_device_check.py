"""benchmarks/device_check.sh's CPU dry run (tiny shapes) prints one JSON line with every figure
the device run reports, and its built-in 8B shapes are configs/llama3_8b.py's."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_dry_run_prints_every_figure():
  env = dict(os.environ, PYTHON=sys.executable, JAX_PLATFORMS="cpu")
  out = subprocess.run(["bash", str(ROOT / "benchmarks" / "device_check.sh"), "--dry_run"],
                       env=env, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result["dry_run"] and result["backend"] == "cpu"
  assert result["errors"] == {} and result["skipped"] == []
  for dtype in ("float32", "bfloat16"):
    assert result["smollm2"][dtype]["b1"] > 0 and result["smollm2"][dtype]["b8"] > 0
  big = result["llama8b"]
  assert big["decode_tok_s_scan"] > 0 and big["decode_tok_s_unstacked"] > 0
  assert big["roofline_tok_s"] > 0 and big["bytes_per_token"] > 0
  assert set(result["kgjsa_step"]) == {"64", "128", "256"}
  for row in result["kgjsa_step"].values():
    assert row["dense_ms"] > 0 and row["kgjsa_ms"] > 0
  assert result["prefill"]["implementation"] == "xla"
  assert result["prefill"]["fused_tok_s"] > 0 and result["prefill"]["einsum_tok_s"] > 0


def test_built_in_8b_shapes_are_the_configs():
  """The GPU script carries its own copy of the 8B shapes (it runs without the configs); read
  from its source, not imported (a test imports no benchmark)."""
  import ast
  tree = ast.parse((ROOT / "benchmarks" / "device_check.py").read_text())
  node = next(n.value for n in tree.body if isinstance(n, ast.Assign)
              and getattr(n.targets[0], "id", "") == "LLAMA3_8B")

  def literal(n):  # literals and dict(key=literal, ...) calls
    if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "dict" and not n.args:
      return {k.arg: literal(k.value) for k in n.keywords}
    return ast.literal_eval(n)

  built_in = literal(node)
  from graphloom_jax.configs import llama3_8b
  assert built_in == llama3_8b.get_config().model.arch.to_dict()
