"""Answers a prompt with a Llama decoder.

  python -m launch.generate --prompt="What is the capital of France?"
  python -m launch.generate --weights=/path/to/Llama-3.1-8B-Instruct --dtype=bfloat16 \
      --prompt="..." --temperature=0.7 --top_p=0.9 --seed=1

--weights defaults to the embedded SmolLM2-135M-Instruct; any path `load_decoder` accepts works
(safetensors folder, Flax msgpack folder, .gguf file, orbax checkpoint).
"""

from absl import app, flags

from graphloom_jax.models import load_decoder

FLAGS = flags.DEFINE_string("weights", "embedded", "weights path or 'embedded'")
flags.DEFINE_multi_string("prompt", None, "prompt(s) to answer", required=True)
flags.DEFINE_string("dtype", "float32", "float32 or bfloat16")
flags.DEFINE_integer("max_new_tokens", 64, "tokens to generate")
flags.DEFINE_bool("chat", True, "wrap the prompt in the model's chat template")
flags.DEFINE_float("temperature", 0.0, "0 = greedy")
flags.DEFINE_float("top_p", 1.0, "nucleus sampling mass")
flags.DEFINE_integer("seed", 0, "sampling seed")


def main(argv):
  del argv
  f = flags.FLAGS
  decoder = load_decoder(f.weights, f.dtype)
  answers = decoder.generate(f.prompt, f.max_new_tokens, f.chat, temperature=f.temperature,
                             top_p=f.top_p, seed=f.seed)
  for answer in answers:
    print(answer)


if __name__ == "__main__":
  app.run(main)
