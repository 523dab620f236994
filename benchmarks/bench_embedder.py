"""Sentence-embedding throughput: our JAX MiniLM embedder vs transformers' PyTorch BertModel with
the same pooling, on real MMQA dev questions (--mmqa, the official MMQA_dev.jsonl.gz) or, without
it, on the questions of the embedded benchmark (SceneKB, shipped in graphloom_jax/data/resources).

  python benchmarks/bench_embedder.py --mmqa=/path/to/multimodalqa/dataset/MMQA_dev.jsonl.gz \
      [--num_texts=2441] [--batch_size=64] [--repeats=3]

Both sides get the same texts, the same thread count and the same batching recipe
(sentence-transformers': tokenize, sort by length, batches of --batch_size, mean pooling, L2
normalisation); PyTorch pads each batch to its longest text, JAX to its length bucket. Timings
include tokenization, exclude JAX compilation (one warm-up pass per side), and alternate the two
sides so that load from other processes falls on both. Target: JAX >= 1.5x PyTorch.
"""

import gzip
import json
import os
import statistics
import time

import numpy as np
from absl import app, flags

flags.DEFINE_integer("num_texts", 2441, "number of questions to embed")
flags.DEFINE_integer("batch_size", 64, "texts per batch on both sides")
flags.DEFINE_integer("repeats", 3, "timed passes per side (median reported)")
flags.DEFINE_string("mmqa", "", "the official MMQA_dev.jsonl(.gz); \"\" = SceneKB's questions "
                    "(test, then validation and train)")


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


def _timed(fn, texts):
  start = time.perf_counter()
  y = fn(texts)
  return time.perf_counter() - start, y


def main(argv):
  del argv
  f = flags.FLAGS
  from graphloom_jax import assets
  from graphloom_jax.models import load_embedder

  if f.mmqa:
    opener = gzip.open if f.mmqa.endswith(".gz") else open
    with opener(f.mmqa, "rt") as fh:
      texts = [json.loads(line)["question"] for line in fh][:f.num_texts]
    source = "MMQA dev questions"
  else:
    from graphloom_jax.data import scenekb
    texts = [q.question for split in ("test", "validation", "train")
             for q in scenekb.load(split).questions][:f.num_texts]
    source = "SceneKB questions"
  threads = os.cpu_count()
  jax_emb = load_embedder(batch_size=f.batch_size)
  torch_emb = torch_embedder(assets.minilm_dir(), jax_emb.max_length, f.batch_size, threads)
  lengths = [len(x) for x in jax_emb.tokenize(texts)]
  print(f"{len(texts)} {source}, {np.mean(lengths):.1f} tokens on average "
        f"(max {max(lengths)}), batch {f.batch_size}, {threads} threads")

  start = time.perf_counter()
  jax_emb.embed(texts)
  print(f"JAX warm-up (compiles every bucket used): {time.perf_counter() - start:.1f} s")
  torch_emb(texts[:f.batch_size])
  jax_s, torch_s = [], []
  for _ in range(f.repeats):
    s, y_jax = _timed(jax_emb.embed, texts)
    jax_s.append(s)
    s, y_torch = _timed(torch_emb, texts)
    torch_s.append(s)
  jax_rate = len(texts) / statistics.median(jax_s)
  torch_rate = len(texts) / statistics.median(torch_s)
  print(f"JAX:     {jax_rate:8.1f} texts/s  (passes: {', '.join(f'{s:.2f}' for s in jax_s)} s)")
  print(f"PyTorch: {torch_rate:8.1f} texts/s  (passes: {', '.join(f'{s:.2f}' for s in torch_s)} s)")
  print(f"ratio JAX / PyTorch: {jax_rate / torch_rate:.2f}x (target >= 1.5x)")
  print(f"max |JAX - PyTorch| over the embeddings: {np.abs(y_jax - y_torch).max():.2e}")


if __name__ == "__main__":
  app.run(main)
