"""The decoder's accelerator figures in one run, printed as one JSON line (the last line).

  bash benchmarks/device_check.sh              # on one GPU, within --budget_s (default 540 s)
  bash benchmarks/device_check.sh --dry_run    # tiny shapes on CPU (tests/test_device_check.py)

Figures (tokens/s are batch x new tokens / seconds, medians of timed runs after a warm-up that
includes compilation; greedy, EOS ignored):
  smollm2      decode tokens/s of SmolLM2-135M in float32 and bfloat16 at batch 1 and 8 (the
               embedded weights when installed, else random weights of the same shapes: the
               speed does not depend on the values; "weights" says which).
  llama8b      a Llama-3-8B-shaped model with random bfloat16 weights made on the device (no
               download): batch-1 decode tokens/s with the layers scanned over the stacked
               weights and with per-layer slices, the bytes a decode step reads, the measured
               HBM read bandwidth, and the roofline bandwidth / bytes that bounds tokens/s.
  prefill      prefill tokens/s of that model on 1 x 2048 tokens through
               jax.nn.dot_product_attention (implementation named) and through the einsum
               partial softmaxes that KG-JSA++ merges.
  kgjsa_step   one batch-1 decode step of that model after a cache of 2k, 8k and 32k tokens:
               dense attention vs KG-JSA++ (32 prefix vectors and 64 active slots in the upper
               half of the layers, sparse self-KV 4 sink + 64 recent + 20 similar, block 64).
A section that fails records its error under "errors"; one that would start after the budget
is spent (the costliest, kgjsa_step, runs last) is listed under "skipped". The JSON line is
printed whatever happens.
"""

import argparse
import functools
import json
import os
import statistics
import time
import traceback

LLAMA3_8B = dict(  # configs/llama3_8b.py's model.arch (tests/test_device_check.py checks it)
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, head_dim=128, rope_theta=500000.0,
    rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=131072,
    rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=8192))
SMOLLM2 = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, head_dim=64, rope_theta=100000.0,
    rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=8192)
TINY = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
    rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=4096)


def settings(dry_run: bool) -> dict:
  if dry_run:
    return dict(smollm2=dict(TINY, tie_word_embeddings=True), llama8b=TINY, new_tokens=4,
                new_tokens_8b=4, prompt=16, repeats=2, contexts=(64, 128, 256), steps=3,
                sparse=(4, 16, 8, 16), prefix=4, slots=8, prefill=64, bandwidth_mb=16)
  return dict(smollm2=SMOLLM2, llama8b=LLAMA3_8B, new_tokens=128, new_tokens_8b=64,
              prompt=64, repeats=3, contexts=(2048, 8192, 32768), steps=10,
              sparse=(4, 64, 20, 64), prefix=32, slots=64, prefill=2048, bandwidth_mb=8192)


def median_seconds(fn, repeats: int) -> float:
  import jax
  jax.block_until_ready(fn())  # compile and warm up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def random_model(config, dtype, seed=0):
  """Random parameters generated on the device, one jitted draw per parameter (no float32
  copy of a bfloat16 model, no host transfer)."""
  import jax
  import jax.numpy as jnp

  from graphloom_jax.models import llama
  from graphloom_jax.ops import rope
  model = llama.abstract_model(config, dtype)
  key = jax.random.key(seed)
  for i, (name, shape) in enumerate(config.model_shapes().items()):
    if name.endswith("norm"):
      value = jax.jit(lambda s=shape: jnp.ones(s, dtype))()
    else:
      value = jax.jit(lambda k, s=shape: (0.02 * jax.random.normal(k, s)).astype(dtype))(
          jax.random.fold_in(key, i))
    getattr(model, name).value = value
  model.inv_freq.value = jnp.asarray(rope.inverse_frequencies(
      config.head_dim, config.rope_theta, config.scaling))
  return model


def decode_tok_s(dec, batch: int, prompt: int, new: int, repeats: int) -> float:
  import numpy as np
  rng = np.random.default_rng(batch)
  prompts = [list(rng.integers(3, dec.config.vocab_size, size=prompt)) for _ in range(batch)]
  run = lambda: dec.generate_ids(prompts, new, eos_ids=[-1])
  return batch * new / median_seconds(run, repeats)


