"""Greedy decode speed: our JAX decoder vs transformers' PyTorch LlamaForCausalLM on the
embedded SmolLM2-135M-Instruct (same GGUF weights, same prompt, same number of new tokens, same
thread count), plus the memory-bandwidth roofline.

  python benchmarks/bench_decode.py [--new_tokens=128] [--dtype=float32] [--repeats=3]

Both sides generate exactly `new_tokens` tokens (EOS ignored) and are timed end to end after a
warm-up run (prefill included on both sides, compilation excluded for JAX), their timed runs
alternating.
"""

import os
import statistics
import time

import numpy as np
from absl import app, flags

flags.DEFINE_integer("new_tokens", 128, "tokens to generate")
flags.DEFINE_string("dtype", "float32", "JAX parameter dtype (float32 or bfloat16)")
flags.DEFINE_integer("repeats", 3, "timed runs per side (median reported)")
flags.DEFINE_bool("torch", True, "also time PyTorch")

PROMPT = "Explain in detail how a scene graph describes the objects in a photograph."


def membw() -> float:
  """Bytes/s of a float32 matrix-vector product streaming 512 MiB (a decode step's pattern)."""
  w = np.random.default_rng(0).random((8192, 16384), dtype=np.float32)
  x = np.random.default_rng(1).random(16384, dtype=np.float32)
  w @ x
  best = min(_timed(lambda: w @ x) for _ in range(5))
  return w.nbytes / best


def _timed(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def main(argv):
  del argv
  f = flags.FLAGS
  threads = os.cpu_count()
  from graphloom_jax import assets
  from graphloom_jax.models import load_decoder

  dec = load_decoder("embedded", f.dtype)
  ids = dec.tokenizer.chat_ids(PROMPT)
  run = lambda: dec.generate_ids([ids], f.new_tokens, eos_ids=[-1])
  out = run()  # compile
  assert len(out[0]) == f.new_tokens
  print(f"prompt {len(ids)} tokens, {f.new_tokens} new tokens, {threads} threads, load average "
        f"{os.getloadavg()[0]:.1f}")
  gen = None
  if f.torch:
    import torch
    import transformers
    torch.set_num_threads(threads)
    path = assets.smollm2_gguf()
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    inputs = torch.as_tensor([ids])

    def gen():
      with torch.no_grad():
        ref.generate(inputs, max_new_tokens=f.new_tokens, min_new_tokens=f.new_tokens,
                     do_sample=False, pad_token_id=dec.tokenizer.pad_id)
    gen()
  # JAX and PyTorch runs alternate, so that load from other processes falls on both.
  jax_times, torch_times = [], []
  for _ in range(f.repeats):
    jax_times.append(_timed(run))
    if gen is not None:
      torch_times.append(_timed(gen))
  jax_s = statistics.median(jax_times)
  jax_tps = f.new_tokens / jax_s
  print(f"JAX ({f.dtype}):        {jax_tps:7.1f} tokens/s  ({jax_s:.2f} s)  "
        f"[unstack_layers={dec.unstack_layers}]")
  if gen is not None:
    torch_s = statistics.median(torch_times)
    torch_tps = f.new_tokens / torch_s
    print(f"PyTorch (float32):    {torch_tps:7.1f} tokens/s  ({torch_s:.2f} s)")
    print(f"ratio JAX / PyTorch:  {jax_tps / torch_tps:7.2f}x")
  dec.unstack_layers = not dec.unstack_layers  # the other weight form, for reference
  run()
  other_s = statistics.median(_timed(run) for _ in range(f.repeats))
  print(f"  with unstack_layers={dec.unstack_layers}: {f.new_tokens / other_s:7.1f} tokens/s")
  dec.unstack_layers = not dec.unstack_layers

  n_params = sum(int(np.prod(s)) for s in dec.config.param_shapes().values())
  bytes_per = 2 if f.dtype == "bfloat16" else 4
  bw = membw()
  roof = bw / (n_params * bytes_per)
  print(f"parameters: {n_params / 1e6:.1f}M x {bytes_per} B = "
        f"{n_params * bytes_per / 1e6:.0f} MB read per token")
  print(f"measured matvec bandwidth {bw / 1e9:.1f} GB/s -> roofline {roof:.1f} tokens/s; "
        f"JAX reaches {100 * jax_tps / roof:.0f}% of it")


if __name__ == "__main__":
  app.run(main)
