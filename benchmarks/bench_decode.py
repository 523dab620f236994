"""Greedy decode speed: our JAX decoder vs transformers' PyTorch LlamaForCausalLM on the
embedded SmolLM2-135M-Instruct (same GGUF weights, same prompt, same number of new tokens, same
thread count, the same dtype on both sides), in float32 and bfloat16, plus the memory-bandwidth
roofline of each dtype.

  python benchmarks/bench_decode.py [--new_tokens=128] [--dtypes=float32,bfloat16] [--repeats=3]

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
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "parameter dtypes to time (both sides)")
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


def one_dtype(dtype: str, bw: float) -> dict:
  """JAX (and PyTorch) tokens/s in `dtype` and JAX's share of that dtype's roofline."""
  f = flags.FLAGS
  threads = os.cpu_count()
  from graphloom_jax import assets
  from graphloom_jax.models import load_decoder

  dec = load_decoder("embedded", dtype)
  ids = dec.tokenizer.chat_ids(PROMPT)
  run = lambda: dec.generate_ids([ids], f.new_tokens, eos_ids=[-1])
  out = run()  # compile
  assert len(out[0]) == f.new_tokens
  gen = None
  if f.torch:
    import torch
    import transformers
    torch.set_num_threads(threads)
    path = assets.smollm2_gguf()
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=getattr(torch, dtype)).eval()
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
  jax_tps = f.new_tokens / statistics.median(jax_times)
  n_params = sum(int(np.prod(s)) for s in dec.config.param_shapes().values())
  bytes_per = 2 if dtype == "bfloat16" else 4
  roof = bw / (n_params * bytes_per)
  row = dict(dtype=dtype, jax=jax_tps, roofline=roof, share=jax_tps / roof,
             mb_per_token=n_params * bytes_per / 1e6)
  if gen is not None:
    row["torch"] = f.new_tokens / statistics.median(torch_times)
  return row


def main(argv):
  del argv
  f = flags.FLAGS
  bw = membw()
  print(f"prompt: {PROMPT!r}; {f.new_tokens} new tokens, {os.cpu_count()} threads, load "
        f"average {os.getloadavg()[0]:.1f}; measured matrix-vector bandwidth {bw / 1e9:.1f} GB/s")
  rows = [one_dtype(d, bw) for d in f.dtypes]
  print(f"{'dtype':9s} {'JAX tok/s':>9s} {'PyTorch':>8s} {'ratio':>6s} {'MB/token':>8s} "
        f"{'roofline':>8s} {'share':>6s}")
  for r in rows:
    torch_tps = r.get("torch")
    print(f"{r['dtype']:9s} {r['jax']:9.1f} {torch_tps or float('nan'):8.1f} "
          f"{r['jax'] / torch_tps if torch_tps else float('nan'):5.2f}x {r['mb_per_token']:8.0f} "
          f"{r['roofline']:8.1f} {100 * r['share']:5.0f}%")
  if len(rows) == 2:
    print(f"{rows[1]['dtype']} / {rows[0]['dtype']} (JAX): {rows[1]['jax'] / rows[0]['jax']:.2f}x")
  print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
  app.run(main)
