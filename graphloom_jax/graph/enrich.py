"""Knowledge-base enrichment of an instance graph: neighbours of every entity within `hops` (2)
whose normalised source score is >= tau_KB (0.7), at most `max_per_entity` new edges per entity
expanded (the most confident first; ties broken by the triple's sort key, so the result does not
depend on hash seeds or source order).

A knowledge source is anything with `name` and `neighbors(entity) -> list[Triple]` returning
the facts that touch `entity` (kb.WordNet, kb.TripleKB over ConceptNet or VG150 statistics).
"""

from __future__ import annotations

from typing import Iterable, Protocol

from graphloom_jax.graph.triples import Provenance, Triple


class KnowledgeSource(Protocol):
  name: str

  def neighbors(self, entity: str) -> list[Triple]:
    ...


def enrich(entities: Iterable[str], sources: Iterable[KnowledgeSource], tau_kb: float = 0.7,
           hops: int = 2, max_per_entity: int = 8, instance: str = "",
           existing: Iterable[Triple] = ()) -> list[Triple]:
  """New knowledge triples around `entities` (breadth first, hop by hop).

  Triples already in `existing` (same subject, relation, object) are not added again. Returned
  triples carry provenance instance = `instance`."""
  if hops < 0 or max_per_entity < 0:
    raise ValueError(f"enrich: hops={hops} and max_per_entity={max_per_entity} must be >= 0")
  sources = list(sources)
  have = {t.key() for t in existing}
  frontier = sorted(set(entities))
  seen = set(frontier)
  out: list[Triple] = []
  for _ in range(hops):
    nxt = set()
    for e in frontier:
      cands = {}
      for src in sources:
        for t in src.neighbors(e):
          if t.confidence >= tau_kb and t.key() not in have:
            old = cands.get(t.key())
            if old is None or (-t.confidence, t.sort_key()) < (-old.confidence, old.sort_key()):
              cands[t.key()] = t
      for t in sorted(cands.values(), key=lambda t: (-t.confidence, t.sort_key()))[
          :max_per_entity]:
        have.add(t.key())
        out.append(t.replace(provenance=Provenance(instance)))
        other = t.object if t.subject == e else t.subject
        if other not in seen:
          seen.add(other)
          nxt.add(other)
    frontier = sorted(nxt)
  return out
