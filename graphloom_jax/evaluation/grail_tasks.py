"""GRAIL's two retrieval evaluations and its latency measurement.

Shapes: N instances, Q questions, E context slots, K pool budget, S slices, P pool items.

Evidence Set Completion (`evidence_completion`): a gold item of a question with >= 2 gold
items is hidden, the others are the context; the hidden item is ranked among the whole pool
(context items skipped: the retriever already holds them). Recall@k per instance; a question's
value is the mean over its hidden items, a family's the mean over its questions, and the macro
average the mean over the evidence set's macro families (`EvidenceSet.macro_over`: Compare,
Compose and Intersect unless the set names others; families absent from the data are left out
of it). Which gold items are hidden is the set's `hide`: every one in turn, or only the last
(the last hop of an answer path).

Sequential Pool Construction (`sequential_pool`): no gold context; a pool of K items is built in
S slices (slice sizes as equal as possible, the first slices larger). Slice 1 is the plain
question search; every later slice steers the question with the pool so far and adds the best
items not yet pooled. Set-Recall = |pool ∩ gold| / |gold|, averaged over questions. Query-only
is the single-shot top-K at every S.
  Rank Jump: over gold items a method pools that the single-shot top-K missed, their mean rank
  under the plain question search (how deep the steering reached), and how many there were.
  Noise-Resilience Margin: on questions whose first slice holds no gold item, mean Set-Recall of
  GRAIL (and Hybrid) minus that of Additive.
"""

from __future__ import annotations

import collections
import time

import numpy as np

from graphloom_jax.evaluation import intervals
from graphloom_jax.retrieval import grail_data

KS = (1, 5, 10, 20)


def _family_means(values_by_question: dict[int, list[float]], families: dict[int, str]):
  per_family = collections.defaultdict(list)
  for qi, vals in values_by_question.items():
    per_family[families[qi]].append(float(np.mean(vals)))
  return {f: float(np.mean(v)) for f, v in sorted(per_family.items())}, \
      {f: len(v) for f, v in sorted(per_family.items())}


def macro(per_family: dict[str, float],
          over: tuple[str, ...] = grail_data.MULTI_HOP_FAMILIES) -> float | None:
  """The mean over the families of `over` present in per_family (None when none is)."""
  vals = [per_family[f] for f in over if f in per_family]
  return float(np.mean(vals)) if vals else None


def recall_table(ranks: np.ndarray, question: np.ndarray, families: dict[int, str],
                 ks=KS, macro_over: tuple[str, ...] = grail_data.MULTI_HOP_FAMILIES) -> dict:
  """{'R@k': {'per_family': {...}, 'macro': m, 'all': a}} from instance ranks [N]; the macro
  average is over the families of `macro_over`."""
  out = {}
  for k in ks:
    by_q = collections.defaultdict(list)
    for r, qi in zip(ranks, question):
      by_q[int(qi)].append(float(r <= k))
    per_family, counts = _family_means(by_q, families)
    out[f"R@{k}"] = {"per_family": per_family, "macro": macro(per_family, macro_over),
                     "all": float(np.mean([np.mean(v) for v in by_q.values()])) if by_q else None}
  out["questions_per_family"] = counts if ks else {}
  return out


def paired_recall(result: dict, a: str, b: str, k: int = 5, groups=None) -> dict | None:
  """R@k of row a minus row b of an Evidence Set Completion result, paired over its instances
  (from the stored ranks), with the 95% bootstrap interval (`evaluation.intervals`), in
  percent points. `groups` [N] (default: `result["instance_group"]` when present) resamples
  groups of instances instead, each the mean of its instances: paraphrases of one answer path
  are one group, so they do not count as independent questions."""
  ra, rb = result["methods"][a]["ranks"], result["methods"][b]["ranks"]
  groups = result.get("instance_group") if groups is None else groups
  groups = list(range(len(ra))) if groups is None else list(groups)
  per = collections.defaultdict(list)
  for g, x, y in zip(groups, ra, rb):
    per[g].append((100.0 * (x <= k), 100.0 * (y <= k)))
  mean = {g: np.mean(v, axis=0) for g, v in per.items()}
  d = intervals.paired_difference({g: m[0] for g, m in mean.items()},
                                  {g: m[1] for g, m in mean.items()})
  if d is not None:
    d["instances"] = len(ra)
  return d


