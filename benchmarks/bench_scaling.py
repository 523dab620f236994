"""Distractor-pool scaling (MISSION.md section 8, issue 4 item 9): SceneKB questions retrieved
from the instance graphs mixed with 10k, 100k and 1M real WordNet 3.0 triples, with the exact
index (the oracle) and ScaNN at its shipped defaults.

  python benchmarks/bench_scaling.py [--tiers=10000,100000,1000000] [--max_real=200000]
      [--cache_dir=./.cache] [--wordnet_dir=/usr/share/wordnet] [--embed_only]

Setup (printed again with the results):
- Questions: SceneKB `--split` (test: 296), embedded with the MiniLM embedder.
- Instance pool: the verbalized triples ("subject relation object") of all 400 SceneKB instance
  graphs (scene triples with confidence >= tau_edge 0.5 plus their WordNet facts), deduplicated
  by text. Distractors: triples enumerated from the WordNet 3.0 database files (every pointer of
  every synset, nouns, verbs, adjectives, adverbs; subject = each word of the synset, object = the
  first four words of the target synset), minus any text of the instance pool, shuffled with a fixed
  seed; tier N adds the first N. Texts are what is compared: a retrieved triple is a hit when its
  text equals a gold triple's text (a text-only retriever cannot tell identical texts apart).
- Embeddings are cached under --cache_dir (keyed by text and model) and reused across runs.
  At most --max_real distractors are embedded from their text; when a tier needs more, the rest
  are perturbed copies of real distractor embeddings, normalize(e + s * g) with g ~ N(0, I/D)
  and s ~ U(0.5, 1.0) (cosine to e about 0.7-0.9), and the output says how many.
- Metrics: Recall@5 (gold triples found in the top 5, averaged over questions), MRR@10 (first
  gold hit), ScaNN recall@10 against exact on all SceneKB questions, latency per query for one
  query at a time (median) and for all questions in one call (total / Q), index build time.
  Baseline "instance": each question searched over its own instance graph only, exactly.
"""

import re
import statistics
import time

import numpy as np
from absl import app, flags

flags.DEFINE_string("tiers", "0,10000,100000,1000000", "WordNet distractor counts, comma-separated "
                    "(0: all instance graphs, no WordNet distractors)")
flags.DEFINE_integer("max_real", 200_000, "distractors embedded from text; beyond: perturbed")
flags.DEFINE_string("cache_dir", "./.cache", "embedding cache folder")
flags.DEFINE_string("wordnet_dir", "/usr/share/wordnet", "WordNet 3.0 wndb folder")
flags.DEFINE_string("split", "test", "SceneKB split whose questions are scored")
flags.DEFINE_integer("latency_queries", 50, "queries timed one at a time per index")
flags.DEFINE_bool("embed_only", False, "fill the embedding cache for the tiers and stop")
flags.DEFINE_string("sweep", "", "comma-separated ScaNN leaves_to_search to also report at the "
                    "largest tier (recall@10 and latency), for tuning the defaults")

TAU_EDGE = 0.5
SEED = 20261129

# WordNet pointer symbols beyond the ones graph.kb names (wninput(5WN) descriptions, phrased).
EXTRA_RELATIONS = {
    "+": "is derivationally related to", "&": "is similar to", "\\": "pertains to",
    ";c": "belongs to the topic", "-c": "is the topic of", ";r": "belongs to the region",
    "-r": "is the region of", ";u": "is used in the register", "-u": "is the register of",
    "^": "see also", "$": "is in a verb group with", "*": "entails", ">": "causes",
    "<": "is a participle of",
}


def log(msg):
  print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _word(w: str) -> str:
  # Adjective entries carry syntactic markers such as "long(a)".
  return re.sub(r"\([a-z]+\)$", "", w).replace("_", " ").lower()


def wordnet_texts(folder) -> list[str]:
  """Every distinct verbalized WordNet triple (see the module docstring), sorted."""
  from graphloom_jax.graph.kb import WORDNET_RELATIONS, WordNet

  names = {**WORDNET_RELATIONS, **EXTRA_RELATIONS}
  wn = WordNet.load(folder, pos="nvar")
  out = set()
  for s in wn.synsets.values():
    for p in s.pointers:
      target = wn.synsets.get((p.pos if p.pos != "s" else "a", p.offset))
      if target is None or p.symbol not in names:
        continue
      rel = names[p.symbol]
      if p.source_target == "0000":  # a relation between whole synsets
        for w in s.words:
          for u in target.words[:4]:
            out.add(f"{_word(w)} {rel} {_word(u)}")
      else:  # a relation between two particular words
        si, ti = int(p.source_target[:2], 16), int(p.source_target[2:], 16)
        out.add(f"{_word(s.words[si - 1])} {rel} {_word(target.words[ti - 1])}")
  return sorted(out)


