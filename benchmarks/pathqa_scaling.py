r"""The scalability setting on PathQuestion / WorldCup2014 (paper Section 4.5 / Table 4): each
scored question retrieves from one pool in which the scored questions' instance graphs are mixed
with distractor facts (the release's other KBs, then WordNet 3.0), at each --tiers size; exact
search and ScaNN (calibrated at build, retrieval.index) over the same MiniLM embeddings. Definitions:
graphloom_jax/evaluation/pathqa_scaling.py. Writes tier-N.json per tier (a finished tier is kept
and skipped on a rerun), results.json and report.md to --workdir.

  python -m benchmarks.pathqa_scaling --data_dir=DIR --data_config=PQL-3H \
      --wordnet_dir=/usr/share/wordnet --tiers=10000,100000 --workdir=runs/pq/scaling

Embeddings are cached under --cache_dir (keyed by text and model, filled shard by shard, so an
interrupted run resumes where it stopped).

Answers from the pool (--answer_rows, e.g. graphloom or flat_rag_tuned, with --heads / --adapters
as in benchmarks/pathqa_rows.py): each row answers every scored question once from its own
instance graph and once per tier from the tier's pool (`pipeline.instance.pool_rows`: the rows
named as an instance graph's, embedded, indexed with --answer_index), the question keeping its
own graph's prefix objects; Hits@1 / EM / F1, R@5 of the retrieved subgraph and the online
seconds per question (every stage after the instance graph), paired against the own-graph run.
Records under --workdir/answers/<pool>/seed<seed>/<row>.json (a finished one is kept).

  python -m benchmarks.pathqa_scaling ... --answer_rows=graphloom \
      --heads=benchmarks/results/pathqa/heads_pql3_s0 --seed=0
"""

from __future__ import annotations

import json
import os
import pathlib
import time

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from graphloom_jax import atomic
from graphloom_jax.evaluation import pathqa_rows, pathqa_scaling


def _define_flags():
  """Flags, defined only when this file runs as a script (tests import it without them)."""
  flags.DEFINE_string("data_dir", None, "the release folder of --data_config's dataset")
  flags.DEFINE_string("data_config", "PQL-3H", "the scored dataset (PathQuestion or WC names)")
  flags.DEFINE_string("split", "test", "the scored split")
  flags.DEFINE_string("split_protocol", "path", "path (headline) or line (published)")
  flags.DEFINE_string("pathquestion_dir", None, "PathQuestion release: its KBs are distractors")
  flags.DEFINE_string("wc2014_dir", None, "WorldCup2014 release: its KB is a distractor source")
  flags.DEFINE_string("wordnet_dir", None, "WordNet 3.0 wndb folder: its facts are distractors")
  flags.DEFINE_string("tiers", "10000,100000,1000000", "pool sizes, comma-separated")
  flags.DEFINE_string("cache_dir", "./.cache", "embedding cache folder")
  flags.DEFINE_string("workdir", "runs/pq/scaling", "output folder")
  config_flags.DEFINE_config_file("config", "configs/pathquestion.py",
                                  "GraphLoom config of the answering rows")
  flags.DEFINE_list("answer_rows", [], "answering rows run on every tier (graphloom, a tuned or "
                    "zero-shot mode); empty: retrieval only")
  flags.DEFINE_string("heads", None, "trained GraphLoom heads (folder) for --answer_rows")
  flags.DEFINE_list("adapters", [], "mode=folder of a trained text adapter")
  flags.DEFINE_integer("seed", 0, "training seed of the heads (a label for the answer records)")
  flags.DEFINE_integer("batch", 8, "questions per answer_batch call")
  flags.DEFINE_enum("answer_index", "scann", ["exact", "scann"],
                    "index over each tier's pool when answering")
  flags.DEFINE_integer("num_examples", 0, "answer only the first N scored questions (0: all)")


def _dataset(name: str, root):
  for module in pathqa_rows.readers().values():
    if name in module.NAMES:
      return module.load(name, root=root)
  raise app.UsageError(f"--data_config={name!r} is not a PathQuestion or WorldCup2014 name")


