"""The persistent compilation cache (graphloom_jax.compilation_cache): a second process loads
what the first compiled (JAX reports cache hits and writes no new entry), the folder comes from
the argument, $GRAPHLOOM_JAX_CACHE_DIR or the per-user default, 'off' turns it off, a folder
set by --jax_compilation_cache_dir wins, and the launchers turn it on."""

import os
import pathlib
import subprocess
import sys


ROOT = pathlib.Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
import jax, jax.numpy as jnp
from graphloom_jax import compilation_cache
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
for flag in sys.argv[2:]:
  name, value = flag.split("=", 1)
  jax.config.update(name, {"true": True, "false": False}.get(value, value))
folder = compilation_cache.enable(None if sys.argv[1] == "-" else sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
y = jax.jit(lambda x: jnp.tanh(x @ x.T) * 3 + 1)(jnp.ones((16, 16)))
y.block_until_ready()
print(json.dumps({"folder": None if folder is None else str(folder),
                  "dir": jax.config.jax_compilation_cache_dir,
                  "hits": events.count("/jax/compilation_cache/cache_hits"),
                  "misses": events.count("/jax/compilation_cache/cache_misses")}))
"""


def _probe(*args, env_extra=None):
  import json
  env = {k: v for k, v in os.environ.items() if k != "GRAPHLOOM_JAX_CACHE_DIR"}
  env.update(JAX_PLATFORMS="cpu", **(env_extra or {}))
  proc = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _entries(folder):
  return sorted(p.name for p in pathlib.Path(folder).glob("*-cache"))


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
  first = _probe(str(tmp_path / "c"))
  assert first["folder"] == first["dir"] == str(tmp_path / "c")
  assert first["misses"] >= 1 and first["hits"] == 0
  entries = _entries(tmp_path / "c")
  assert entries
  second = _probe(str(tmp_path / "c"))
  assert second["hits"] >= 1 and second["misses"] == 0, second
  assert _entries(tmp_path / "c") == entries  # nothing compiled again


def test_where_the_folder_comes_from_and_how_to_turn_it_off(tmp_path):
  env = _probe("-", env_extra={"GRAPHLOOM_JAX_CACHE_DIR": str(tmp_path / "env")})
  assert env["folder"] == str(tmp_path / "env") and _entries(tmp_path / "env")
  home = _probe("-", env_extra={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
  assert home["folder"] == str(tmp_path / "xdg" / "graphloom_jax" / "jax")
  for off in ("off", "0", ""):
    got = _probe("-", env_extra={"GRAPHLOOM_JAX_CACHE_DIR": off})
    assert got["folder"] is None and got["dir"] is None and got["hits"] == 0, off
  flag = _probe(str(tmp_path / "arg"), f"jax_compilation_cache_dir={tmp_path / 'flag'}")
  assert flag["folder"] == str(tmp_path / "flag") and not (tmp_path / "arg").exists()
  disabled = _probe(str(tmp_path / "arg"), "jax_enable_compilation_cache=false")
  assert disabled["folder"] is None and not (tmp_path / "arg").exists()


def test_an_unwritable_folder_runs_cold_with_a_warning(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  got = _probe(str(blocker / "cache"))
  assert got["folder"] is None and got["hits"] == 0


def test_the_launchers_run_warm_the_second_time(tmp_path):
  """Two runs of the generate launcher on the embedded model: the second writes no new cache
  entry (every executable it needed was loaded) and prints the same answer. Every executable
  is cached (minimum compile time 0): with the 0.2 s threshold, a small executable that
  compiles in 0.19 s in one run and 0.21 s in the next under load is written by the second."""
  script = pathlib.Path(sys.executable).parent / "graphloom-generate"
  env = dict(os.environ, JAX_PLATFORMS="cpu", GRAPHLOOM_JAX_CACHE_DIR=str(tmp_path / "c"),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  args = [str(script), "--prompt=Name a colour.", "--max_new_tokens=3", "--max_seq_len=64"]
  outs = []
  for _ in range(2):
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outs.append((proc.stdout, _entries(tmp_path / "c")))
  assert outs[0][1], "the first run cached nothing"
  assert outs[1] == outs[0]


def test_jax_min_compile_time_setting_wins(tmp_path):
  """enable() caches executables of 0.2 s and more unless JAX's own environment setting of the
  minimum compile time is given, which it keeps."""
  code = ("import jax\nfrom graphloom_jax import compilation_cache\n"
          f"compilation_cache.enable({str(tmp_path / 'c')!r})\n"
          "print(jax.config.jax_persistent_cache_min_compile_time_secs)\n")
  got = []
  for extra in ({}, {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.7"}):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GRAPHLOOM_JAX_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}
    env.update(JAX_PLATFORMS="cpu", **extra)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got.append(float(proc.stdout.split()[-1]))
  assert got == [0.2, 0.7]
