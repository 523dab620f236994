"""Decode-step time of KG-JSA++ (sparse self cache + prefix + slots) vs dense causal attention
on SmolLM2-135M shapes (30 layers, D 576, N 9, K 3, H 64, MLP 1536, vocab 49152), at cache
lengths t = 512, 2048, 8192.

  python benchmarks/bench_kgjsa.py [--lengths=512,2048,8192] [--block_size=64] [--repeats=15]
                                   [--decoder] [--batch=1]

Part 1, attention alone over all layers: one jitted step reads a stacked [L, B, S, K, H] cache
(S = t, all written) with random queries, and either
  dense         attends every cached token of every layer (the plain decoder's attention), or
  KG-JSA++      selects I_t (4 sink + 64 recent + 20 similar) per layer and kv group, gathers
                it, and runs one joint softmax over L_p = 32 prefix keys + 4 slots + I_t;
                similar tokens come from a full cosine scan of the cache ("full") or from
                block-mean key summaries updated with the step's new key ("block").
The selection alone (full vs block) is timed separately.

Part 2 (--decoder), whole decoder steps of graphloom_jax.models.llama with random weights:
plain decoding vs KG-JSA++ decoding with memory in every layer, the cache donated so that the
write of the new token is in place, and the weights in the form `Decoder.generate` uses on the
backend (per-layer fused buffers on CPU, the scanned stack elsewhere).

Every variant is compiled and warmed up first; then each round runs every (t, variant) once in
turn, so load changes on a shared machine hit all of them alike; medians (and minima) are
reported.
Targets: KG-JSA++ at t = 8192 within 1.2x of its time at t = 512, and >= 1.5x faster
than dense at t = 8192.
"""

import functools
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from graphloom_jax.ops import flops
from graphloom_jax.ops import joint_attention as joint
from graphloom_jax.ops import sparse_kv

flags.DEFINE_list("lengths", ["512", "2048", "8192"], "cache lengths t")
flags.DEFINE_integer("batch", 1, "batch size")
flags.DEFINE_integer("block_size", 64, "block size of the block-summary selection")
flags.DEFINE_integer("repeats", 15, "timed rounds (median reported)")
flags.DEFINE_bool("decoder", True, "also time whole decoder steps (part 2)")

L, D, N, K, H, F, V = 30, 576, 9, 3, 64, 1536, 49152
PREFIX, SLOTS, SINK, RECENT, SIMILAR = 32, 4, 4, 64, 20


def _rounds(fns, repeats):
  """fns: {(t, name): zero-arg callable returning arrays}.

  Returns ({t: {name: median seconds}}, {t: {name: min seconds}}). Every round runs every
  (t, name) once, so load changes on a shared machine hit all lengths and variants alike.
  """
  for fn in fns.values():
    jax.block_until_ready(fn())
    jax.block_until_ready(fn())
  times = {key: [] for key in fns}
  for _ in range(repeats):
    for key, fn in fns.items():
      start = time.perf_counter()
      jax.block_until_ready(fn())
      times[key].append(time.perf_counter() - start)
  median, best = {}, {}
  for (t, name), ts in times.items():
    median.setdefault(t, {})[name] = statistics.median(ts)
    best.setdefault(t, {})[name] = min(ts)
  return median, best


