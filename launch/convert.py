"""Converts decoder weights (safetensors / Flax msgpack / GGUF / orbax) to an orbax checkpoint
in graphloom_jax's layout, with its tokenizer beside it.

  python -m launch.convert --weights=embedded --output=/tmp/smollm2_orbax
  python -m launch.generate --weights=/tmp/smollm2_orbax --prompt="Hi"
"""

import pathlib

from absl import app, flags

from graphloom_jax.models import decoder as decoder_lib
from launch import common

flags.DEFINE_string("weights", "embedded", "source weights path or 'embedded'")
flags.DEFINE_string("output", None, "output folder (created)", required=True)


def check_flags(weights: str, output: str):
  """Both paths before anything is read: the source exists, the output is new or empty."""
  common.check_weights("weights", weights, allowed=("embedded",))
  out = common.check_output_dir("output", output)
  if out.is_dir() and any(out.iterdir()):
    raise app.UsageError(f"--output={output}: the folder exists and is not empty; choose a new "
                         "output folder")
  if weights != "embedded":
    src = pathlib.Path(weights).expanduser().resolve()
    if src.is_dir() and out.resolve().is_relative_to(src):
      raise app.UsageError(f"--output={output}: inside the source folder --weights={weights}")


def main(argv):
  del argv
  check_flags(flags.FLAGS.weights, flags.FLAGS.output)
  out = decoder_lib.convert_to_orbax(flags.FLAGS.weights, flags.FLAGS.output)
  print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
