"""What the launchers share: config files found relative to the package, and flag checks that
run before anything heavy is loaded.

`DEFINE_config_file` is `ml_collections.config_flags.DEFINE_config_file` with one difference:
a relative path that does not exist from the current directory is looked up under the
project root (the folder holding `configs/`), so `--config=configs/tiny.py` and the defaults
work from any directory. A config file found nowhere is a flag error at once (ml_collections
would defer it to the first use of the config, after the models are loaded).

The `check_*` helpers raise `app.UsageError` with a message that starts with the flag and its
value, so a bad flag fails in milliseconds with a message naming it.
"""

import math
import pathlib

from absl import app, flags
from ml_collections import config_flags
from ml_collections.config_flags import config_flags as _config_flags_impl

import configs

PROJECT_ROOT = pathlib.Path(configs.__file__).resolve().parents[1]
CONFIGS_DIR = pathlib.Path(configs.__file__).resolve().parent
# Model "paths" that name no file.
WEIGHT_NAMES = ("embedded", "random")


def resolve_config_path(path: str) -> str:
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


class _PackageConfigParser(_config_flags_impl.ConfigFileFlagParser):
  """ConfigFileFlagParser that resolves the path with `resolve_config_path` first."""

  def parse(self, path):
    return super().parse(resolve_config_path(path))


def DEFINE_config_file(name: str, default: str, help_string: str):  # noqa: N802 (absl style)
  """`config_flags.DEFINE_config_file` whose paths are found relative to the package too."""
  holder = config_flags.DEFINE_config_file(name, resolve_config_path(default), help_string)
  flags.FLAGS[name].parser = _PackageConfigParser(name)
  return holder


def _fail(flag: str, value, why: str):
  raise app.UsageError(f"--{flag}={value}: {why}")


def check_input_file(flag: str, value, *, nonempty: bool = True) -> pathlib.Path:
  """An existing, readable, non-empty regular file."""
  if value is None or not str(value).strip():
    _fail(flag, value, "give a file")
  p = pathlib.Path(value).expanduser()
  if not p.exists():
    _fail(flag, value, "no such file")
  if not p.is_file():
    _fail(flag, value, "not a regular file")
  try:
    with open(p, "rb") as f:
      head = f.read(1)
  except OSError as e:
    _fail(flag, value, f"cannot be read ({e.strerror})")
  if nonempty and not head:
    _fail(flag, value, "the file is empty")
  return p


def check_input_dir(flag: str, value) -> pathlib.Path:
  if value is None or not str(value).strip():
    _fail(flag, value, "give a folder")
  p = pathlib.Path(value).expanduser()
  if not p.is_dir():
    _fail(flag, value, "no such folder" if not p.exists() else "not a folder")
  return p


def _check_parent(flag: str, value, p: pathlib.Path) -> None:
  """The nearest existing ancestor of p must be a folder."""
  for parent in p.parents:
    if parent.exists():
      if not parent.is_dir():
        _fail(flag, value, f"{parent} is a file, not a folder")
      break


def check_output_file(flag: str, value) -> pathlib.Path:
  """A path a file can be written to: not a folder, its parent not a file."""
  if value is None or not str(value).strip():
    _fail(flag, value, "give a file path")
  p = pathlib.Path(value).expanduser()
  if p.is_dir():
    _fail(flag, value, "is a folder; give a file path")
  _check_parent(flag, value, p)
  return p


def check_output_dir(flag: str, value) -> pathlib.Path:
  """A path a folder can be created at (or an existing folder)."""
  if value is None or not str(value).strip():
    _fail(flag, value, "give a folder")
  p = pathlib.Path(value).expanduser()
  if p.exists() and not p.is_dir():
    _fail(flag, value, "is a file, not a folder")
  _check_parent(flag, value, p)
  return p


def check_int(flag: str, value, minimum: int) -> int:
  if isinstance(value, bool) or not isinstance(value, int):
    _fail(flag, value, "must be an integer")
  if value < minimum:
    _fail(flag, value, f"must be >= {minimum}")
  return value


def check_weights(flag: str, value, allowed=WEIGHT_NAMES) -> None:
  """A weights path (file or folder) that exists, or one of the names in `allowed`."""
  if value is None or not str(value).strip():
    _fail(flag, value, f"give a weights path or one of {', '.join(allowed)}")
  if str(value) in allowed:
    return
  p = pathlib.Path(value).expanduser()
  if not p.exists():
    _fail(flag, value, f"no such file or folder (or use one of {', '.join(allowed)})")
  if p.is_dir() and not any(p.iterdir()):
    _fail(flag, value, "the folder is empty")
  if p.is_file() and p.stat().st_size == 0:
    _fail(flag, value, "the file is empty")


def check_mmqa(data: str, mmqa_dir: str, flag: str) -> None:
  """GRAIL's MMQA data needs the official files' folder (the project ships none)."""
  if data == "mmqa" and not mmqa_dir:  # the project ships no MMQA folder
    raise app.UsageError(
        f"{flag} needs --config.grail.mmqa_dir=FOLDER, the folder with the official "
        "MMQA_dev.jsonl(.gz) and MMQA_images.jsonl(.gz) (allenai/multimodalqa, dataset/)")
  if data == "mmqa" and not pathlib.Path(mmqa_dir).is_dir():
    raise app.UsageError(f"--config.grail.mmqa_dir={mmqa_dir}: no such folder")


def check_model_config(model_cfg, prefix: str = "config.model") -> None:
  """The model section's weights, dtype and max_seq_len, before anything is loaded."""
  check_weights(f"{prefix}.weights", model_cfg.weights)
  if model_cfg.dtype not in ("float32", "bfloat16"):
    _fail(f"{prefix}.dtype", model_cfg.dtype, "must be float32 or bfloat16")
  if model_cfg.max_seq_len is not None:
    check_int(f"{prefix}.max_seq_len", model_cfg.max_seq_len, 1)


def check_sampling_flags(temperature, top_p, seed, max_new_tokens) -> None:
  """Generation flags with the decoder's own rules (`decoder.check_sampling`)."""
  from graphloom_jax.models import decoder as decoder_lib

  check_int("max_new_tokens", max_new_tokens, 1)
  for name, value in (("temperature", temperature), ("top_p", top_p)):
    if not math.isfinite(value):
      _fail(name, value, "must be a finite number")
  try:
    decoder_lib.check_sampling(temperature, top_p, seed)
  except (TypeError, ValueError) as e:
    name = next(n for n in ("temperature", "top_p", "seed") if str(e).startswith(n))
    _fail(name, {"temperature": temperature, "top_p": top_p, "seed": seed}[name], str(e))