def attention_variants(t, batch, block_size, rng):
  """Jitted all-layer attention steps at cache length t, bound to random inputs."""
  f32 = lambda *shape: jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
  cache_k, cache_v = f32(L, batch, t, K, H), f32(L, batch, t, K, H)
  q = f32(L, batch, N, H)
  new_k = cache_k[:, :, t - 1]  # the step's own key, written at slot t - 1
  prefix_k, prefix_v = f32(L, batch, PREFIX, K, H), f32(L, batch, PREFIX, K, H)
  slot_k, slot_v = f32(L, batch, SLOTS, K, H), f32(L, batch, SLOTS, K, H)
  prefix_mask = jnp.ones((batch, PREFIX), bool)
  slot_mask = jnp.ones((batch, 1, SLOTS), bool)
  slot_bias = jnp.log(jnp.asarray(rng.uniform(0.3, 1.0, (batch, 1, SLOTS)), jnp.float32))
  valid = jnp.ones((batch, t), bool)
  length = jnp.full((batch,), t, jnp.int32)
  # Summaries of the tokens before this step; the step adds its own key.
  sums, counts = jax.vmap(
      lambda k: sparse_kv.block_summaries(k, valid, t - 1, block_size))(cache_k)

  @jax.jit
  def dense(q, cache_k, cache_v):
    def layer(_, i):
      return None, joint.partial_attention(q[i][:, None], cache_k[i], cache_v[i], valid)[0]
    return jax.lax.scan(layer, None, jnp.arange(L))[1]

  def positional(block):
    return sparse_kv.positional_selection(valid, length, num_sink=SINK, num_recent=RECENT,
                                          block_size=block)

  @functools.partial(jax.jit, static_argnames=("block",))
  def sparse(q, cache_k, cache_v, prefix_k, prefix_v, slot_k, slot_v, sums, counts, *, block):
    pos = positional(block)

    def layer(_, i):
      if block:
        s_i, c_i = sparse_kv.update_block_summaries(sums[i], counts[i], new_k[i], t - 1,
                                                    block_size=block)
      else:
        s_i = c_i = None
      idx, ok = sparse_kv.select_sparse_kv(
          q[i], cache_k[i], valid, length, num_sink=SINK, num_recent=RECENT,
          num_similar=SIMILAR, block_size=block, block_sums=s_i, block_counts=c_i,
          positional=pos)
      k_sel, v_sel = sparse_kv.gather_kv(cache_k, cache_v, idx, i)
      out = joint.joint_attention(q[i][:, None], prefix_k[i], prefix_v[i], prefix_mask,
                                  slot_k[i], slot_v[i], slot_mask, k_sel, v_sel,
                                  ok[:, :, None, :], slot_bias=slot_bias)
      return None, (out, s_i, c_i)
    return jax.lax.scan(layer, None, jnp.arange(L))[1]

  @functools.partial(jax.jit, static_argnames=("block",))
  def select(q, cache_k, sums, counts, *, block):
    pos = positional(block)

    def layer(_, i):
      return None, sparse_kv.select_sparse_kv(
          q[i], cache_k[i], valid, length, num_sink=SINK, num_recent=RECENT,
          num_similar=SIMILAR, block_size=block, block_sums=sums[i] if block else None,
          block_counts=counts[i] if block else None, positional=pos)
    return jax.lax.scan(layer, None, jnp.arange(L))[1]

  mem = (prefix_k, prefix_v, slot_k, slot_v, sums, counts)
  return {
      "dense": lambda: dense(q, cache_k, cache_v),
      "kgjsa_full": lambda: sparse(q, cache_k, cache_v, *mem, block=0),
      "kgjsa_block": lambda: sparse(q, cache_k, cache_v, *mem, block=block_size),
      "select_full": lambda: select(q, cache_k, sums, counts, block=0),
      "select_block": lambda: select(q, cache_k, sums, counts, block=block_size),
  }


def decoder_variants(lengths, batch, block_size, repeats, rng):
  """Jitted whole decoder steps (random SmolLM2-shaped weights) at every cache length."""
  from flax import nnx

  from graphloom_jax.models import llama
  from graphloom_jax.models import memory as memory_lib

  cfg = llama.LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_layers=L,
                          num_heads=N, num_kv_heads=K, head_dim=H, rope_theta=100000.0,
                          tie_word_embeddings=True,
                          max_position_embeddings=max(lengths) + 2 * repeats + 64)
  model = llama.init_random(cfg, seed=0)
  graphdef, state = nnx.split(model)

  def filled_cache(t, block):
    max_len = t + 2 * repeats + 8  # every timed or warm-up step writes one more slot
    cache = llama.KVCache.init(cfg, batch, max_len, block_size=block)
    k = jnp.asarray(rng.standard_normal(cache.k.shape, dtype=np.float32)) * 0.5
    v = jnp.asarray(rng.standard_normal(cache.v.shape, dtype=np.float32))
    valid = jnp.arange(max_len)[None, :].repeat(batch, 0) < t
    cache = cache.replace(k=k, v=v, valid=valid, length=jnp.asarray(t, jnp.int32),
                          next_pos=jnp.full((batch,), t, jnp.int32))
    if block:
      sums, counts = jax.vmap(
          lambda k_l: sparse_kv.block_summaries(k_l, valid, t, block))(k)
      cache = cache.replace(block_sums=sums, block_counts=counts)
    return cache

  f32 = lambda *shape: jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
  bank = 2 * SLOTS
  active = jnp.zeros((batch, 1, bank), bool).at[:, :, :SLOTS].set(True)
  memory = memory_lib.Memory(
      prefix=f32(batch, PREFIX, D), prefix_mask=jnp.ones((batch, PREFIX), bool),
      slot_keys=f32(batch, bank, D), slot_values=f32(batch, bank, D),
      slot_valid=jnp.ones((batch, bank), bool), slot_active=active,
      slot_bias=jnp.log(jnp.full((batch, 1, bank), 0.8, jnp.float32)))
  memory_kv = model.project_memory(memory, 0)
  # The weight form Decoder.generate uses on this backend (per-layer fused buffers on CPU),
  # split once outside the timed steps as the decode loop does.
  unstack = jax.default_backend() == "cpu"
  weights = (jax.jit(lambda st: nnx.merge(graphdef, st).unstacked_layer_params())(state)
             if unstack else None)
  print(f"Part 2 weight form: {'per-layer fused buffers' if unstack else 'scanned stack'}")

  @functools.partial(jax.jit, static_argnames=("sparse",), donate_argnames=("cache",))
  def step(state, weights, tok, cache, memory, memory_kv, *, sparse):
    m = nnx.merge(graphdef, state)
    logits, cache, _ = m(tok, cache, memory=memory, memory_kv=memory_kv, first_layer=0,
                         sparse=sparse, layer_weights=weights)
    return logits, cache

  tok = jnp.ones((batch, 1), jnp.int32)
  spec = lambda block: llama.SparseSpec(num_sink=SINK, num_recent=RECENT,
                                        num_similar=SIMILAR, block_size=block)
  setups = {
      "dense": (None, None, None, 0),
      "kgjsa_full": (memory, memory_kv, spec(0), 0),
      "kgjsa_block": (memory, memory_kv, spec(block_size), block_size),
  }
  caches = {(t, name): filled_cache(t, s[3]) for t in lengths for name, s in setups.items()}

  def runner(key):
    mem, mem_kv, sp, _ = setups[key[1]]

    def run():
      logits, caches[key] = step(state, weights, tok, caches[key], mem, mem_kv, sparse=sp)
      return logits
    return run
  return {key: runner(key) for key in caches}


