"""How closely KG-JSA++ sparse decoding follows dense decoding on real text (SmolLM2-135M).

  python benchmarks/bench_sparse_fidelity.py [--lengths=1024,2048,4096] [--new_tokens=128]
                                             [--block_size=64] [--dtype=float32]
                                             [--modes=token,block] [--pool_keys=1024]
                                             [--markdown=benchmarks/sparse_fidelity.md]
                                             [--tag=main]

Prompts: the WordNet noun glosses that ship with the package (graphloom_jax/data/resources/
wordnet/data.noun, the text after "| " on each entry line), each made a sentence and joined into
prose, cut to about `length` tokens in all and put in the model's chat template with a request
to summarise them. Every prompt is prefilled once (dense; the prefill also builds the block
summaries), and each run decodes from its own copy of that cache. The dense decoder's greedy
output and logits are the reference; each sparse mode (sink 4 + recent 64 + similar 20) is
  token  SparseSpec(block_size=0): similar tokens by every remaining key's own cosine,
  block  SparseSpec(block_size=--block_size): the best n_b candidate blocks by block-mean key,
         then the tokens inside them by their own cosine (ops/sparse_kv.py), with
         n_b = max(ceil(20 / block_size) + 1, ceil(POOL_KEYS / block_size)).
         --pool_keys=128,256,1024 runs block mode once per value, setting `sparse_kv.POOL_KEYS`
         (the library's default is 1024) and clearing JAX's trace caches in between, since the
         constant is read when a step is traced.

Decode step i (i = 1..N, N = --new_tokens) feeds token i - 1 (token 0 is the prefill's greedy
token, the same for every mode) and yields the logits of new token i. Measured over those N
steps:
  free-running     each mode decodes greedily on its own: agreement = share of the N positions
                   whose token equals dense's; first divergence = the first such i that differs.
  teacher-forced   each mode is fed dense's greedy tokens: mean KL(dense || sparse) of the
                   next-token distributions (nats) and top-1 agreement with dense's argmax.
EOS does not stop a run (fidelity is measured on all N steps either way); where dense emitted
one is reported. Steps are the library's own decoder call (`llama.Llama.__call__` with the
decode loop's per-layer weights on CPU), jitted here one step at a time so that the logits of
every step can be read. Median step times (ms) are printed too; on a shared machine they are
indicative only.
"""

import functools
import json
import os
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from graphloom_jax.models import llama, load_decoder
from graphloom_jax.ops import sparse_kv

flags.DEFINE_list("lengths", ["1024", "2048", "4096"], "prompt lengths in tokens (about)")
flags.DEFINE_integer("new_tokens", 128, "decode steps measured per run")
flags.DEFINE_integer("block_size", 64, "block size of block mode")
flags.DEFINE_string("dtype", "float32", "decoder dtype")
flags.DEFINE_list("modes", ["token", "block"], "sparse modes compared with dense")
flags.DEFINE_list("pool_keys", [str(sparse_kv.POOL_KEYS)],
                  "block mode's POOL_KEYS values (one run each)")
flags.DEFINE_string("markdown", "", "write the table (with load and command) to this file")
flags.DEFINE_string("tag", "main", "name of the result block in --markdown (replaced on rerun)")

GLOSSES = (pathlib.Path(__file__).resolve().parents[1] / "graphloom_jax" / "data" / "resources"
           / "wordnet" / "data.noun")
INSTRUCTION = ("\n\nThe text above is a list of dictionary definitions. Summarise it: name the "
               "kinds of things it defines and give examples from it.")


def gloss_prose() -> list[str]:
  """The glosses of data.noun as sentences, in file order."""
  out = []
  for line in GLOSSES.read_text(encoding="utf-8").splitlines():
    if line.startswith(" ") or "| " not in line:  # the licence header lines start with spaces
      continue
    gloss = line.split("| ", 1)[1].strip()
    if gloss:
      gloss = gloss[0].upper() + gloss[1:]
      out.append(gloss if gloss.endswith((".", "!", "?", '"')) else gloss + ".")
  return out


