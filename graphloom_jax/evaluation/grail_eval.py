"""GRAIL's retrieval evaluations end to end (launch/evaluate_retrieval.py is the command line):
Evidence Set Completion and Sequential Pool Construction (evaluation/grail_tasks.py) for every
method, the rows' tables as text and their plots, written with the run's provenance.

Rows: Query-only, Additive, GRAIL, Hybrid (all in the trained, aligned space), plus "GRAIL
(untrained gate)": the same adapters with the gate at its initialisation, which isolates what
training the gate buys.
"""

from __future__ import annotations

import pathlib
import time

import jax
import numpy as np
from absl import logging

from graphloom_jax import atomic, provenance
from graphloom_jax.data import grail_sets
from graphloom_jax.evaluation import grail_tasks, written_queries
from graphloom_jax.models import embedder_from_config
from graphloom_jax.retrieval import grail, grail_data
from graphloom_jax.training import grail_train


ROW_LABELS = {"query": "Query-only", "additive": "Additive", "grail": "GRAIL", "hybrid": "Hybrid",
              "grail_untrained_gate": "GRAIL (untrained gate)", **written_queries.LABELS}


def make_retrievers(params, cfg, es, emb, seed: int = 0) -> dict:
  """Row name -> (retriever, method): every method of the trained GRAIL, and GRAIL with its
  gate at initialisation (`seed`)."""
  trained = grail.GrailRetriever(params, cfg, emb.pool, es.pool.modality)
  untrained_gate = {**params, "gate": grail.init_params(jax.random.key(seed), cfg)["gate"]}
  untrained_gate.pop("selector", None)
  rows = {m: (trained, m) for m in grail.METHODS if m != "hybrid" or "selector" in params}
  rows["grail_untrained_gate"] = (grail.GrailRetriever(untrained_gate, cfg, emb.pool,
                                                       es.pool.modality), "grail")
  return rows


def _fmt(x, scale=100.0, width=7):
  return f"{'-':>{width}}" if x is None else f"{scale * x:{width}.2f}"


def completion_table(result) -> str:
  """The Evidence Set Completion table as text."""
  fams = sorted({f for m in result["methods"].values() for f in m["R@1"]["per_family"]})
  head = f"{'method':24s}" + "".join(f"{'R@' + str(k):>8s}" for k in grail_tasks.KS) + \
      "".join(f"{f[:9] + ' R@5':>14s}" for f in fams) + f"{'ms/query':>10s}{'steer ms':>10s}"
  over = result.get("macro_over", grail_data.MULTI_HOP_FAMILIES)
  lines = [f"Evidence Set Completion: recall (%) macro-averaged over {'/'.join(over)}; "
           "per-family R@5; latency per query", head]
  for name, m in result["methods"].items():
    lat = result.get("latency", {}).get(name, {})
    lines.append(f"{ROW_LABELS.get(name, name):24s}"
                 + "".join(f" {_fmt(m[f'R@{k}']['macro'])}" for k in grail_tasks.KS)
                 + "".join(f"{_fmt(m['R@5']['per_family'].get(f), width=14)}" for f in fams)
                 + f"{lat.get('query_ms_median', float('nan')):10.3f}"
                 + f"{lat.get('steer_ms_median', float('nan')):10.3f}")
  lines.append(f"questions per family: {next(iter(result['methods'].values()))['questions_per_family']}"
               f"; {result['instances']} leave-one-out instances")
  return "\n".join(lines)


def pool_table(result) -> str:
  """The Sequential Pool Construction table as text."""
  lines = ["Sequential Pool Construction: Set-Recall (%) vs slices S; Rank Jump = mean "
           "plain-search rank of gold items surfaced beyond the single-shot top-K (count)"]
  for k in result["budgets"]:
    lines.append(f"K = {k}")
    lines.append(f"{'method':24s}" + "".join(f"{'S=' + str(s):>8s}" for s in result["slices"])
                 + f"{'rank jump (S=max)':>22s}")
    for name, m in result["methods"].items():
      c = m["budgets"][str(k)]
      jump = c["rank_jump_mean_rank"][-1]
      lines.append(f"{ROW_LABELS.get(name, name):24s}"
                   + "".join(f" {_fmt(v)}" for v in c["set_recall"])
                   + f"{('-' if jump is None else f'{jump:.1f}'):>15s} ({c['rank_jump_items'][-1]})")
  for name, per_k in result["noise_resilience_margin"].items():
    for k, v in per_k.items():
      margins = " ".join("-" if x is None else f"{100 * x:+.2f}" for x in v["margin"])
      lines.append(f"Noise-Resilience Margin ({name}), K={k}, S=1..: {margins} "
                   f"(questions with no gold in slice 1: {v['questions']})")
  return "\n".join(lines)