def evidence_completion(retrievers: dict, es: grail_data.EvidenceSet, emb: grail_data.EmbeddedSet,
                        question_indices, max_evidence: int = 8, ks=KS) -> dict:
  """retrievers: {row name: (GrailRetriever, method)}. Returns per-row recall tables plus the
  per-instance ranks (so the numbers can be recomputed)."""
  inst = grail_data.completion_instances(es, question_indices, max_evidence)
  families = {int(qi): es.questions[qi].family for qi in set(inst.question.tolist())}
  # Instances whose questions share their gold items (paraphrases of one answer path) form one
  # group for the paired intervals.
  group_of = {}
  groups = [group_of.setdefault(es.questions[qi].gold, len(group_of)) for qi in inst.question]
  result = {"instances": int(len(inst)), "questions": len(families),
            "instance_question": inst.question.tolist(), "instance_group": groups,
            "instance_missing": inst.missing.tolist(), "methods": {}}
  for name, (retriever, method) in retrievers.items():
    q = retriever.encode_queries(emb.questions[inst.question])
    ranks = retriever.ranks(q, inst.context, inst.missing, method)
    result["methods"][name] = {"method": method, "ranks": ranks.tolist(),
                               **recall_table(ranks, inst.question, families, ks,
                                              es.macro_over)}
  return result


