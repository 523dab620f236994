"""Retrieval metrics: Precision@k, Recall@k, reciprocal rank / MRR, Set-Recall.

`retrieved` is a ranked list of item ids (best first), `relevant` the gold ids. Both are
deduplicated first, keeping the first occurrence (MMQA's dev file lists some gold documents
twice). Definitions:
  P@k  = |top_k(retrieved) & relevant| / k        (k in the denominator even when fewer items
                                                    were retrieved)
  R@k  = |top_k(retrieved) & relevant| / |relevant|
  RR   = 1 / rank of the first relevant item (0 when none is retrieved); MRR = mean RR
  Set-Recall(pool, gold) = |pool & gold| / |gold|   (the share of a question's gold evidence set
                                                    that the constructed pool covers);
  `complete=True` gives 1 only when the whole gold set is covered.
An empty gold set is an error: the metric is undefined and silently scoring it would bias means.
"""

from __future__ import annotations

from typing import Hashable, Iterable, Sequence


def _dedup(items: Iterable[Hashable]) -> list:
  return list(dict.fromkeys(items))


def _check(relevant, k=None, what="relevant"):
  if not relevant:
    raise ValueError(f"retrieval metric: the {what} set is empty; the metric is undefined")
  if k is not None and (not isinstance(k, int) or k < 1):
    raise ValueError(f"retrieval metric: k must be a positive int, got {k!r}")


def precision_at_k(retrieved: Sequence, relevant: Iterable, k: int) -> float:
  rel = set(relevant)
  _check(rel, k)
  return sum(x in rel for x in _dedup(retrieved)[:k]) / k


def recall_at_k(retrieved: Sequence, relevant: Iterable, k: int) -> float:
  rel = set(relevant)
  _check(rel, k)
  return sum(x in rel for x in _dedup(retrieved)[:k]) / len(rel)


def reciprocal_rank(retrieved: Sequence, relevant: Iterable) -> float:
  rel = set(relevant)
  _check(rel)
  for rank, x in enumerate(_dedup(retrieved), start=1):
    if x in rel:
      return 1.0 / rank
  return 0.0


def set_recall(pool: Iterable, gold: Iterable, complete: bool = False) -> float:
  g = set(gold)
  _check(g, what="gold")
  covered = len(g & set(pool))
  return float(covered == len(g)) if complete else covered / len(g)


def mean(values: Iterable[float]) -> float:
  values = list(values)
  if not values:
    raise ValueError("retrieval metric: no queries to average")
  return sum(values) / len(values)


def mrr(runs: Iterable[tuple[Sequence, Iterable]]) -> float:
  """Mean reciprocal rank over (retrieved, relevant) pairs."""
  return mean(reciprocal_rank(r, g) for r, g in runs)


def evaluate(runs: Sequence[tuple[Sequence, Iterable]], ks: Sequence[int] = (5,)) -> dict:
  """Means over queries: {"P@k", "R@k" for k in ks, "MRR", "n"}."""
  runs = [(list(r), set(g)) for r, g in runs]
  out = {}
  for k in ks:
    out[f"P@{k}"] = mean(precision_at_k(r, g, k) for r, g in runs)
    out[f"R@{k}"] = mean(recall_at_k(r, g, k) for r, g in runs)
  out["MRR"] = mrr(runs)
  out["n"] = len(runs)
  return out
