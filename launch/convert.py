"""Converts decoder weights (safetensors / Flax msgpack / GGUF / orbax) to an orbax checkpoint
in graphloom_jax's layout, with its tokenizer beside it.

  python -m launch.convert --weights=embedded --workdir=/tmp/smollm2_orbax
  python -m launch.convert --config=configs/llama3_8b.py --workdir=/tmp/llama3_8b_orbax
  python -m launch.generate --weights=/tmp/smollm2_orbax --prompt="Hi"

The source is --weights, or when it is not given the config's model.weights (default
configs/smollm2.py: the embedded SmolLM2-135M-Instruct).
"""

import pathlib

from absl import app, flags, logging

from graphloom_jax.models import decoder as decoder_lib
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/smollm2.py",
                                    "configuration (its model.weights is the source)")
flags.DEFINE_string("weights", None, "source weights path or 'embedded' (default: "
                    "config.model.weights)")
flags.DEFINE_string("workdir", None, "output folder (created)", required=True)
flags.DEFINE_alias("output", "workdir")


def check_flags(config, weights: str | None, workdir: str) -> str:
  """Both paths before anything is read: the source exists, the output is new or empty.
  Returns the source."""
  weights = common.model_section(config, allowed=("embedded",), weights=weights).weights
  out = common.check_output_dir("workdir", workdir)
  if out.is_dir() and any(out.iterdir()):
    raise app.UsageError(f"--workdir={workdir}: the folder exists and is not empty; choose a new "
                         "output folder")
  if weights != "embedded":
    src = pathlib.Path(weights).expanduser().resolve()
    if src.is_dir() and out.resolve().is_relative_to(src):
      raise app.UsageError(f"--workdir={workdir}: inside the source folder {weights}")
  return weights


def main(argv):
  del argv
  source = check_flags(_CONFIG.value, flags.FLAGS.weights, flags.FLAGS.workdir)
  out = decoder_lib.convert_to_orbax(source, flags.FLAGS.workdir)
  logging.info("wrote %s", out)


def cli():
  """The `graphloom-convert` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