def scenekb_data(split):
  """(questions of `split`, all question texts, instance pool texts, per-instance text lists)."""
  from graphloom_jax.data import scenekb
  from graphloom_jax.graph.instance_graph import filter_edges

  data = {s: scenekb.load(s) for s in scenekb.SPLITS}
  kb = data[split]
  per_instance = {}
  for inst in sorted(kb.images):
    triples = filter_edges(kb.instance_facts(inst, hops=2), TAU_EDGE)
    per_instance[inst] = sorted({t.verbalize() for t in triples})
  pool = sorted({t for texts in per_instance.values() for t in texts})
  # The scored split's questions come last, so they are the tail of all_questions.
  order = [s for s in scenekb.SPLITS if s != split] + [split]
  all_questions = [q.question for s in order for q in data[s].questions]
  return kb.questions, all_questions, pool, per_instance


def gold_texts(q) -> set[str]:
  return {f"{s} {r} {o}" for s, r, o in q.extra["gold_triples"]}


def perturbed(real: np.ndarray, n: int, rng) -> np.ndarray:
  base = real[rng.integers(0, len(real), n)]
  g = rng.standard_normal(base.shape).astype(np.float32) / np.sqrt(base.shape[1])
  v = base + rng.uniform(0.5, 1.0, (n, 1)).astype(np.float32) * g
  return v / np.linalg.norm(v, axis=1, keepdims=True)


def retrieval_metrics(ids, pool_texts, golds, k5=5, k_mrr=10):
  r5, rr = [], []
  for row, gold in zip(ids, golds):
    texts = [pool_texts[i] if i >= 0 else None for i in row]
    r5.append(len(gold & set(texts[:k5])) / len(gold))
    first = next((r for r, t in enumerate(texts[:k_mrr]) if t in gold), None)
    rr.append(0.0 if first is None else 1.0 / (first + 1))
  return float(np.mean(r5)), float(np.mean(rr))


def timed_search(index, queries, k, n):
  """Top-k ids of every query, the median seconds of one query at a time over the first n, and
  seconds per query when all are searched in one call (after a warm-up of each shape)."""
  index.search(queries[:1], k)
  single = []
  for q in queries[:n]:
    t = time.perf_counter()
    index.search(q[None], k)
    single.append(time.perf_counter() - t)
  index.search(queries[:256], k)
  t = time.perf_counter()
  ids, _ = index.search(queries, k)
  return ids, statistics.median(single), (time.perf_counter() - t) / len(queries)


def recall_vs(approx_ids, exact_ids):
  return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(approx_ids, exact_ids)]))