def slice_sizes(k: int, s: int) -> list[int]:
  if not 1 <= s <= k:
    raise ValueError(f"need 1 <= slices <= K, got slices={s}, K={k}")
  return [k // s + (1 if i < k % s else 0) for i in range(s)]


def build_pool(retriever, q, method: str, k: int, s: int) -> np.ndarray:
  """Pool ids [B,K] built in s slices (see the module docstring)."""
  sizes = slice_sizes(k, s)
  pool = np.full((q.shape[0], k), -1, np.int32)
  ids, _ = retriever.search(q, pool[:, :0], "query", sizes[0], exclude_context=False)
  pool[:, :sizes[0]] = ids
  filled = sizes[0]
  for size in sizes[1:]:
    ids, _ = retriever.search(q, pool, method, size)
    pool[:, filled:filled + size] = ids
    filled += size
  return pool


def sequential_pool(retrievers: dict, es: grail_data.EvidenceSet, emb: grail_data.EmbeddedSet,
                    question_indices, budgets=(10, 20), max_slices: int = 5) -> dict:
  """Set-Recall vs slices, Rank Jump and Noise-Resilience Margin for each (row, K, S)."""
  question_indices = [qi for qi in question_indices if es.questions[qi].gold]
  families = {qi: es.questions[qi].family for qi in question_indices}
  gold = [es.questions[qi].gold for qi in question_indices]
  result = {"questions": len(question_indices), "budgets": list(budgets),
            "slices": list(range(1, max_slices + 1)), "methods": {}}
  # Plain-question ranks of every gold item (the reference for Rank Jump), per retriever:
  # rows may use differently adapted spaces.
  ref_cache = {}
  first_slice_empty = {}
  for name, (retriever, method) in retrievers.items():
    q = retriever.encode_queries(emb.questions[question_indices])
    key = id(retriever)
    if key not in ref_cache:
      rows = np.repeat(np.arange(len(gold)), [len(g) for g in gold])
      targets = np.concatenate([np.asarray(g) for g in gold]).astype(np.int32)
      r = retriever.ranks(q[rows], np.full((len(rows), 1), -1), targets, "query")
      ref = [dict() for _ in gold]
      for row, t, rank in zip(rows, targets, r):
        ref[row][int(t)] = int(rank)
      ref_cache[key] = ref
    ref = ref_cache[key]
    per_k = {}
    for k in budgets:
      curves = {"set_recall": [], "set_recall_per_family": [], "rank_jump_mean_rank": [],
                "rank_jump_items": [], "per_question": []}
      for s in range(1, max_slices + 1):
        pool = build_pool(retriever, q, method, k, s)
        first = slice_sizes(k, s)[0]
        recalls, jumped = [], []
        for i, g in enumerate(gold):
          pooled = set(pool[i].tolist())
          recalls.append(len(pooled & set(g)) / len(g))
          jumped += [ref[i][t] for t in g if t in pooled and ref[i][t] > k]
          first_slice_empty.setdefault((k, s, i), not (set(pool[i, :first].tolist()) & set(g)))
        by_q = {qi: [r] for qi, r in zip(question_indices, recalls)}
        curves["set_recall"].append(float(np.mean(recalls)))
        curves["set_recall_per_family"].append(_family_means(by_q, families)[0])
        curves["rank_jump_mean_rank"].append(float(np.mean(jumped)) if jumped else None)
        curves["rank_jump_items"].append(len(jumped))
        curves["per_question"].append(recalls)
      per_k[str(k)] = curves
    result["methods"][name] = {"method": method, "budgets": per_k}
  result["first_slice_has_gold"] = {
      str(k): [[not first_slice_empty[(k, s, i)] for i in range(len(gold))]
               for s in range(1, max_slices + 1)] for k in budgets}
  result["noise_resilience_margin"] = _nrm(retrievers, result, first_slice_empty, len(gold),
                                           budgets, max_slices)
  return result


def _nrm(retrievers, result, first_slice_empty, n, budgets, max_slices) -> dict:
  """Margins of rows that share the additive row's retriever (and so its first slices)."""
  methods = result["methods"]
  if "additive" not in methods:
    return {}
  out = {}
  for name in methods:
    if name in ("additive", "query") or retrievers[name][0] is not retrievers["additive"][0]:
      continue
    per_k = {}
    for k in budgets:
      margins, counts = [], []
      for s in range(1, max_slices + 1):
        rows = [i for i in range(n) if first_slice_empty[(k, s, i)]]
        counts.append(len(rows))
        if not rows or s == 1:
          margins.append(None)
          continue
        mine = methods[name]["budgets"][str(k)]["per_question"][s - 1]
        add = methods["additive"]["budgets"][str(k)]["per_question"][s - 1]
        margins.append(float(np.mean([mine[i] - add[i] for i in rows])))
      per_k[str(k)] = {"margin": margins, "questions": counts}
    out[f"{name} - additive"] = per_k
  return out


def measure_latency(retrievers: dict, emb: grail_data.EmbeddedSet, question_indices, contexts,
                    k: int = 20, repeats: int = 100) -> dict:
  """Per-query wall time (one query at a time, as an online retriever sees them) of steering
  alone and of steering + top-k search, median and p90 in milliseconds. contexts [Q,E].
  Methods take turns on each query so that load from other processes falls on all of them."""
  rows = list(range(min(repeats, len(question_indices))))
  qs, steer_t, total_t = {}, {}, {}
  for name, (retriever, method) in retrievers.items():
    qs[name] = retriever.encode_queries(emb.questions[np.asarray(question_indices)[rows]])
    # Warm-up compiles every jitted path for this (method, E).
    retriever.search(qs[name][:1], contexts[:1], method, k)
    retriever.steer(qs[name][:1], contexts[:1], method).block_until_ready()
    steer_t[name], total_t[name] = [], []
  for i in rows:
    ci = contexts[i:i + 1]
    for name, (retriever, method) in retrievers.items():
      qi = qs[name][i:i + 1]
      t0 = time.perf_counter()
      retriever.steer(qi, ci, method).block_until_ready()
      t1 = time.perf_counter()
      retriever.search(qi, ci, method, k)
      t2 = time.perf_counter()
      steer_t[name].append(t1 - t0)
      total_t[name].append(t2 - t0)
  out = {}
  for name in retrievers:
    out[name] = {"steer_ms_median": 1e3 * float(np.median(steer_t[name])),
                 "steer_ms_p90": 1e3 * float(np.percentile(steer_t[name], 90)),
                 "query_ms_median": 1e3 * float(np.median(total_t[name])),
                 "query_ms_p90": 1e3 * float(np.percentile(total_t[name], 90)),
                 "queries": len(rows)}
  if "query" in out:
    base = out["query"]["query_ms_median"]
    for v in out.values():
      v["added_ms_vs_query_only"] = v["query_ms_median"] - base
  return out