def smollm2_section(s):
  from graphloom_jax.models import decoder, llama
  config = llama.LlamaConfig.from_hf(s["smollm2"])
  out = {}
  for dtype in ("float32", "bfloat16"):
    try:
      if s["smollm2"] is not SMOLLM2:
        raise FileNotFoundError("dry run: tiny random weights")
      dec, weights = decoder.load_decoder("embedded", dtype), "embedded"
    except Exception:  # the GGUF package or file is missing on this machine
      dec = decoder.Decoder(random_model(config, decoder.DTYPES[dtype]), source="random")
      weights = "random"
    out[dtype] = {f"b{b}": round(decode_tok_s(dec, b, s["prompt"], s["new_tokens"],
                                              s["repeats"]), 1) for b in (1, 8)}
    out[dtype]["unstack_layers"] = dec.unstack_layers
    out["weights"] = weights
  return out


def read_bandwidth(mb: int, repeats: int) -> float:
  """Bytes/s of a jitted sum over a bfloat16 array of `mb` megabytes (read once)."""
  import jax
  import jax.numpy as jnp
  x = jnp.ones((mb * 2**20 // 2,), jnp.bfloat16)
  total = jax.jit(lambda a: jnp.sum(a, dtype=jnp.float32))
  return x.nbytes / median_seconds(lambda: total(x), repeats)


def llama8b_section(s, state):
  import jax.numpy as jnp
  import numpy as np

  from graphloom_jax.models import decoder, llama
  config = llama.LlamaConfig.from_hf(s["llama8b"])
  model = random_model(config, jnp.bfloat16)
  state["model"] = model
  shapes = config.model_shapes()
  # A decode step reads every weight once except the embedding table (one row per token).
  step_bytes = 2 * sum(int(np.prod(v)) for k, v in shapes.items() if k != "embed")
  bw = read_bandwidth(s["bandwidth_mb"], s["repeats"])
  out = dict(params=sum(int(np.prod(v)) for v in shapes.values()), bytes_per_token=step_bytes,
             read_bandwidth_gb_s=round(bw / 1e9, 1), roofline_tok_s=round(bw / step_bytes, 1))
  for unstack in (False, True):
    dec = decoder.Decoder(model, source="random", unstack_layers=unstack)
    tps = decode_tok_s(dec, 1, s["prompt"], s["new_tokens_8b"], s["repeats"])
    out[f"decode_tok_s_{'unstacked' if unstack else 'scan'}"] = round(tps, 2)
  best = max(out["decode_tok_s_scan"], out["decode_tok_s_unstacked"])
  out["fraction_of_roofline"] = round(best / out["roofline_tok_s"], 3)
  return out


def _filled_cache(config, context: int, block: int, dtype):
  """A cache holding `context` random tokens (and their block summaries), room for more."""
  import jax
  import jax.numpy as jnp

  from graphloom_jax.models import llama
  from graphloom_jax.ops import sparse_kv

  @jax.jit
  def fill(key):
    cache = llama.KVCache.init(config, 1, context + 16, dtype, block_size=block)
    kk, kv = jax.random.split(key)
    k = jax.random.normal(kk, cache.k.shape).astype(dtype)
    v = jax.random.normal(kv, cache.v.shape).astype(dtype)
    valid = jnp.arange(cache.max_len)[None] < context
    k, v = jnp.where(valid[None, :, :, None, None], k, 0), jnp.where(
        valid[None, :, :, None, None], v, 0)
    sums, counts = jax.vmap(lambda kl: sparse_kv.block_summaries(kl, valid, context, block))(k)
    return cache.replace(k=k, v=v, valid=valid, next_pos=jnp.full((1,), context, jnp.int32),
                         length=jnp.int32(context), block_sums=sums, block_counts=counts)
  return fill(jax.random.key(context))


def kgjsa_section(s, state):
  import jax
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx

  from graphloom_jax.models import llama
  from graphloom_jax.models import memory as memory_lib
  model = state["model"]
  config = model.config
  graphdef, params = nnx.split(model)
  sink, recent, similar, block = s["sparse"]
  spec = llama.SparseSpec(num_sink=sink, num_recent=recent, num_similar=similar,
                          block_size=block)
  rng = np.random.default_rng(0)
  d = config.hidden_size
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape, dtype=np.float32), jnp.bfloat16)
  memory = memory_lib.Memory(
      prefix=normal(1, s["prefix"], d), prefix_mask=jnp.ones((1, s["prefix"]), bool),
      slot_keys=normal(1, s["slots"], d), slot_values=normal(1, s["slots"], d),
      slot_valid=jnp.ones((1, s["slots"]), bool),
      slot_active=jnp.ones((1, 1, s["slots"]), bool),
      slot_bias=jnp.zeros((1, 1, s["slots"]), jnp.float32))
  memory_kv = jax.jit(lambda p, m: nnx.merge(graphdef, p).project_memory(m))(params, memory)

  @functools.partial(jax.jit, static_argnames=("sparse",), donate_argnames=("cache",))
  def step(params, tok, cache, memory, memory_kv, sparse):
    logits, cache, _ = nnx.merge(graphdef, params)(tok, cache, memory=memory,
                                                   memory_kv=memory_kv, sparse=sparse)
    return logits, cache

  out = {}
  tok = jnp.ones((1, 1), jnp.int32)
  for context in s["contexts"]:
    if time.perf_counter() > state["deadline"]:
      state["skipped"].append(f"kgjsa_step {context}")
      continue
    row = {}
    for name, mem, mem_kv, sparse in (("dense", None, None, None),
                                      ("kgjsa", memory, memory_kv, spec)):
      box = [_filled_cache(config, context, block, jnp.bfloat16)]

      def once():
        logits, box[0] = step(params, tok, box[0], mem, mem_kv, sparse)
        return logits
      once()  # compile; the cache grows by one slot per step, within its 16 spare slots
      times = []
      for _ in range(s["steps"]):
        start = time.perf_counter()
        jax.block_until_ready(once())
        times.append(time.perf_counter() - start)
      row[f"{name}_ms"] = round(1e3 * statistics.median(times), 3)
      del box
    row["speedup"] = round(row["dense_ms"] / row["kgjsa_ms"], 2)
    out[str(context)] = row
  return out


