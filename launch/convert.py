"""Converts decoder weights (safetensors / Flax msgpack / GGUF / orbax) to an orbax checkpoint
in graphloom_jax's layout, with its tokenizer beside it.

  python -m launch.convert --weights=embedded --output=/tmp/smollm2_orbax
  python -m launch.generate --weights=/tmp/smollm2_orbax --prompt="Hi"
"""

from absl import app, flags

from graphloom_jax.models import decoder as decoder_lib

flags.DEFINE_string("weights", "embedded", "source weights path or 'embedded'")
flags.DEFINE_string("output", None, "output folder (created)", required=True)


def main(argv):
  del argv
  out = decoder_lib.convert_to_orbax(flags.FLAGS.weights, flags.FLAGS.output)
  print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
