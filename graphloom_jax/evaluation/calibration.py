"""Calibration metrics for the router's gates: expected calibration error and reliability diagrams.

Shapes: N predictions. A prediction is a probability p in [0, 1] (a gate g_p, or a calibrated
gate) and its 0/1 outcome (the slot's utility). Bins are equal-width over [0, 1]; bin i holds
i / n <= p < (i + 1) / n, the last one also p = 1.

  ECE = sum_bins (|bin| / N) * |mean outcome in bin - mean p in bin|
"""

import dataclasses
import os

import numpy as np


@dataclasses.dataclass
class Reliability:
  ece: float
  counts: np.ndarray  # [n_bins] predictions per bin
  confidence: np.ndarray  # [n_bins] mean predicted probability per bin (nan when empty)
  accuracy: np.ndarray  # [n_bins] mean outcome per bin (nan when empty)
  edges: np.ndarray  # [n_bins + 1]


def _check(probs, outcomes, mask):
  probs = np.asarray(probs, np.float64).reshape(-1)
  outcomes = np.asarray(outcomes, np.float64).reshape(-1)
  if probs.shape != outcomes.shape:
    raise ValueError(f"probs has {probs.size} entries but outcomes has {outcomes.size}")
  if mask is not None:
    mask = np.asarray(mask, bool).reshape(-1)
    if mask.shape != probs.shape:
      raise ValueError(f"mask has {mask.size} entries, expected {probs.size}")
    probs, outcomes = probs[mask], outcomes[mask]
  bad = ~np.isfinite(probs) | (probs < 0) | (probs > 1)
  if bad.any():
    i = int(np.flatnonzero(bad)[0])
    raise ValueError(f"probability {i} is {float(probs[i])}; expected values in [0, 1]")
  if not np.all((outcomes == 0) | (outcomes == 1)):
    raise ValueError("outcomes must be 0 or 1")
  return probs, outcomes


def reliability(probs, outcomes, n_bins: int = 15, mask=None) -> Reliability:
  """Reliability table and ECE of probabilities vs 0/1 outcomes (optionally masked)."""
  if n_bins < 1:
    raise ValueError(f"n_bins={n_bins} must be >= 1")
  probs, outcomes = _check(probs, outcomes, mask)
  edges = np.linspace(0.0, 1.0, n_bins + 1)
  which = np.minimum((probs * n_bins).astype(np.int64), n_bins - 1)
  counts = np.bincount(which, minlength=n_bins).astype(np.float64)
  conf_sum = np.bincount(which, weights=probs, minlength=n_bins)
  acc_sum = np.bincount(which, weights=outcomes, minlength=n_bins)
  with np.errstate(invalid="ignore", divide="ignore"):
    confidence = conf_sum / counts
    accuracy = acc_sum / counts
  n = max(probs.size, 1)
  ece = float(np.sum(np.abs(acc_sum - conf_sum)) / n)
  return Reliability(ece, counts, confidence, accuracy, edges)


def ece(probs, outcomes, n_bins: int = 15, mask=None) -> float:
  return reliability(probs, outcomes, n_bins, mask).ece


def reliability_diagram(path: str | os.PathLike, panels: dict[str, Reliability],
                        title: str = "Router reliability") -> str:
  """Writes a PNG with one reliability diagram per entry of `panels` (e.g. {"uncalibrated": r1,
  "calibrated": r2}); returns the path. Per non-empty bin: a bar of the empirical utility, the
  mean confidence as a red tick joined to the bar's top (the gap), and the bin's count above;
  each panel's title holds its ECE and total count."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 4.6), squeeze=False)
  for ax, (name, r) in zip(axes[0], panels.items()):
    width = r.edges[1] - r.edges[0]
    centers = r.edges[:-1] + width / 2
    filled = r.counts > 0
    x, acc, conf = centers[filled], r.accuracy[filled], r.confidence[filled]
    ax.bar(x, acc, width=width * 0.9, color="tab:blue", alpha=0.8, edgecolor="black",
           label="empirical utility")
    ax.vlines(x, np.minimum(acc, conf), np.maximum(acc, conf), color="tab:red", lw=1.5)
    ax.plot(x, conf, "_", color="tab:red", ms=10, mew=2, label="mean confidence (gap)")
    for xi, yi, n in zip(x, np.maximum(acc, conf), r.counts[filled]):
      ax.text(xi, min(yi + 0.02, 1.02), f"{int(n)}", ha="center", va="bottom", fontsize=6,
              rotation=90)
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.12)
    ax.set_xlabel("predicted gate")
    ax.set_ylabel("fraction of useful slots")
    ax.set_title(f"{name}\nECE = {r.ece:.3f}, n = {int(r.counts.sum())}", fontsize=10)
    ax.legend(loc="upper left", fontsize=7)
  fig.suptitle(title)
  fig.tight_layout(rect=(0, 0, 1, 0.95))
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return str(path)