def _report(title, lengths, results, first):
  times, best = results
  print(f"\n{title} (median ms per decode step, B={flags.FLAGS.batch}; min in brackets)")
  names = list(times[lengths[0]])
  print(f"{'t':>6} " + " ".join(f"{n:>20}" for n in names))
  for t in lengths:
    print(f"{t:>6} " + " ".join(f"{times[t][n] * 1e3:11.2f} [{best[t][n] * 1e3:6.2f}]"
                                 for n in names))
  last = lengths[-1]
  for name in ("kgjsa_full", "kgjsa_block"):
    if name in names:
      growth = times[last][name] / times[first][name]
      speedup = times[last]["dense"] / times[last][name]
      print(f"{name}: t={last} / t={first} = {growth:.2f}x (target <= 1.2x); "
            f"dense / {name} at t={last} = {speedup:.2f}x (target >= 1.5x)")
  for t in lengths:
    parts = [f"dense/{n} {times[t]['dense'] / times[t][n]:.2f}x"
             for n in names if n.startswith("kgjsa")]
    if "select_full" in names:
      parts.append(f"select full/block {times[t]['select_full'] / times[t]['select_block']:.1f}x")
    print(f"  t={t}: " + ", ".join(parts))


def main(argv):
  del argv
  f = flags.FLAGS
  lengths = [int(x) for x in f.lengths]
  rng = np.random.default_rng(0)
  print(f"SmolLM2-135M shapes: L={L} D={D} N={N} K={K} H={H}; KG-JSA++ keys: L_p={PREFIX} "
        f"+ {SLOTS} slots + |I_t|={SINK}+{RECENT}+{SIMILAR}; block_size={f.block_size}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
        f"backend {jax.default_backend()}")
  print("\nFLOP accounting (ops/flops.py, all layers):")
  for t in lengths:
    c = flops.decode_step_cost(t, num_layers=L, block_size=f.block_size)
    print(f"  t={t:>5}: dense {c.dense_flops / 1e6:8.1f} MFLOP, KG-JSA++ "
          f"{c.sparse_flops / 1e6:6.1f} MFLOP ({c.reduction:6.1%} fewer); selection: full "
          f"{c.selection_flops_full / 1e6:6.1f} MFLOP, block {c.selection_flops_block / 1e6:5.2f}"
          f" MFLOP")

  fns = {}
  for t in lengths:
    fns.update({(t, name): fn for name, fn in
                attention_variants(t, f.batch, f.block_size, rng).items()})
  _report("Part 1: attention of all layers", lengths, _rounds(fns, f.repeats), lengths[0])

  if f.decoder:
    fns = decoder_variants(lengths, f.batch, f.block_size, f.repeats, rng)
    _report("Part 2: whole decoder step (random weights)", lengths, _rounds(fns, f.repeats),
            lengths[0])
  print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
  app.run(main)