def _sources(f, scored):
  from graphloom_jax.data import pathquestion, wc2014

  out = [("the scored KB", scored.kb_triples())]
  for module, folder in ((pathquestion, f.pathquestion_dir), (wc2014, f.wc2014_dir)):
    if folder:
      kbs = {}
      for name in module.NAMES:
        try:
          ds = module.load(name, root=folder)
        except FileNotFoundError:
          continue  # a release folder without this dataset
        kbs.setdefault(ds.kb_path, ds)
      out += [(pathlib.Path(p).name, ds.kb_triples()) for p, ds in sorted(kbs.items())]
  if f.wordnet_dir:
    from graphloom_jax.graph.kb import WordNet, wordnet_facts

    out.append(("WordNet 3.0", wordnet_facts(WordNet.load(f.wordnet_dir, pos="nvar"))))
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  if not f.data_dir:
    raise app.UsageError("--data_dir (the release folder of --data_config) is required")
  from graphloom_jax.models import load_embedder
  from graphloom_jax.models.embedding_cache import cached_embed
  from graphloom_jax.retrieval import ExactIndex, ScannIndex

  out = pathlib.Path(f.workdir)
  out.mkdir(parents=True, exist_ok=True)
  ds = _dataset(f.data_config, f.data_dir)
  questions = ds.split(f.split, f.split_protocol)
  instance = pathqa_scaling.instance_rows(ds, questions)
  sources = _sources(f, ds)
  extra = pathqa_scaling.distractors([rows for _, rows in sources],
                                     {t.key() for t in instance})
  tiers = sorted(int(x) for x in f.tiers.split(",") if x)
  print(f"{f.data_config} {f.split} ({f.split_protocol} split): {len(questions)} questions, "
        f"{len(instance)} instance rows; distractors {len(extra)} from "
        f"{', '.join(f'{name} ({len(rows)})' for name, rows in sources)}", flush=True)
  embedder = load_embedder()
  q_vec = cached_embed(embedder, [q.question for q in questions], f.cache_dir)
  gold = [{t.key() for t in ds.gold_triples(q)} for q in questions]
  # Baseline: each question against its own instance graph only, exactly.
  per_q = []
  own = [ds.instance_triples(q) for q in questions]
  # One cache lookup for every question's rows (the cache is read from disk once per call).
  vectors = cached_embed(embedder, [t.verbalize() for rows in own for t in rows], f.cache_dir)
  start = 0
  for rows, v in zip(own, q_vec):
    vec = vectors[start:start + len(rows)]
    start += len(rows)
    order = np.argsort(-(vec @ v), kind="stable")[:10]
    per_q.append([rows[i].key() for i in order])
  results = {"instance graph": pathqa_scaling.retrieval_scores(per_q, gold)}
  print(f"instance graph only: {results['instance graph']}", flush=True)
  for n in tiers:
    path = out / f"tier-{n}.json"
    if path.exists():
      results[str(n)] = json.loads(path.read_text())
      print(f"N={n}: kept {path}", flush=True)
      continue
    rows = pathqa_scaling.pool(instance, extra, n)
    t0 = time.perf_counter()
    vectors = cached_embed(embedder, [t.verbalize() for t in rows], f.cache_dir,
                           log=lambda m: print(m, flush=True))
    embed_s = time.perf_counter() - t0
    record = {"pool": n, "instance_rows": len(instance), "embed_s": round(embed_s, 1)}
    for name, cls in (("exact", ExactIndex), ("scann", ScannIndex)):
      t0 = time.perf_counter()
      index = cls(vectors)
      build = time.perf_counter() - t0
      ranked, batched, single = pathqa_scaling.search_all(index, rows, q_vec)
      record[name] = {**pathqa_scaling.retrieval_scores(ranked, gold), "build_s": round(build, 1),
                      "batched_ms": 1e3 * batched, "single_ms": 1e3 * single}
      if name == "exact":
        exact_ranked = ranked
      else:  # recall@10 of ScaNN against exact search on these questions
        record[name]["recall10_vs_exact"] = float(np.mean(
            [len(set(a) & set(b)) / len(b) for a, b in zip(ranked, exact_ranked)]))
        record[name]["options"] = index.options
        record[name]["calibration"] = {k: v for k, v in (index.calibration or {}).items()
                                       if k != "grid"}
      print(f"N={n} {name}: {record[name]}", flush=True)
    record["load_average"] = os.getloadavg()
    path.write_text(json.dumps(record, indent=1))
    results[str(n)] = record
  (out / "results.json").write_text(json.dumps(results, indent=1))
  lines = [f"# {f.data_config} {f.split}, {f.split_protocol} split: retrieval from a growing pool",
           "", "| pool | index | R@5 | MRR@10 | Hits@1 | recall@10 vs exact | batched ms/q | "
           "1-query ms |", "|---|---|---|---|---|---|---|---|"]
  base = results["instance graph"]
  lines.append(f"| own instance graph | exact | {base['recall5']:.1f} | {base['mrr10']:.1f} | "
               f"{base['hits1']:.1f} | | | |")
  for n in tiers:
    for name in ("exact", "scann"):
      r = results[str(n)][name]
      vs = f"{r['recall10_vs_exact']:.3f}" if "recall10_vs_exact" in r else ""
      lines.append(f"| {n:,} | {name} | {r['recall5']:.1f} | {r['mrr10']:.1f} | "
                   f"{r['hits1']:.1f} | {vs} | {r['batched_ms']:.3f} | {r['single_ms']:.3f} |")
  if f.answer_rows:
    lines += ["", *_answers(f, ds, questions, instance, extra, tiers, embedder, out)]
  (out / "report.md").write_text("\n".join(lines) + "\n")
  print("\n".join(lines))


