"""Bootstrap intervals over questions, the one implementation every table uses
(docs/evaluation.md).

`bootstrap_interval(values)`: the 2.5th and 97.5th percentiles of the mean of `values` over
`resamples` resamplings of the questions with replacement (numpy's default_rng(seed)), i.e. a
95% percentile bootstrap interval. `paired_difference(a, b)`: the mean of a - b over the questions
both scored, with that interval of the per-question differences.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np


def bootstrap_interval(values, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
  """95% percentile bootstrap interval of the mean of per-question `values`."""
  values = np.asarray(values, np.float64)
  if values.ndim != 1 or not len(values):
    raise ValueError(f"bootstrap_interval: expected a non-empty vector, got shape {values.shape}")
  idx = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
  lo, hi = np.percentile(values[idx].mean(axis=1), [2.5, 97.5])
  return float(lo), float(hi)


def paired_difference(a: Mapping, b: Mapping, resamples: int = 10_000, seed: int = 0
                      ) -> dict | None:
  """a - b on the questions both score (question id -> score, in a's order): the mean
  difference `delta` with its 95% bootstrap interval (`lo`, `hi`) and the number of questions;
  None when they share no question."""
  d = [a[q] - b[q] for q in a if q in b]
  if not d:
    return None
  lo, hi = bootstrap_interval(d, resamples, seed)
  return dict(delta=float(np.mean(d)), lo=lo, hi=hi, questions=len(d))
