"""Evidence controls for a trained GraphLoom: does the answer read its evidence?

Each control answers the question with the same heads, prompt and options, and replaces only
the subgraph the memory (or a text mode's prompt) is built from, through
`GraphLoom.answer_batch(..., evidence=...)`:

  shuffled  the subgraph retrieved for another question of the same family (`partners`: a
            derangement within each family, seeded), over that question's own instance graph;
            a system that reads its evidence falls far below its own score here;
  none      no evidence: an empty slot bank and no evidence vectors in the fusion prefix (the
            prefix keeps the question and the scene's object names);
  blind     no evidence and no object names (`without_objects`): the prefix reads the question
            alone, so whatever the heads still answer right comes from the question and the
            options;
  oracle    the gold supporting triples only (`oracle_triples`), an upper bound for a
            system that reads them: each with its confidence in the instance graph, or 1.0
            for a gold triple the instance graph filtered out.
Retrieval and corrective retrieval do not run for a control (the subgraph is given), so R@5 of a
control row describes the given subgraph.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

import numpy as np

from graphloom_jax.graph.triples import Provenance, Triple
from graphloom_jax.retrieval.subgraph import Subgraph, TriplePool

CONTROLS = ("shuffled", "none", "blind", "oracle")


def without_objects(graph):
  """An instance graph (pipeline.instance.InstanceGraph) with no scene object names, for the
  `blind` control; its triples and pool are the same objects."""
  return dataclasses.replace(graph, objects=[])


def partners(groups: Sequence[str], seed: int = 0) -> list[int]:
  """partners[i]: the index of another question of the same group (family) whose evidence
  question i reads; a derangement within each group (a group of one question keeps its own,
  which `unpaired` counts)."""
  by_group: dict[str, list[int]] = {}
  for i, g in enumerate(groups):
    by_group.setdefault(g, []).append(i)
  out = list(range(len(groups)))
  rng = random.Random(seed)
  for g in sorted(by_group):
    members = by_group[g]
    if len(members) < 2:
      continue
    # A random cyclic shift of a shuffled order moves every member.
    order = rng.sample(members, len(members))
    shift = rng.randrange(1, len(order))
    for j, i in enumerate(order):
      out[i] = order[(j + shift) % len(order)]
  return out


def unpaired(pairing: Sequence[int]) -> int:
  """How many questions a pairing leaves with their own evidence."""
  return sum(i == p for i, p in enumerate(pairing))


def oracle_triples(gold: Sequence[Sequence[str]], graph_triples: Sequence[Triple],
                   name=lambda x: x) -> list[Triple]:
  """The gold supporting triples [s, r, o] as Triples: the instance graph's own triple where it
  holds one (its confidence and source), else confidence 1.0 and source "gold". `name` maps a
  gold name onto the graph's canonical names."""
  have = {t.key(): t for t in graph_triples}
  out = []
  for s, r, o in gold:
    key = (name(s), r, name(o))
    t = have.get(key)
    out.append(t if t is not None else Triple(key[0], r, key[2], 1.0, "gold", Provenance()))
  return out


def as_subgraph(triples: Sequence[Triple], question_embedding: np.ndarray, embedder
                ) -> Subgraph:
  """The given triples as a retrieved subgraph: scored and ordered by their cosine to the
  question (`TriplePool`, as bounded retrieval scores its edges), all of round 1."""
  if not triples:
    return Subgraph([], np.zeros((0,), np.float32), [], [], {"total": 0.0})
  pool = TriplePool(triples, embedder=embedder)
  ids = list(range(len(triples)))
  scores = pool.scores(question_embedding, ids)
  order = pool.order(ids, scores)
  return Subgraph([pool.triples[i] for i in order],
                  np.asarray([scores[i] for i in order], np.float32), [1] * len(order), order,
                  {"total": 0.0})