def prefill_section(s, state):
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx

  from graphloom_jax.models import decoder, llama
  from graphloom_jax.models import memory as memory_lib
  model = state["model"]
  graphdef, params = nnx.split(model)
  t = s["prefill"]
  ids = jnp.asarray(np.random.default_rng(0).integers(3, model.config.vocab_size, (1, t)),
                    jnp.int32)
  valid = jnp.ones((1, t), bool)
  fused = median_seconds(lambda: decoder._forward(graphdef, params, ids, valid)[0],
                         s["repeats"])
  # An empty memory from layer 0 routes every layer through the partial softmaxes.
  empty = memory_lib.empty(1, model.config.hidden_size, jnp.bfloat16)
  einsum = median_seconds(lambda: decoder._forward(graphdef, params, ids, valid, empty,
                                                   first_layer=0)[0], s["repeats"])
  return dict(tokens=t, implementation=llama.fused_attention_impl(jnp.bfloat16,
                                                                  model.config.head_dim),
              fused_tok_s=round(t / fused, 1), einsum_tok_s=round(t / einsum, 1))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dry_run", action="store_true", help="tiny shapes on CPU")
  parser.add_argument("--budget_s", type=float, default=540.0,
                      help="start no section after this many seconds")
  args = parser.parse_args()
  start = time.perf_counter()
  result = dict(dry_run=args.dry_run, errors={}, skipped=[])
  try:
    import jax
    if args.dry_run:
      jax.config.update("jax_platforms", "cpu")
    result.update(backend=jax.default_backend(), device=jax.devices()[0].device_kind,
                  jax=jax.__version__)
    s = settings(args.dry_run)
    state = dict(deadline=start + args.budget_s, skipped=result["skipped"])
    for name, section in (("smollm2", smollm2_section), ("llama8b", llama8b_section),
                          ("prefill", prefill_section), ("kgjsa_step", kgjsa_section)):
      if time.perf_counter() - start > args.budget_s:
        result["skipped"].append(name)
        continue
      try:
        result[name] = (section(s, state) if name != "smollm2" else section(s))
      except Exception as e:  # one broken section must not lose the others' figures
        result["errors"][name] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
      print(f"# {name} done at {time.perf_counter() - start:.0f} s", flush=True)
  except Exception as e:
    result["errors"]["setup"] = f"{type(e).__name__}: {e}"
    traceback.print_exc()
  result["seconds"] = round(time.perf_counter() - start, 1)
  print(json.dumps(result), flush=True)
  return 1 if result["errors"] else 0


if __name__ == "__main__":
  raise SystemExit(main())
