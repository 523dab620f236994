"""What produced an artifact: package versions, the git commit, the devices and the config.

`record(config)` is written as `provenance.json` into every run folder (training workdirs,
evaluation and retrieval outputs) and into `heads.json`, so a number can be traced to the code
and the stack that made it. Paths are stored portably (`portable_path`): relative to the
project, or as `<package>/<file>` for files inside an installed package (the embedded models),
never as an absolute path of the machine that wrote them.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import pathlib
import platform
import subprocess
import sys
import sysconfig
from typing import Any

from graphloom_jax import atomic

FILE = "provenance.json"
PACKAGES = ("graphloom_jax", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint",
            "transformers", "numpy")
PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]


def versions() -> dict[str, str]:
  """Installed version of each of PACKAGES ("not installed" when absent)."""
  out = {}
  for name in PACKAGES:
    try:
      out[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      out[name] = "not installed"
  return out


@functools.cache
def git_commit() -> dict[str, Any]:
  """The checkout's commit and whether tracked files differ from it; "unknown" outside a clone
  (an installed package) or without git."""
  def git(*args):
    return subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True,
                          text=True, timeout=30, check=True).stdout.strip()
  try:
    if pathlib.Path(git("rev-parse", "--show-toplevel")).resolve() != PROJECT_ROOT:
      return {"commit": "unknown", "dirty": None}
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
  except (OSError, subprocess.SubprocessError):
    return {"commit": "unknown", "dirty": None}
  return {"commit": commit, "dirty": dirty}


def devices() -> dict[str, Any]:
  import jax
  local = jax.local_devices()
  return {"backend": jax.default_backend(), "local": len(local), "global": jax.device_count(),
          "kinds": sorted({d.device_kind for d in local}), "process_index": jax.process_index(),
          "process_count": jax.process_count()}


def portable_path(path) -> str:
  """`path` without the machine's layout: relative to the project root when inside it,
  `<package>/<file>` when inside an installed package, else the path as given when relative,
  else its file name."""
  if path is None or str(path) in ("", "embedded", "random"):
    return str(path)
  p = pathlib.Path(str(path)).expanduser()
  if not p.is_absolute():
    return str(p)
  p = p.resolve()
  if p.is_relative_to(PROJECT_ROOT) and not _in_site_packages(p):
    return str(p.relative_to(PROJECT_ROOT))
  for site in _site_dirs():
    if p.is_relative_to(site):
      return str(p.relative_to(site))
  return p.name


def _site_dirs() -> list[pathlib.Path]:
  paths = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
  return [pathlib.Path(p).resolve() for p in sorted(paths)]


def _in_site_packages(p: pathlib.Path) -> bool:
  return any(p.is_relative_to(s) for s in _site_dirs())


def record(config=None, **extra) -> dict[str, Any]:
  """Versions, commit, Python, platform, devices and (a ConfigDict's JSON) config."""
  out = {"versions": versions(), "git": git_commit(), "python": sys.version.split()[0],
         "platform": platform.platform(), "devices": devices()}
  if config is not None:
    out["config"] = json.loads(config.to_json_best_effort())
  return {**out, **extra}


def write(folder, config=None, **extra) -> pathlib.Path:
  """Writes `record(config, **extra)` to folder/provenance.json (atomically)."""
  path = pathlib.Path(folder) / FILE
  path.parent.mkdir(parents=True, exist_ok=True)
  atomic.atomic_write_json(path, record(config, **extra), indent=1)
  return path