def _answers(f, ds, questions, instance_triples, extra, tiers, embedder, out) -> list[str]:
  """Every --answer_rows row on the questions' own instance graphs and on each tier's pool;
  the answers section of report.md."""
  from graphloom_jax.models.embedding_cache import cached_embed
  from graphloom_jax.pipeline import GraphLoom, instance
  from graphloom_jax.retrieval import index as index_lib
  from graphloom_jax.retrieval.subgraph import TriplePool

  cfg = f.config
  questions = questions[:f.num_examples] if f.num_examples else questions
  system = GraphLoom.from_config(cfg, heads=f.heads, adapters=dict(
      a.split("=", 1) for a in f.adapters), kb_sources=[])
  if getattr(system.embedder, "model_id", None) != embedder.model_id:
    raise app.UsageError(f"the config's embedder ({getattr(system.embedder, 'model_id', None)}) "
                         f"is not the pool's ({embedder.model_id})")
  folder = out / "answers"
  for pool_size in [None] + tiers:
    name = "instance" if pool_size is None else str(pool_size)
    todo = [r for r in f.answer_rows
            if not (folder / name / f"seed{f.seed}" / f"{r}.json").exists()]
    if not todo:
      print(f"answers from {name}: done already", flush=True)
      continue
    pool, built = None, {}
    if pool_size is not None:
      rows = instance.pool_rows(pathqa_scaling.pool(instance_triples, extra, pool_size),
                                config=cfg)
      vectors = cached_embed(embedder, [t.verbalize() for t in rows], f.cache_dir,
                             log=lambda m: print(m, flush=True))
      t0 = time.perf_counter()
      index = index_lib.make_index(f.answer_index, vectors)
      built = {"index": f.answer_index, "build_s": round(time.perf_counter() - t0, 1),
               "rows": len(rows), "options": getattr(index, "options", None)}
      pool = TriplePool(rows, vectors, index=index)
      print(f"answers from {name}: pool of {len(rows)} rows, {built}", flush=True)
    for row in todo:
      start = time.time()
      records = pathqa_rows.system_row(system, ds, questions, row, f.batch,
                                       log=lambda m: print(m, flush=True), pool=pool)
      result = dict(row=row, seed=f.seed, pool=name, dataset=f.data_config,
                    protocol=f.split_protocol, split=f.split, heads=f.heads, **built,
                    metrics=pathqa_rows.metrics(records), wall_seconds=time.time() - start,
                    load_average=os.getloadavg(), records=records)
      path = folder / name / f"seed{f.seed}" / f"{row}.json"
      path.parent.mkdir(parents=True, exist_ok=True)
      atomic.atomic_write_text(path, json.dumps(result, indent=1) + "\n")
      print(f"answers from {name}, {row}: {result['metrics']}", flush=True)
  return pathqa_scaling.answer_report(folder)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
