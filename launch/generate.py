r"""Answers a prompt with a Llama decoder.

  python -m launch.generate --prompt="What is the capital of France?"
  python -m launch.generate --weights=/path/to/Llama-3.1-8B-Instruct --dtype=bfloat16 \
      --prompt="..." --temperature=0.7 --top_p=0.9 --seed=1
  python -m launch.generate --config=configs/llama3_8b.py --prompt="..."

The decoder is the config's model section (default configs/smollm2.py: the embedded
SmolLM2-135M-Instruct); --weights, --dtype and --max_seq_len replace its keys when given (the
same as --config.model.weights=...). Any path `load_decoder` accepts works (safetensors folder,
Flax msgpack folder, .gguf file, orbax checkpoint; not "random": a random model has no
tokenizer).
"""

from absl import app, flags

from graphloom_jax.models import decoder as decoder_lib
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/smollm2.py",
                                    "configuration (its model section)")
flags.DEFINE_string("weights", None, "weights path or 'embedded' (default: "
                    "config.model.weights)")
flags.DEFINE_multi_string("prompt", None, "prompt(s) to answer", required=True)
flags.DEFINE_enum("dtype", None, ["float32", "bfloat16"], "parameter dtype (default: "
                  "config.model.dtype)")
flags.DEFINE_integer("max_new_tokens", 64, "tokens to generate")
flags.DEFINE_bool("chat", True, "wrap the prompt in the model's chat template")
flags.DEFINE_float("temperature", 0.0, "0 = greedy")
flags.DEFINE_float("top_p", 1.0, "nucleus sampling mass")
flags.DEFINE_integer("seed", 0, "sampling seed")
flags.DEFINE_integer("max_seq_len", None, "prompt + new tokens limit (default: "
                     "config.model.max_seq_len)")


def check_flags(f, config):
  """Every flag before the model is loaded; returns the model section to load."""
  model = common.model_section(config, allowed=("embedded",), weights=f.weights, dtype=f.dtype,
                               max_seq_len=f.max_seq_len)
  for i, prompt in enumerate(f.prompt):
    if not prompt.strip():
      raise app.UsageError(f"--prompt number {i + 1} is empty")
  common.check_sampling_flags(f.temperature, f.top_p, f.seed, f.max_new_tokens)
  if model.max_seq_len is not None and f.max_new_tokens >= model.max_seq_len:
    raise app.UsageError(f"--max_new_tokens={f.max_new_tokens}: leaves no room for the prompt "
                         f"in a max_seq_len of {model.max_seq_len}")
  return model


def main(argv):
  del argv
  f = flags.FLAGS
  decoder = decoder_lib.from_config(check_flags(f, _CONFIG.value))
  answers = decoder.generate(f.prompt, f.max_new_tokens, f.chat, temperature=f.temperature,
                             top_p=f.top_p, seed=f.seed)
  for answer in answers:
    print(answer)


def cli():
  """The `graphloom-generate` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
