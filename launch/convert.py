"""Converts decoder weights (safetensors / Flax msgpack / GGUF / orbax) to an orbax checkpoint
in graphloom_jax's layout, with its tokenizer beside it.

  python -m launch.convert --weights=embedded --output=/tmp/smollm2_orbax
  python -m launch.generate --weights=/tmp/smollm2_orbax --prompt="Hi"
"""

import pathlib

from absl import app, flags

from graphloom_jax import assets
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import weights

flags.DEFINE_string("weights", "embedded", "source weights path or 'embedded'")
flags.DEFINE_string("output", None, "output folder (created)", required=True)


def convert(source: str, output: str) -> pathlib.Path:
  path = assets.smollm2_gguf() if source == "embedded" else pathlib.Path(source)
  fmt, config, params = weights.load(path)
  out = pathlib.Path(output)
  if out.exists() and any(out.iterdir()):
    raise FileExistsError(f"{out} exists and is not empty; choose a new --output folder")
  weights.save_orbax(out, config, params)
  tokenizer = decoder_lib.load_tokenizer(fmt, path, config)
  if tokenizer is not None:
    tokenizer.save(out / weights.ORBAX_TOKENIZER)
  return out


def main(argv):
  del argv
  out = convert(flags.FLAGS.weights, flags.FLAGS.output)
  print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