def plot_completion(result, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(9.5, 4))
  names = list(result["methods"])
  width = 0.8 / len(names)
  for i, name in enumerate(names):
    vals = [100 * (result["methods"][name][f"R@{k}"]["macro"] or 0) for k in grail_tasks.KS]
    ax.bar(np.arange(len(grail_tasks.KS)) + i * width, vals, width, label=ROW_LABELS[name])
  ax.set_xticks(np.arange(len(grail_tasks.KS)) + 0.4 - width / 2,
                [f"R@{k}" for k in grail_tasks.KS])
  over = result.get("macro_over", grail_data.MULTI_HOP_FAMILIES)
  ax.set_ylabel("recall (%), macro average")
  ax.set_title(f"Evidence Set Completion ({result['data']}; macro over {', '.join(over)})",
               fontsize=10)
  ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_pool(result, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  budgets = result["budgets"]
  fig, axes = plt.subplots(1, len(budgets), figsize=(5 * len(budgets), 4), squeeze=False)
  for ax, k in zip(axes[0], budgets):
    for name, m in result["methods"].items():
      ax.plot(result["slices"], [100 * v for v in m["budgets"][str(k)]["set_recall"]], marker="o",
              label=ROW_LABELS[name])
    ax.set_xlabel("number of retrieval slices S")
    ax.set_ylabel("Set-Recall (%)")
    ax.set_title(f"K = {k} ({result['data']})")
    ax.set_xticks(result["slices"])
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def written_query_rows(result: dict, retriever, es, inst, embedder, generate, methods,
                       latency_queries: int = 20, log=logging.info) -> None:
  """Adds a row per decoder-written query method to an Evidence Set Completion result: the
  written text embedded, encoded and searched like Query-only (`retriever`, covered items
  skipped), its ranks and recall table, the texts, and the per-query latency of writing plus
  search, one query at a time on the first `latency_queries` instances."""
  questions = [es.questions[int(qi)].question for qi in inst.question]
  contexts = [[es.pool.texts[c] for c in row if c >= 0] for row in inst.context]
  families = {int(qi): es.questions[qi].family for qi in set(inst.question.tolist())}
  for method in methods:
    t0 = time.perf_counter()
    texts = written_queries.write(generate, method, questions, contexts, progress=True)
    seconds = time.perf_counter() - t0
    q = retriever.encode_queries(grail_data.cached_embed(embedder, texts, None))
    ranks = retriever.ranks(q, inst.context, inst.missing, "query")
    result["methods"][method] = {
        "method": method, "ranks": ranks.tolist(), "query_texts": texts,
        "write_seconds_batched": seconds,
        **grail_tasks.recall_table(ranks, inst.question, families, grail_tasks.KS, es.macro_over)}
    log(f"{written_queries.LABELS[method]}: R@5 {result['methods'][method]['R@5']['macro']}, "
        f"{seconds:.1f} s to write {len(texts)} queries in batches")
    write_t, total_t = [], []
    k = max(1, min(20, len(es.pool) - inst.context.shape[1]))  # top-20, as the other rows
    for i in range(min(latency_queries, len(inst))):
      t0 = time.perf_counter()
      text = written_queries.write(generate, method, questions[i:i + 1], contexts[i:i + 1])
      qv = retriever.encode_queries(np.asarray(embedder.embed(text), np.float32))
      t1 = time.perf_counter()
      retriever.search(qv, inst.context[i:i + 1], "query", k)
      t2 = time.perf_counter()
      write_t.append(t1 - t0)
      total_t.append(t2 - t0)
    result.setdefault("latency", {})[method] = {
        "steer_ms_median": 1e3 * float(np.median(write_t)),
        "query_ms_median": 1e3 * float(np.median(total_t)),
        "query_ms_p90": 1e3 * float(np.percentile(total_t, 90)), "queries": len(total_t),
        "note": "steer = writing the query with the decoder and embedding it"}


def run(config, task, data, output_dir, grail_dir="", split="test", max_questions=0,
        budgets=(10, 20), max_slices=5, latency_queries=100, written=(),
        written_latency_queries=20) -> dict:
  """Runs one task and writes its JSON, table and PNG to `output_dir`; returns the result.
  Without `grail_dir` it first trains GRAIL with `config` into <output_dir>/grail_train.
  `written`: decoder-written query methods (`written_queries.METHODS`) added as rows of
  Evidence Set Completion, written by the decoder `config.model` names."""
  log = logging.info
  out = pathlib.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  provenance.write(out, config, task=task, data=data)
  config = config.copy_and_resolve_references()
  config.grail.data = data
  g = config.grail
  es = grail_sets.from_config(g)
  cache_dir = g.cache_dir or str(out / "embeddings")
  embedder = embedder_from_config(config.embedder)
  emb = es.embed(embedder, cache_dir)
  if grail_dir:
    params, cfg = grail.load(grail_dir)
    train_history = None
  else:
    config.grail.cache_dir = cache_dir  # the training run reuses these embeddings
    params, cfg, train_history = grail_train.train_from_config(config, out / "grail_train", log)
  retrievers = make_retrievers(params, cfg, es, emb, g.train.seed)
  questions = es.select([split])
  if max_questions:
    questions = questions[:max_questions]
  if not questions:
    raise ValueError(f"{es.name}: no questions in split {split!r}")
  max_evidence = g.train.max_evidence
  if task == "evidence_completion":
    result = grail_tasks.evidence_completion(retrievers, es, emb, questions, max_evidence)
    inst = grail_data.completion_instances(es, questions, max_evidence)
    result["latency"] = grail_tasks.measure_latency(retrievers, emb, inst.question.tolist(),
                                                    inst.context, k=20, repeats=latency_queries)
    if written:
      from graphloom_jax.models import decoder as decoder_lib
      generate = written_queries.decoder_generate(decoder_lib.from_config(config.model))
      written_query_rows(result, retrievers["query"][0], es, inst, embedder, generate, written,
                         written_latency_queries, log)
  else:
    result = grail_tasks.sequential_pool(retrievers, es, emb, questions, budgets, max_slices)
    with_gold = [qi for qi in questions if es.questions[qi].gold]
    base = retrievers["query"][0]
    q = base.encode_queries(emb.questions[with_gold[:latency_queries]])
    k = max(budgets)
    ctx, _ = base.search(q, np.full((len(q), 0), -1, np.int32), "query", k // 2,
                         exclude_context=False)
    result["latency"] = grail_tasks.measure_latency(retrievers, emb, with_gold[:latency_queries],
                                                    ctx, k=k - k // 2, repeats=latency_queries)
  result.update(task=task, data=data, split=split, pool_size=len(es.pool),
                macro_over=list(es.macro_over), hide=es.hide,
                notes=es.notes, grail_config=dict(tau=cfg.tau, gate=cfg.gate),
                grail_dir=str(grail_dir or out / "grail_train" / "grail"),
                train_history=train_history)
  if task == "evidence_completion":
    result["paired_r5_vs_query"] = {name: grail_tasks.paired_recall(result, name, "query")
                                    for name in result["methods"] if name != "query"}
    if {"grail", "additive"} <= set(result["methods"]):
      result["paired_r5_grail_vs_additive"] = grail_tasks.paired_recall(result, "grail",
                                                                         "additive")
  table = completion_table(result) if task == "evidence_completion" else pool_table(result)
  log(table)
  for note in es.notes:
    log(f"note: {note}")
  atomic.atomic_write_json(out / f"{task}_{data}.json", result, indent=1, allow_nan=True)
  atomic.atomic_write_text(out / f"{task}_{data}.txt", table + "\n")
  (plot_completion if task == "evidence_completion" else plot_pool)(
      result, out / f"{task}_{data}.png")
  return result
