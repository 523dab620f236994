"""What the launchers share: how they run (`run`), config files found relative to the project,
and flag checks that run before anything heavy is loaded.

`run(main)` is `absl.app.run(main)` with the conventions every launcher follows:
- JAX's own options are flags too (`--jax_platforms=cpu`, `--jax_enable_x64`, ...:
  `jax.config.config_with_absl()`, the form JAX recommends next to `app.run`);
- a bad flag, a config override that names no key (`--config.train.num_stepz=3`), a config file
  that cannot be loaded, a stray positional argument and an `app.UsageError` raised by `main`
  each print one line, `LAUNCHER: error: MESSAGE`, and exit with status 1 (no traceback, no
  usage text; `--help` prints that);
- absl logging at INFO (`--verbosity` changes it) with orbax's per-checkpoint INFO lines
  dropped, and after `set_log_process` every line prefixed with the process index;
- JAX's persistent compilation cache on, in a per-user folder (`graphloom_jax.compilation_cache`:
  GRAPHLOOM_JAX_CACHE_DIR=DIR or off, `--jax_compilation_cache_dir`), so a second run starts warm.

`DEFINE_config_file` is `ml_collections.config_flags.DEFINE_config_file` whose path may be given
relative to the project root as well as to the current directory (`--config=configs/tiny.py`
works from any folder), listed by the launcher's `--help`. A config file found nowhere is a flag
error at once.

The `check_*` helpers raise `app.UsageError` with a message that starts with the flag and its
value, so a bad flag fails in milliseconds with a message naming it.
"""

import logging as py_logging
import math
import pathlib
import re
import sys
from collections.abc import Callable

from absl import app, flags, logging
from ml_collections import config_flags

from graphloom_jax.configs import resolve_path

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
# Model "paths" that name no file.
WEIGHT_NAMES = ("embedded", "random")
# Flags defined by DEFINE_config_file: their paths are resolved before absl parses them.
_CONFIG_FLAGS: set[str] = set()


def _calling_module() -> str:
  """The module name absl files a flag under when that module defines it."""
  name = sys._getframe(2).f_globals.get("__name__", "")  # pylint: disable=protected-access
  return sys.argv[0] if name == "__main__" else name


def DEFINE_config_file(name: str, default: str, help_string: str):  # noqa: N802 (absl style)
  """`config_flags.DEFINE_config_file`, its path resolved by `resolve_path` (by `run`,
  before parsing) and the flag listed in the calling launcher's `--help`."""
  _CONFIG_FLAGS.add(name)
  try:
    holder = config_flags.DEFINE_config_file(name, resolve_path(default), help_string)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    # ml_collections applies --NAME.a.b overrides of the default file here, at definition
    exit_with_error(_override_error(sys.argv, e))
  flags.FLAGS.register_key_flag_for_module(_calling_module(), flags.FLAGS[name])
  return holder


def _prog() -> str:
  main = sys.modules.get("__main__")
  spec = getattr(main, "__spec__", None)
  return spec.name if spec is not None and spec.name else pathlib.Path(sys.argv[0]).name


def exit_with_error(message: str, exitcode: int = 1):
  """Prints `PROG: error: MESSAGE` (one line) to stderr and exits."""
  one_line = " ".join(str(message).split())
  sys.stderr.write(f"{_prog()}: error: {one_line}\n")
  sys.exit(exitcode)


def _resolve_config_args(argv: list[str]) -> list[str]:
  """argv with the value of every config-file flag made absolute (`resolve_path`)."""
  out = list(argv)
  i = 1
  while i < len(out) and out[i] != "--":
    for name in _CONFIG_FLAGS:
      for prefix in (f"--{name}=", f"-{name}="):
        if out[i].startswith(prefix):
          value = out[i][len(prefix):]
          try:
            out[i] = prefix + resolve_path(value)
          except ValueError as e:
            exit_with_error(f"--{name}={value}: {e}")
      if out[i] in (f"--{name}", f"-{name}") and i + 1 < len(out):
        try:
          out[i + 1] = resolve_path(out[i + 1])
        except ValueError as e:
          exit_with_error(f"--{name}={out[i + 1]}: {e}")
    i += 1
  return out


def _override_error(argv: list[str], error: BaseException) -> str:
  """One line for an exception raised while ml_collections applied `--config.a.b=v`: the
  override it came from (the first whose path holds the key the message names) and the reason."""
  text = str(error.args[0] if error.args else error).replace("\\n", " ").replace("\\'", "'")
  text = " ".join(text.split())
  suggestion = re.search(r'Did you mean "([^"]+)" instead of "([^"]+)"', text)
  key = suggestion.group(2) if suggestion else next(iter(re.findall(r"'([^'\s]+)'", text)), None)
  overrides = [a.split("=", 1)[0] for a in argv[1:]
               if any(a.startswith(f"--{n}.") for n in _CONFIG_FLAGS)]
  named = [o for o in overrides if key and key in o.split(".")]
  if not named:
    return text.strip("'\"")
  hint = f" (did you mean {suggestion.group(1)!r}?)" if suggestion else ""
  return f"{named[0]}: the config has no key {key!r}{hint}"


