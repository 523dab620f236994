"""The user-facing ml_collections config files (`--config=configs/NAME.py`), and where a config
path points (`resolve_path`): the launchers accept a path relative to the current directory,
to the project root, or to this folder, so `--config=configs/tiny.py` works from any folder."""

import pathlib

CONFIGS_DIR = pathlib.Path(__file__).resolve().parent
# The folder configs/ sits in: the repository root in a clone, the package in an installation.
PROJECT_ROOT = CONFIGS_DIR.parent


def resolve_path(path: str) -> str:
  """`path` (optionally "file.py:arguments") with its file part made absolute: as given when it
  exists from the current directory, else under the project root, else under configs/."""
  file, sep, rest = str(path).partition(":")
  if not file:
    raise ValueError("empty config path")
  p = pathlib.Path(file).expanduser()
  candidates = [p] if p.is_absolute() else [p, PROJECT_ROOT / p, CONFIGS_DIR / p]
  for c in candidates:
    if c.is_file():
      return str(c.resolve()) + sep + rest
  looked = ", ".join(str(c) for c in candidates)
  raise ValueError(f"no config file {file!r} (looked for {looked})")
