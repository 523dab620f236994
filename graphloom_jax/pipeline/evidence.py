"""Stage 4, evidence: the final subgraph as the decoder's memory inputs (host side, numpy,
fixed shapes so the jitted decoder compiles once).

Shapes: M slot-bank size (`memory.bank_size`, 2 slots a triple), E text-embedding width,
Q = M / 2 evidence triples, R = `fusion.max_objects` scene objects, W mention tokens.

For the subgraph's edges t (best question score first, at most Q of them):
  score(t)      = clip((1 + cos(Emb(Q), Emb(verbalize(t)))) / 2, 0, 1)
  conf_ext(t)   = the triple's extraction (or KB) confidence
  centrality(t) = edge betweenness of t's entity pair in the retrieved subgraph (undirected,
                  normalised by networkx to [0, 1]): how many shortest paths between the
                  subgraph's entities run through this edge
and `models.slots.build_bank` makes the entity and relation slots. The fusion prefix reads the
question embedding, the embeddings of the verbalised triples (`evidence`) and of R object names
(`image`): the scene's objects, or with `fusion.objects = "evidence"` the entities of the
subgraph's triples (`prefix_objects`).

`Evidence.arrays` holds exactly the per-example keys `models.heads.GraphLoomHeads.memory` reads;
`stack` batches them. Training featurisation and `GraphLoom.answer` both build their memory
here, from the same subgraph, so the slots a model is trained on are the slots it routes over.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import networkx as nx
import numpy as np

from graphloom_jax.graph.triples import Triple
from graphloom_jax.models import embedding_cache, slots
from graphloom_jax.retrieval.subgraph import Subgraph

# Keys of Evidence.arrays, renamed from SlotBank fields.
_BANK_KEYS = (("keys", "slot_keys"), ("values", "slot_values"), ("valid", "slot_valid"),
              ("is_entity", "slot_is_entity"), ("features", "slot_features"),
              ("reliability", "slot_reliability"), ("utility", "slot_utility"),
              ("key_tokens", "slot_key_tokens"), ("value_tokens", "slot_value_tokens"),
              ("triple_index", "slot_triple"))

# The keys of Evidence.arrays built from the question's subgraph (not from its question, scene
# or gold labels): what `training.trainer.other_evidence` swaps between questions.
SUBGRAPH_KEYS = frozenset(({key for _, key in _BANK_KEYS} - {"slot_utility"})
                          | {"evidence", "evidence_mask"})


def edge_centrality(edges: Sequence[Triple]) -> list[float]:
  """Edge betweenness of each triple's entity pair in the subgraph (0 for self-loops)."""
  g = nx.Graph()
  for t in edges:
    if t.subject != t.object:
      g.add_edge(t.subject, t.object)
  bc = nx.edge_betweenness_centrality(g, normalized=True) if g.number_of_edges() else {}
  out = []
  for t in edges:
    v = bc.get((t.subject, t.object), bc.get((t.object, t.subject), 0.0))
    out.append(float(min(max(v, 0.0), 1.0)))
  return out


OBJECT_SOURCES = ("graph", "evidence")


def subgraph_keys(object_source: str = "graph") -> frozenset:
  """SUBGRAPH_KEYS, plus the prefix's object vectors when they name the subgraph's entities
  (`fusion.objects = "evidence"`)."""
  if object_source not in OBJECT_SOURCES:
    raise ValueError(f"fusion.objects={object_source!r}; expected one of {OBJECT_SOURCES}")
  return SUBGRAPH_KEYS | ({"image", "image_mask"} if object_source == "evidence" else set())


def prefix_objects(source: str, graph_objects: Sequence[str], edges: Sequence[Triple]
                   ) -> list[str]:
  """The object names of the fusion prefix (`fusion.objects`): "graph", the instance graph's
  own (a scene's objects, or the graph's entities in sorted order); "evidence", the distinct
  subjects and objects of `edges` (the subgraph the slots hold, best-scored triple first) in
  their order of first appearance."""
  if source == "graph":
    return list(graph_objects)
  if source == "evidence":
    return list(dict.fromkeys(x for t in edges for x in (t.subject, t.object)))
  raise ValueError(f"fusion.objects={source!r}; expected one of {OBJECT_SOURCES}")


@dataclasses.dataclass
class Evidence:
  """One question's memory inputs; `triples[i]` is the triple of bank row `slot_triple == i`."""
  triples: list[Triple]
  scores: np.ndarray  # [len(triples)] cosine to the question
  arrays: dict[str, np.ndarray]  # per-example, fixed shapes (see the module docstring)


def build(question: str, question_embedding: np.ndarray, subgraph: Subgraph,
          objects: Sequence[str], embed: embedding_cache.MemoEmbedder, *, bank_size: int,
          max_objects: int, tokenize: Callable[[str], Sequence[int]] | None,
          gold: Sequence = ()) -> Evidence:
  """The memory inputs of one question (`gold`: supporting triples, for the slot utility
  labels of training; empty at inference)."""
  n_ev = bank_size // 2
  edges, cos = list(subgraph.edges[:n_ev]), np.asarray(subgraph.scores[:n_ev], np.float32)
  cent = edge_centrality(edges)
  rows = [dict(subject=t.subject, relation=t.relation, object=t.object,
               score=float(np.clip((1 + s) / 2, 0, 1)), conf_ext=float(t.confidence),
               centrality=c) for t, s, c in zip(edges, cos, cent)]
  bank = slots.build_bank(rows, embed, bank_size, question=question, gold=gold,
                          tokenize=tokenize)
  qv = np.asarray(question_embedding, np.float32)
  e = qv.shape[0]
  evidence = np.zeros((n_ev, e), np.float32)
  evidence_mask = np.zeros((n_ev,), bool)
  if edges:
    evidence[:len(edges)] = embed([t.verbalize() for t in edges])
    evidence_mask[:len(edges)] = True
  objs = list(objects)[:max_objects]
  image = np.zeros((max_objects, e), np.float32)
  image_mask = np.zeros((max_objects,), bool)
  if objs:
    image[:len(objs)] = embed(objs)
    image_mask[:len(objs)] = True
  arrays = {key: getattr(bank, name) for name, key in _BANK_KEYS}
  arrays.update(question_emb=qv, evidence=evidence, evidence_mask=evidence_mask, image=image,
                image_mask=image_mask)
  return Evidence(edges, cos, arrays)


def stack(evidence: Sequence[Evidence]) -> dict[str, np.ndarray]:
  """A batch [B, ...] of per-example arrays."""
  if not evidence:
    raise ValueError("stack needs at least one Evidence")
  return {k: np.stack([ev.arrays[k] for ev in evidence]) for k in evidence[0].arrays}
