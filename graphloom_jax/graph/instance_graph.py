"""The instance graph: a networkx MultiDiGraph of canonical entities joined by triples.

Nodes are canonical entity names; each edge (s -> o, key = relation) carries the `Triple`
(attribute "triple"), its `confidence` and `source`. Extracted triples (every source not starting
with "kb:") are kept iff confidence >= tau_edge; knowledge-base triples were already filtered by
tau_KB during enrichment and pass through.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import networkx as nx

from graphloom_jax.graph import enrich
from graphloom_jax.graph.canonical import Canonicalizer, canonicalize, merge_duplicates
from graphloom_jax.graph.triples import Triple


def is_kb(t: Triple) -> bool:
  return t.source.startswith("kb:")


def filter_edges(triples: Iterable[Triple], tau_edge: float = 0.5) -> list[Triple]:
  """Drops extracted triples with confidence < tau_edge (knowledge-base triples are kept)."""
  return [t for t in triples if is_kb(t) or t.confidence >= tau_edge]


def build_instance_graph(triples: Iterable[Triple], tau_edge: float = 0.5,
                         canonicalizer: Canonicalizer | None = None,
                         canonical: bool = True) -> nx.MultiDiGraph:
  """Filters, canonicalises and merges `triples`, then builds the MultiDiGraph.

  Several instances may share a graph; duplicates are merged per instance, and an edge key is
  `relation` or `relation@instance` when two instances carry the same (s, r, o)."""
  kept = filter_edges(triples, tau_edge)
  if canonical:
    kept = canonicalize(kept, canonicalizer)
  return graph_of(kept)


def graph_of(triples: Iterable[Triple]) -> nx.MultiDiGraph:
  """The MultiDiGraph of triples already filtered, canonical and merged (see
  `build_instance_graph`)."""
  g = nx.MultiDiGraph()
  for t in sorted(triples, key=Triple.sort_key):
    key = t.relation
    if g.has_edge(t.subject, t.object, key):
      key = f"{t.relation}@{t.provenance.instance}"
    g.add_edge(t.subject, t.object, key=key, triple=t, relation=t.relation,
               confidence=t.confidence, source=t.source)
  return g


def graph_triples(g: nx.MultiDiGraph) -> list[Triple]:
  """The graph's triples in a stable order (independent of insertion and hash seed)."""
  return sorted((d["triple"] for _, _, d in g.edges(data=True)), key=Triple.sort_key)


def build(extracted: Sequence[Triple], *, tau_edge: float, tau_kb: float, kb_hops: int,
          kb_max_per_entity: int, kb_sources: Sequence = (), instance_id: str = "",
          canonicalizer: Canonicalizer | None = None) -> tuple[nx.MultiDiGraph, Canonicalizer]:
  """The instance graph of one image / document: extracted triples kept iff confidence >=
  tau_edge, canonical names, KB facts within `kb_hops` of the kept entities whose score is >=
  tau_KB (at most `kb_max_per_entity` per entity and hop, `graph.enrich`). Returns the graph and
  the canonicaliser that named its nodes."""
  canon = canonicalizer or Canonicalizer()
  kept = canonicalize(filter_edges(extracted, tau_edge), canon)
  entities = sorted({x for t in kept for x in (t.subject, t.object)})
  kb = enrich.enrich(entities, kb_sources, tau_kb=tau_kb, hops=kb_hops,
                     max_per_entity=kb_max_per_entity, instance=instance_id,
                     existing=kept) if kb_sources else []
  # Each triple is filtered and named once: `kept` already is; the knowledge facts pass the
  # same tau_edge rule (a source not named "kb:..." counts as extracted) and get canonical names.
  merged = merge_duplicates(kept + [canon.triple(t) for t in filter_edges(kb, tau_edge)])
  return graph_of(merged), canon
