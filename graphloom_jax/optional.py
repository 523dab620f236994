"""Imports of optional dependencies, each named after the setup.py extra that installs it.

The default path (building graphs, retrieving with the exact index, answering, training, the
TFDS datasets) needs only the runtime requirements. Four paths need more:

  extra          modules                       what needs them
  [scann]        scann                         retrieval.index.ScannIndex (retrieval.index="scann")
  [beam]         apache_beam                   data.beam_graphs (graph building on Beam runners)
  [nli]          torch                         verify.NLIVerifier (verify.judge="nli:..."), REBEL
  [tensorboard]  tensorboardX                  TensorBoard events beside a run's metrics.jsonl

`require` imports such a module or fails with an ImportError that names the extra to install.
"""

import importlib
import importlib.util
import types

EXTRAS = {
    "scann": "scann",
    "apache_beam": "beam",
    "torch": "nli",
    "tensorboardX": "tensorboard",
}


def require(module: str, purpose: str) -> types.ModuleType:
  """`importlib.import_module(module)`, or an ImportError saying which extra provides it."""
  parts = module.split(".")
  prefix = next((".".join(parts[:n]) for n in range(len(parts), 0, -1)
                 if ".".join(parts[:n]) in EXTRAS), None)
  if prefix is None:
    raise ValueError(f"{module!r} is not an optional dependency (known: {sorted(EXTRAS)})")
  extra = EXTRAS[prefix]
  try:
    return importlib.import_module(module)
  except ImportError as e:
    raise ImportError(f"{purpose} needs {module!r}, which the optional [{extra}] extra "
                      f"installs: pip install 'graphloom_jax[{extra}]' ({e})") from e


def available(module: str) -> bool:
  """Whether `module` can be imported (without importing it)."""
  try:
    return importlib.util.find_spec(module) is not None
  except (ImportError, ValueError):
    return False