def build_prompt(tokenizer, sentences, target: int) -> list[int]:
  """Chat-template ids of the longest prefix of `sentences` (+ INSTRUCTION) within target."""
  ids = lambda n: tokenizer.chat_ids(" ".join(sentences[:n]) + INSTRUCTION)
  lo, hi = 1, len(sentences)
  if len(ids(hi)) <= target:
    raise ValueError(f"the glosses give only {len(ids(hi))} tokens; asked for {target}")
  while lo < hi:  # largest n with len(ids(n)) <= target
    mid = (lo + hi + 1) // 2
    if len(ids(mid)) <= target:
      lo = mid
    else:
      hi = mid - 1
  return ids(lo)


def log_softmax(x):
  x = np.asarray(x, np.float64)
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def main(argv):
  del argv
  f = flags.FLAGS
  lengths = [int(x) for x in f.lengths]
  n = f.new_tokens
  load_start = os.getloadavg()
  max_len = max(lengths) + n + 8  # one cache size for every prompt: one compile per mode
  dec = load_decoder("embedded", dtype=f.dtype, max_seq_len=max_len)
  cfg = dec.config
  graphdef, state = nnx.split(dec.model)
  unstack = dec.unstack_layers
  weights = (jax.jit(lambda st: nnx.merge(graphdef, st).unstacked_layer_params())(state)
             if unstack else None)
  spec = lambda block: llama.SparseSpec(num_sink=4, num_recent=64, num_similar=20,
                                        block_size=block)
  modes = {"dense": None, "token": spec(0), "block": spec(f.block_size)}
  print(f"SmolLM2-135M ({f.dtype}), {jax.default_backend()}, {os.cpu_count()} CPUs, load "
        f"average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}; cache "
        f"{max_len} slots; sparse budget 4 + 64 + 20; block_size {f.block_size}; weights "
        f"{'per-layer fused buffers' if unstack else 'scanned stack'}", flush=True)

  @functools.partial(jax.jit, static_argnames=("sparse",), donate_argnames=("cache",))
  def step(state, weights, tok, cache, *, sparse):
    model = nnx.merge(graphdef, state)
    logits, cache, _ = model(tok, cache, sparse=sparse, layer_weights=weights)
    return logits[:, -1], cache

  def decode(cache, first, sparse, forced=None):
    """N steps from `cache` (consumed). Greedy unless `forced` [N] gives the tokens to feed
    after `first`. Returns (logits [N, V] float32, greedy tokens [N], step seconds)."""
    tok, logits, toks, times = first, [], [], []
    for i in range(n):
      t0 = time.perf_counter()
      out, cache = step(state, weights, jnp.asarray([[tok]], jnp.int32), cache, sparse=sparse)
      out = np.asarray(out[0])
      times.append(time.perf_counter() - t0)
      logits.append(out)
      toks.append(int(out.argmax()))
      tok = toks[-1] if forced is None else int(forced[i])
    return np.stack(logits), np.asarray(toks), times

  sentences = gloss_prose()
  rows = []
  for target in lengths:
    ids = build_prompt(dec.tokenizer, sentences, target)
    t = len(ids)
    cache = llama.KVCache.init(cfg, 1, max_len, dec.dtype, block_size=f.block_size)
    t0 = time.perf_counter()
    # The prefill is dense in every mode (sparse applies to single-token steps); with a block
    # spec it also fills the block summaries, which dense and token mode carry unused.
    logits0, cache = step(state, weights, jnp.asarray([ids], jnp.int32), cache,
                          sparse=modes["block"])
    first = int(np.asarray(logits0[0]).argmax())
    prefill_s = time.perf_counter() - t0
    copy = lambda c=cache: jax.tree.map(jnp.copy, c)
    ref_logits, ref_toks, ref_times = decode(copy(), first, None)
    eos = [i + 1 for i, x in enumerate(ref_toks) if x in dec.tokenizer.eos_ids]
    ref_lp = log_softmax(ref_logits)
    print(f"\nprompt {t} tokens (prefill {prefill_s:.1f} s); dense output: "
          f"{dec.tokenizer.decode([first] + ref_toks.tolist())[:200]!r}", flush=True)
    runs = [("token", 0)] if "token" in f.modes else []
    runs += [("block", int(e)) for e in f.pool_keys] if "block" in f.modes else []
    for mode, pool in runs:
      if mode == "block" and pool != sparse_kv.POOL_KEYS:
        sparse_kv.POOL_KEYS = pool
        jax.clear_caches()  # retrace the step with the new constant
      n_b = (min(-(-max_len // f.block_size), sparse_kv.candidate_blocks(20, f.block_size))
             if mode == "block" else None)
      _, free_toks, free_times = decode(copy(), first, modes[mode])
      same = free_toks == ref_toks
      diverge = int(np.argmin(same)) + 1 if not same.all() else None
      tf_logits, tf_toks, _ = decode(copy(), first, modes[mode], forced=ref_toks)
      lp = log_softmax(tf_logits)
      kl = (np.exp(ref_lp) * (ref_lp - lp)).sum(-1)  # [N]
      row = dict(prompt_tokens=t, target=target, mode=mode, n_b=n_b,
                 greedy_agreement=float(same.mean()),
                 first_divergence=diverge, kl_mean=float(kl.mean()), kl_max=float(kl.max()),
                 top1_agreement=float((tf_toks == ref_toks).mean()),
                 ms_step_sparse=1e3 * statistics.median(free_times),
                 ms_step_dense=1e3 * statistics.median(ref_times), dense_eos_at=eos[:3],
                 load=round(os.getloadavg()[0], 2))
      rows.append(row)
      print(f"  {mode:>5} (n_b {n_b}): greedy agreement {row['greedy_agreement']:.1%} (first "
            f"divergence {diverge}), teacher-forced KL {row['kl_mean']:.4f} nats (max "
            f"{row['kl_max']:.3f}), top-1 {row['top1_agreement']:.1%}; "
            f"{row['ms_step_sparse']:.1f} ms/step vs dense {row['ms_step_dense']:.1f}; "
            f"load {row['load']}", flush=True)

  load_end = os.getloadavg()
  header = ("| prompt tokens | mode | n_b blocks | greedy agreement (128) | first divergence | "
            "mean KL(dense‖sparse), nats | max KL | top-1 agreement (teacher-forced) | "
            "ms/step sparse | ms/step dense |")
  lines = [header.replace("128", str(n)), "|" + "---|" * 10]
  for r in rows:
    lines.append(f"| {r['prompt_tokens']} | {r['mode']} | {r['n_b'] or '-'} | "
                 f"{r['greedy_agreement']:.1%} | "
                 f"{r['first_divergence'] if r['first_divergence'] else 'none'} | "
                 f"{r['kl_mean']:.4f} | {r['kl_max']:.3f} | {r['top1_agreement']:.1%} | "
                 f"{r['ms_step_sparse']:.1f} | {r['ms_step_dense']:.1f} |")
  table = "\n".join(lines)
  print("\n" + table)
  summary = dict(bench="sparse_fidelity", model="SmolLM2-135M-Instruct", dtype=f.dtype,
                 new_tokens=n, block_size=f.block_size, budget=[4, 64, 20],
                 load_start=[round(x, 2) for x in load_start],
                 load_end=[round(x, 2) for x in load_end], cpus=os.cpu_count(), rows=rows)
  print(json.dumps(summary))
  if f.markdown:
    START = f"<!-- bench_sparse_fidelity results: {f.tag} -->"
    END = f"<!-- end of results: {f.tag} -->"
    command = "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    block = (f"{START}\n`{command}`\n\n"
             f"SmolLM2-135M-Instruct ({f.dtype}, {jax.default_backend()}, {os.cpu_count()} "
             f"CPUs); load average (1, 5, 15 min) {load_start[0]:.2f} {load_start[1]:.2f} "
             f"{load_start[2]:.2f} at the start, {load_end[0]:.2f} {load_end[1]:.2f} "
             f"{load_end[2]:.2f} at the end.\n\n{table}\n\n```json\n{json.dumps(summary)}\n"
             f"```\n{END}")
    path = pathlib.Path(f.markdown)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if START in text and END in text:  # keep the prose around the generated block
      text = text[:text.index(START)] + block + text[text.index(END) + len(END):]
    else:
      text = text + ("\n" if text else "") + block + "\n"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")

if __name__ == "__main__":
  app.run(main)