def main(argv):
  del argv
  f = flags.FLAGS
  from graphloom_jax.models import load_embedder
  from graphloom_jax.models.embedding_cache import cached_embed
  from graphloom_jax.retrieval import ExactIndex, ScannIndex
  from graphloom_jax.retrieval.index import scann_defaults

  tiers = [int(x) for x in f.tiers.split(",") if x]
  questions, all_questions, pool, per_instance = scenekb_data(f.split)
  golds = [gold_texts(q) for q in questions]
  missing = sum(len(g - set(per_instance[q.extra["instance_id"]]))
                for g, q in zip(golds, questions))
  log(f"SceneKB {f.split}: {len(questions)} questions; instance pool {len(pool)} unique triple "
      f"texts from {len(per_instance)} instances; gold texts absent from their instance graph: "
      f"{missing}")
  t = time.perf_counter()
  pool_set = set(pool)
  distractors = [x for x in wordnet_texts(f.wordnet_dir) if x not in pool_set]
  np.random.default_rng(SEED).shuffle(distractors)
  log(f"WordNet: {len(distractors)} distinct distractor triple texts "
      f"({time.perf_counter() - t:.1f} s)")
  if max(tiers) > len(distractors):
    raise SystemExit(f"--tiers asks for {max(tiers)} distractors, WordNet gives "
                     f"{len(distractors)}")

  embedder = load_embedder()
  n_real = min(max(tiers), f.max_real)
  t = time.perf_counter()
  all_q_vec = cached_embed(embedder, all_questions, f.cache_dir)
  q_vec = all_q_vec[len(all_questions) - len(questions):]
  pool_vec = cached_embed(embedder, pool, f.cache_dir)
  real_vec = cached_embed(embedder, distractors[:n_real], f.cache_dir, log=log)
  log(f"embeddings ready: {len(all_questions)} questions, {len(pool)} instance triples, "
      f"{n_real} real distractors ({time.perf_counter() - t:.1f} s incl. cache reads)")
  if f.embed_only:
    return

  pool_index = {text: i for i, text in enumerate(pool)}
  print(f"\nQuestions: SceneKB {f.split} ({len(questions)}); recall@10 vs exact over all "
        f"{len(all_questions)} SceneKB questions; latency: {f.latency_queries} single queries "
        "(median) and one batched call.")

  # Baseline: each question against its own instance graph only.
  r5, rr = [], []
  for q, qv, gold in zip(questions, q_vec, golds):
    texts = per_instance[q.extra["instance_id"]]
    scores = pool_vec[[pool_index[x] for x in texts]] @ qv
    ranked = [texts[i] for i in np.argsort(-scores, kind="stable")]
    m = retrieval_metrics([np.arange(len(ranked))], ranked, [gold])
    r5.append(m[0])
    rr.append(m[1])
  print(f"\ninstance graph only ({np.mean([len(v) for v in per_instance.values()]):.0f} triples "
        f"per instance): R@5 {np.mean(r5):.3f}  MRR@10 {np.mean(rr):.3f}")

  rows = []
  rng = np.random.default_rng(SEED)
  fill = perturbed(real_vec, max(0, max(tiers) - n_real), rng)
  for n in tiers:
    texts = pool + distractors[:n]
    n_fake = max(0, n - n_real)
    vectors = np.concatenate([pool_vec, real_vec[:n], fill[:n_fake]])
    # Perturbed rows have no text of their own; they can never be a hit.
    texts = texts[:len(pool) + n - n_fake] + [""] * n_fake
    log(f"tier {n}: pool {len(vectors)} ({n - n_fake} real distractors, {n_fake} perturbed)")
    t = time.perf_counter()
    exact = ExactIndex(vectors)
    exact.search(q_vec[:1], 10)  # uploads the pool
    exact_build = time.perf_counter() - t
    t = time.perf_counter()
    scann = ScannIndex(vectors)
    scann_build = time.perf_counter() - t
    log(f"  built: exact {exact_build:.1f} s, ScaNN {scann_build:.1f} s "
        f"({scann_defaults(len(vectors))})")
    res = {}
    for name, index in (("exact", exact), ("scann", scann)):
      all_ids, lat1, latb = timed_search(index, all_q_vec, 10, f.latency_queries)
      ids = all_ids[len(all_questions) - len(questions):]
      res[name] = (*retrieval_metrics(ids, texts, golds), all_ids, lat1, latb)
    recall = recall_vs(res["scann"][2], res["exact"][2])
    rows.append((n, n_fake, res, recall, exact_build, scann_build))
    log(f"  recall@10 {recall:.4f}; single query exact {res['exact'][3] * 1e3:.2f} ms, ScaNN "
        f"{res['scann'][3] * 1e3:.3f} ms")
    if f.sweep and n == max(tiers):
      print("\nScaNN leaves_to_search sweep at this tier (recall@10 vs exact, single-query ms):")
      for leaves in (int(x) for x in f.sweep.split(",")):
        ids, _ = scann.search(all_q_vec, 10, leaves_to_search=leaves)
        one = []
        for q in all_q_vec[:f.latency_queries]:
          t = time.perf_counter()
          scann.search(q[None], 10, leaves_to_search=leaves)
          one.append(time.perf_counter() - t)
        print(f"  leaves {leaves:5d}: recall@10 {recall_vs(ids, res['exact'][2]):.4f}  "
              f"{statistics.median(one) * 1e3:.3f} ms")
    del exact, scann

  print("\n| distractors | perturbed | index | R@5 | MRR@10 | 1-query ms | batched ms/q | "
        "build s | ScaNN R@10 vs exact | speed-up 1-query | speed-up batched |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  for n, n_fake, res, recall, eb, sb in rows:
    for name, build in (("exact", eb), ("scann", sb)):
      r5_, mrr_, _, lat1, latb = res[name]
      extra = (f"{recall:.4f} | {res['exact'][3] / res['scann'][3]:.1f}x | "
               f"{res['exact'][4] / res['scann'][4]:.1f}x" if name == "scann" else " | | ")
      print(f"| {n} | {n_fake} | {name} | {r5_:.3f} | {mrr_:.3f} | {lat1 * 1e3:.2f} | "
            f"{latb * 1e3:.3f} | {build:.1f} | {extra} |")
  if any(row[1] for row in rows):
    print(f"\nperturbed = distractor vectors made from the {n_real} real distractor embeddings as "
          "normalize(e + s g), g ~ N(0, I/D), s ~ U(0.5, 1.0), because embedding every text on "
          "this CPU would take too long (--max_real); they have no text and never count as hits.")
  print("Targets at 1M: ScaNN recall@10 >= 0.95 vs exact, >= 10x faster per query.")


if __name__ == "__main__":
  app.run(main)
