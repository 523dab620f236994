"""JAX's persistent compilation cache in a per-user folder, so a second run of a job loads its
compiled executables instead of compiling them again (warm starts).

`enable(path=None)` points JAX's cache (`jax_compilation_cache_dir`) at `path`, else at
$GRAPHLOOM_JAX_CACHE_DIR, else at `$XDG_CACHE_HOME/graphloom_jax/jax` (default
`~/.cache/graphloom_jax/jax`), and caches every executable that took at least
`MIN_COMPILE_SECS` to compile (JAX's own JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS, when set,
wins: 0 caches every executable, which makes what a run writes independent of machine load).
GRAPHLOOM_JAX_CACHE_DIR=off (or 0, false, none) turns it off;
so does `--jax_enable_compilation_cache=false`, and a `--jax_compilation_cache_dir` given on the
command line wins. The launchers call it (`launch.common.run`); library users call it once
before their first jitted call.

JAX keys each entry by the computation, the compile options, the devices and the jax / jaxlib
versions, so an entry is never reused where it would compile differently; the folder may be
deleted at any time.
"""

from __future__ import annotations

import os
import pathlib

import jax
from absl import logging

ENV = "GRAPHLOOM_JAX_CACHE_DIR"
OFF = ("off", "0", "false", "none", "no")
# Executables that compile faster than this are not worth a file. JAX's default (1 s) would leave
# out the many smaller executables a job compiles, which together take much of a cold start.
MIN_COMPILE_SECS = 0.2
MIN_COMPILE_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def default_dir() -> pathlib.Path:
  base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
  return pathlib.Path(base) / "graphloom_jax" / "jax"


def enable(path: str | os.PathLike | None = None) -> pathlib.Path | None:
  """Turns the persistent cache on (module docstring); returns its folder, or None when it is
  off. A cache folder set already (a --jax_compilation_cache_dir flag) is kept."""
  if not jax.config.jax_enable_compilation_cache:
    return None
  if jax.config.jax_compilation_cache_dir:
    return pathlib.Path(jax.config.jax_compilation_cache_dir)
  if path is None:
    env = os.environ.get(ENV)
    if env is not None and env.strip().lower() in OFF + ("",):
      return None
    path = env or default_dir()
  folder = pathlib.Path(path).expanduser()
  try:
    folder.mkdir(parents=True, exist_ok=True)
  except OSError as e:  # a read-only home: run cold rather than fail
    logging.warning("no compilation cache: cannot create %s (%s); set %s to a writable folder "
                    "or to 'off'", folder, e.strerror, ENV)
    return None
  jax.config.update("jax_compilation_cache_dir", str(folder))
  if MIN_COMPILE_ENV not in os.environ:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
  return folder
