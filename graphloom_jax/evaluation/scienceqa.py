"""ScienceQA accuracy with the official breakdowns (lupantech/ScienceQA, `get_scores`).

A prediction is the chosen option index; it is correct when it equals the problem's `answer`.
Every number is a percentage of correct problems within a group:
  NAT, SOC, LAN   subject natural / social / language science
  TXT, IMG, NO    context modality: has a text hint / has an image / has neither (TXT and IMG
                  overlap: a problem with both counts in both)
  G1-6, G7-12     grade band (grade1..grade6, grade7..grade12)
  average         every problem
The official script prints each with 2 decimals; here they are unrounded floats, and a group
without problems is None (the official script divides by zero there).
"""

from __future__ import annotations

from typing import Sequence

from graphloom_jax.data.scienceqa import Problem

_GROUPS = {
    "NAT": lambda p: p.subject == "natural science",
    "SOC": lambda p: p.subject == "social science",
    "LAN": lambda p: p.subject == "language science",
    "TXT": lambda p: p.has_text,
    "IMG": lambda p: p.has_image,
    "NO": lambda p: not p.has_text and not p.has_image,
    "G1-6": lambda p: p.grade in {f"grade{i}" for i in range(1, 7)},
    "G7-12": lambda p: p.grade in {f"grade{i}" for i in range(7, 13)},
}
GROUPS = tuple(_GROUPS) + ("average",)


def scienceqa_accuracy(predictions: Sequence[int], problems: Sequence[Problem]) -> dict:
  """{group: accuracy in percent or None} and {"counts": {group: problems}} for aligned lists."""
  if len(predictions) != len(problems):
    raise ValueError(f"{len(predictions)} predictions for {len(problems)} problems")
  correct = [int(pred) == p.answer for pred, p in zip(predictions, problems)]
  scores, counts = {}, {}
  for name, member in list(_GROUPS.items()) + [("average", lambda p: True)]:
    hits = [c for c, p in zip(correct, problems) if member(p)]
    counts[name] = len(hits)
    scores[name] = 100 * sum(hits) / len(hits) if hits else None
  return {**scores, "counts": counts}
