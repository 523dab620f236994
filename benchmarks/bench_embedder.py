r"""Sentence-embedding throughput: our JAX MiniLM embedder vs transformers' PyTorch BertModel with
the same pooling, on questions read from --questions (a JSON-lines file, optionally gzipped, of
objects with a "question" field, such as the official MMQA_dev.jsonl.gz) or, by default, on the
questions of the embedded benchmark (SceneKB, shipped in graphloom_jax/data/resources).

  python benchmarks/bench_embedder.py [--questions=/path/to/MMQA_dev.jsonl.gz] \
      [--num_texts=2441] [--batch_size=64] [--repeats=3] [--threads=N]

Both sides get the same texts and the same cores: the process is pinned to --threads CPUs
(default: every CPU it may run on), which XLA's thread pool sizes itself to, and PyTorch gets
torch.set_num_threads(--threads). Both embed with the same recipe (tokenize with the same Rust
tokenizer, mean pooling over real tokens, L2 normalisation): PyTorch in sentence-transformers'
batches of --batch_size length-sorted texts padded to their longest, JAX in packed blocks of
about the same number of tokens (see graphloom_jax/models/embedder.py). Timings include
tokenization. Each side first makes one untimed warm-up pass over all texts (reported: for JAX
it includes compiling every shape, printed separately); then the timed passes alternate JAX,
PyTorch, JAX, PyTorch, ... so that load from other processes falls on both; the load average
is printed before and after the timed passes and next to every pass, with each pass's CPU
seconds (this process, all threads). Target: JAX >= 1.5x PyTorch.

`--dtypes=float32,bfloat16` times each JAX dtype against the same float32 PyTorch passes and
checks the bfloat16 embeddings against float32's: the largest difference, and recall@10 of
each of the first --queries texts' 10 nearest neighbours among the other texts (bfloat16's
neighbours against float32's; target >= 0.99).
"""

import gzip
import json
import os
import statistics
import time

import numpy as np
from absl import app, flags

flags.DEFINE_integer("num_texts", 2441, "number of questions to embed")
flags.DEFINE_integer("batch_size", 64, "PyTorch: texts per batch; JAX: load_embedder(batch_size)")
flags.DEFINE_integer("repeats", 3, "timed passes per side, alternating (median reported)")
flags.DEFINE_integer("threads", 0, "CPUs for both sides; 0 = every CPU this process may use")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "JAX embedder dtypes to time")
flags.DEFINE_integer("queries", 400, "texts used as queries for the neighbour recall")
flags.DEFINE_string("questions", "", "JSON lines (optionally .gz) with a \"question\" field, e.g. "
                    "the official MMQA_dev.jsonl.gz; \"\" = SceneKB's questions (test, then "
                    "validation and train)")


def torch_embedder(folder, max_length, batch_size, threads):
  import torch
  import transformers
  from tokenizers import Tokenizer

  torch.set_num_threads(threads)
  model = transformers.BertModel.from_pretrained(str(folder)).eval()
  tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
  tok.no_padding()
  tok.enable_truncation(max_length)

  def embed(texts):
    ids = [e.ids for e in tok.encode_batch(texts)]
    lengths = np.array([len(x) for x in ids])
    order = np.argsort(-lengths, kind="stable")
    out = np.empty((len(texts), model.config.hidden_size), np.float32)
    with torch.inference_mode():
      for b in range(0, len(texts), batch_size):
        rows = order[b:b + batch_size]
        t = int(lengths[rows[0]])
        batch = np.zeros((len(rows), t), np.int64)
        for r, i in enumerate(rows):
          batch[r, :lengths[i]] = ids[i]
        mask = torch.from_numpy((np.arange(t)[None] < lengths[rows][:, None]).astype(np.int64))
        h = model(input_ids=torch.from_numpy(batch), attention_mask=mask).last_hidden_state
        m = mask[..., None].float()
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        out[rows] = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
    return out

  return embed


def read_questions(path: str, n: int) -> list[str]:
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt") as fh:
    return [json.loads(line)["question"] for line in fh if line.strip()][:n]


def _load() -> str:
  return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _timed(fn, texts):
  """(wall seconds, CPU seconds of this process, result)."""
  wall, cpu = time.perf_counter(), time.process_time()
  y = fn(texts)
  return time.perf_counter() - wall, time.process_time() - cpu, y


