"""Converts decoder weights (safetensors / Flax msgpack / GGUF / orbax) to an orbax checkpoint
in graphloom_jax's layout, with its tokenizer beside it.

  python -m launch.convert --weights=embedded --workdir=/tmp/smollm2_orbax
  python -m launch.generate --weights=/tmp/smollm2_orbax --prompt="Hi"
"""

import pathlib

from absl import app, flags, logging

from graphloom_jax.models import decoder as decoder_lib
from . import common

flags.DEFINE_string("weights", "embedded", "source weights path or 'embedded'")
flags.DEFINE_string("workdir", None, "output folder (created)", required=True)
flags.DEFINE_alias("output", "workdir")


def check_flags(weights: str, workdir: str):
  """Both paths before anything is read: the source exists, the output is new or empty."""
  common.check_weights("weights", weights, allowed=("embedded",))
  out = common.check_output_dir("workdir", workdir)
  if out.is_dir() and any(out.iterdir()):
    raise app.UsageError(f"--workdir={workdir}: the folder exists and is not empty; choose a new "
                         "output folder")
  if weights != "embedded":
    src = pathlib.Path(weights).expanduser().resolve()
    if src.is_dir() and out.resolve().is_relative_to(src):
      raise app.UsageError(f"--workdir={workdir}: inside the source folder --weights={weights}")


def main(argv):
  del argv
  check_flags(flags.FLAGS.weights, flags.FLAGS.workdir)
  out = decoder_lib.convert_to_orbax(flags.FLAGS.weights, flags.FLAGS.workdir)
  logging.info("wrote %s", out)


def cli():
  """The `graphloom-convert` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