def _parse_flags(argv: list[str], known_only: bool) -> list[str]:
  argv = _resolve_config_args(argv)
  try:
    return flags.FLAGS(argv, known_only=known_only)
  except flags.Error as e:
    exit_with_error(str(e))
  except (AttributeError, KeyError, TypeError, ValueError) as e:  # raised by a config override
    exit_with_error(_override_error(argv, e))
  except Exception as e:  # a config file that fails to load  # pylint: disable=broad-except
    exit_with_error(f"{type(e).__name__}: {e}")


class _DropOrbaxInfo(py_logging.Filter):
  """orbax logs every checkpoint save at INFO; keep its warnings, drop the rest unless -v 1."""

  def filter(self, record):
    return (record.levelno >= py_logging.WARNING or logging.get_verbosity() >= 1
            or "/orbax/" not in record.pathname.replace("\\", "/"))


class _ProcessPrefix(py_logging.Filter):
  def __init__(self, prefix: str):
    super().__init__()
    self.prefix = prefix

  def filter(self, record):
    record.msg = f"{self.prefix}{record.msg}"
    return True


def set_log_process(index: int, count: int) -> None:
  """Prefixes every absl log line with `[process INDEX/COUNT] ` (for multi-process runs)."""
  handler = logging.get_absl_handler()
  for f in [f for f in handler.filters if isinstance(f, _ProcessPrefix)]:
    handler.removeFilter(f)
  if count > 1:
    handler.addFilter(_ProcessPrefix(f"[process {index}/{count}] "))


def _adopt_as_main(module) -> None:
  """Under a console script (`graphloom-answer`), `__main__` is the script's wrapper: give it the
  launcher's docstring and key flags, which absl's `--help` reads from `__main__` and
  `sys.argv[0]`, so the help is the same as `python -m launch.answer --help`."""
  main_module = sys.modules["__main__"]
  if module is main_module:
    return
  main_module.__doc__ = module.__doc__
  for flag in flags.FLAGS.get_key_flags_for_module(module.__name__):
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def run(main: Callable[[list[str]], object], *, pass_extra_args: bool = False) -> None:
  """`app.run(main)` with the launchers' conventions (the module docstring lists them).

  pass_extra_args: flags this process does not define reach `main` in argv (launch.build_graphs
  hands them to Beam) instead of being errors.
  """
  import jax  # pylint: disable=import-outside-toplevel

  from graphloom_jax import compilation_cache  # pylint: disable=import-outside-toplevel

  jax.config.config_with_absl()
  _adopt_as_main(sys.modules[main.__module__])

  def checked_main(argv):
    if len(argv) > 1 and not pass_extra_args:
      exit_with_error(f"unexpected arguments {argv[1:]} (flags are written --name=value)")
    logging.get_absl_handler().addFilter(_DropOrbaxInfo())
    compilation_cache.enable()
    try:
      return main(argv)
    except app.UsageError as e:
      exit_with_error(str(e), e.exitcode)

  app.run(checked_main, flags_parser=lambda argv: _parse_flags(argv, pass_extra_args))


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


def check_grail_data(data: str, g, flag: str) -> None:
  """The data GRAIL reads (`--config.grail.data` or --data) and the keys it needs, before
  anything is loaded: MMQA's folder (check_mmqa), or the PathQuestion / WorldCup2014 release
  folder and datasets."""
  from graphloom_jax.data import grail_sets
  if data not in grail_sets.DATA:
    raise app.UsageError(f"{flag}: expected one of {', '.join(grail_sets.DATA)}")
  check_mmqa(data, g.mmqa_dir, flag)
  if data in grail_sets.PATH_READERS:
    if not g.pathqa_dir:
      raise app.UsageError(f"{flag} needs --config.grail.pathqa_dir=FOLDER, the folder with the "
                           "release's question and KB files")
    check_input_dir("config.grail.pathqa_dir", g.pathqa_dir)
    names = grail_sets.PATH_READERS[data].NAMES
    given = [c.strip() for c in g.pathqa_configs.split(",") if c.strip()]
    if not given or any(c not in names for c in given):
      raise app.UsageError(f"--config.grail.pathqa_configs={g.pathqa_configs!r}: expected a "
                           f"comma-separated list of {', '.join(names)}")
  if g.embedded_dir:
    check_input_dir("config.grail.embedded_dir", g.embedded_dir)


def model_section(config, allowed=WEIGHT_NAMES, **flag_values):
  """`config.model` with each flag given on the command line (weights=, dtype=, max_seq_len=;
  None when not given) in place of its key, checked before anything is loaded; an error names
  the flag that set the value (`--weights=...`) or else the key (`--config.model.weights=...`)."""
  model = config.model
  for key, value in flag_values.items():
    if value is not None:
      model[key] = value
  name = {k: (k if flag_values.get(k) is not None else f"config.model.{k}")
          for k in ("weights", "dtype", "max_seq_len")}
  check_weights(name["weights"], model.weights, allowed=allowed)
  if model.dtype not in ("float32", "bfloat16"):
    _fail(name["dtype"], model.dtype, "must be float32 or bfloat16")
  if model.get("max_seq_len") is not None:
    check_int(name["max_seq_len"], model.max_seq_len, 1)
  return model


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