def neighbour_recall(ref: np.ndarray, got: np.ndarray, queries: int, k: int = 10) -> float:
  """Mean share of each query's k nearest rows (inner product) under `ref` that are among its k
  nearest under `got`; queries are the first `queries` rows, the pool the rest."""
  def top(x):
    return np.argsort(-(x[:queries] @ x[queries:].T), axis=1)[:, :k]
  return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(top(ref), top(got))]))


def main(argv):
  del argv
  f = flags.FLAGS
  cpus = sorted(os.sched_getaffinity(0))
  threads = f.threads or len(cpus)
  if not 1 <= threads <= len(cpus):
    raise app.UsageError(f"--threads={f.threads}: this process may use {len(cpus)} CPUs")
  os.sched_setaffinity(0, cpus[:threads])  # before JAX starts its thread pool

  import jax
  from graphloom_jax import assets
  from graphloom_jax.models import load_embedder

  if f.questions:
    texts = read_questions(f.questions, f.num_texts)
    source = f"questions of {os.path.basename(f.questions)}"
  else:
    from graphloom_jax.data import scenekb
    texts = [q.question for split in ("test", "validation", "train")
             for q in scenekb.load(split).questions][:f.num_texts]
    source = "SceneKB questions"
  jax_embs = {dt: load_embedder(batch_size=f.batch_size, dtype=dt) for dt in f.dtypes}
  first = jax_embs[f.dtypes[0]]
  torch_emb = torch_embedder(assets.minilm_dir(), first.max_length, f.batch_size, threads)
  lengths = [len(x) for x in first.tokenize(texts)]
  print(f"{len(texts)} {source}, {np.mean(lengths):.1f} tokens on average "
        f"(max {max(lengths)}), batch {f.batch_size}, {threads} threads on CPUs "
        f"{cpus[:threads]} for both (JAX backend {jax.default_backend()}, "
        f"{jax.local_device_count()} device)")

  for dt, emb in jax_embs.items():
    wall, cpu, _ = _timed(emb.embed, texts)
    print(f"JAX {dt} warm-up pass: {wall:6.2f} s (of which compiling "
          f"{len(emb.compiled_shapes)} shapes {emb.compile_seconds:.2f} s)")
  wall, cpu, _ = _timed(torch_emb, texts)
  print(f"PyTorch float32 warm-up pass: {wall:6.2f} s")
  compiled = {dt: len(e.compiled_shapes) for dt, e in jax_embs.items()}
  print(f"timed passes, alternating; {_load()}")
  sides = [(f"JAX {dt}", e.embed) for dt, e in jax_embs.items()] + [("PyTorch", torch_emb)]
  times = {name: [] for name, _ in sides}
  outputs = {}
  for i in range(f.repeats):
    for name, fn in sides:
      wall, cpu, outputs[name] = _timed(fn, texts)
      times[name].append(wall)
      print(f"  pass {i + 1} {name:13s} {wall:6.2f} s wall, {cpu:6.2f} s CPU, "
            f"{len(texts) / wall:7.1f} texts/s; {_load()}")
  for dt, e in jax_embs.items():
    if len(e.compiled_shapes) != compiled[dt]:
      print(f"WARNING: JAX {dt} compiled {len(e.compiled_shapes) - compiled[dt]} new shapes "
            "while timed")
  torch_rate = len(texts) / statistics.median(times["PyTorch"])
  print(f"PyTorch float32: {torch_rate:8.1f} texts/s (median of {f.repeats} passes)")
  for dt in f.dtypes:
    name = f"JAX {dt}"
    rate = len(texts) / statistics.median(times[name])
    pairs = [t / j for j, t in zip(times[name], times["PyTorch"])]
    print(f"{name}: {rate:8.1f} texts/s, ratio to PyTorch float32 {rate / torch_rate:.2f}x; per "
          f"pair {', '.join(f'{r:.2f}' for r in pairs)}")
  print(_load())
  if "JAX float32" in outputs:
    print(f"max |JAX float32 - PyTorch| over the normalised embeddings: "
          f"{np.abs(outputs['JAX float32'] - outputs['PyTorch']).max():.2e} (tolerance 1e-5)")
  if "JAX float32" in outputs and "JAX bfloat16" in outputs:
    ref, got = outputs["JAX float32"], outputs["JAX bfloat16"]
    print(f"bfloat16 vs float32: max |difference| {np.abs(ref - got).max():.2e}, recall@10 of "
          f"the neighbours of {f.queries} texts among {len(texts) - f.queries}: "
          f"{neighbour_recall(ref, got, f.queries):.4f} (target >= 0.99)")


if __name__ == "__main__":
  app.run(main)
