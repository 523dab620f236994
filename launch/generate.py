r"""Answers a prompt with a Llama decoder.

  python -m launch.generate --prompt="What is the capital of France?"
  python -m launch.generate --weights=/path/to/Llama-3.1-8B-Instruct --dtype=bfloat16 \
      --prompt="..." --temperature=0.7 --top_p=0.9 --seed=1

--weights defaults to the embedded SmolLM2-135M-Instruct; any path `load_decoder` accepts works
(safetensors folder, Flax msgpack folder, .gguf file, orbax checkpoint).
"""

from absl import app, flags

from graphloom_jax.models import load_decoder
from . import common

flags.DEFINE_string("weights", "embedded", "weights path or 'embedded'")
flags.DEFINE_multi_string("prompt", None, "prompt(s) to answer", required=True)
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "parameter dtype")
flags.DEFINE_integer("max_new_tokens", 64, "tokens to generate")
flags.DEFINE_bool("chat", True, "wrap the prompt in the model's chat template")
flags.DEFINE_float("temperature", 0.0, "0 = greedy")
flags.DEFINE_float("top_p", 1.0, "nucleus sampling mass")
flags.DEFINE_integer("seed", 0, "sampling seed")
flags.DEFINE_integer("max_seq_len", None, "prompt + new tokens limit (default: the model's "
                     "max_position_embeddings)")


def check_flags(f):
  """Every flag before the model is loaded."""
  common.check_weights("weights", f.weights, allowed=("embedded",))
  for i, prompt in enumerate(f.prompt):
    if not prompt.strip():
      raise app.UsageError(f"--prompt number {i + 1} is empty")
  common.check_sampling_flags(f.temperature, f.top_p, f.seed, f.max_new_tokens)
  if f.max_seq_len is not None:
    common.check_int("max_seq_len", f.max_seq_len, 1)
    if f.max_new_tokens >= f.max_seq_len:
      raise app.UsageError(f"--max_new_tokens={f.max_new_tokens}: leaves no room for the prompt "
                           f"in --max_seq_len={f.max_seq_len}")


def main(argv):
  del argv
  f = flags.FLAGS
  check_flags(f)
  decoder = load_decoder(f.weights, f.dtype, max_seq_len=f.max_seq_len)
  answers = decoder.generate(f.prompt, f.max_new_tokens, f.chat, temperature=f.temperature,
                             top_p=f.top_p, seed=f.seed)
  for answer in answers:
    print(answer)


def cli():
  """The `graphloom-generate` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
