"""Stage 1, the instance graph (question-independent, cacheable per image or document).

  extracted triples (scene graph / REBEL / tables / text)
    -> keep t iff conf_ext(t) >= tau_edge                     (graph.instance_graph)
    -> canonical entity names, duplicates merged              (graph.canonical)
    -> KB enrichment: facts within `kb_hops` of every entity whose normalised source score is
       >= tau_KB, at most `kb_max_per_entity` per entity      (graph.enrich)
    -> networkx MultiDiGraph, its triples in a stable order, and a `TriplePool` (the triples'
       verbalisation embeddings plus the index `retrieval.index` names) for retrieval.

Input is a sequence of `graph.triples.Triple` (or their JSON records), or one Visual-Genome
style scene graph dict (`graph.scene_graph`). `objects` (the scene's object names, fed to the
fusion prefix as its image tokens) default to the scene graph's objects, else to the entities of
the extracted triples.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import networkx as nx
import numpy as np

from graphloom_jax.graph import canonical, instance_graph
from graphloom_jax.graph.scene_graph import scene_graph_triples
from graphloom_jax.graph.triples import Triple, TripleFormatError, triple_from_json
from graphloom_jax.retrieval import index as index_lib
from graphloom_jax.retrieval.subgraph import TriplePool


@dataclasses.dataclass
class InstanceGraph:
  graph: nx.MultiDiGraph
  triples: list[Triple]  # the graph's edges in a stable order (pool rows)
  objects: list[str]  # canonical object names of the scene (prefix image tokens)
  pool: TriplePool
  instance_id: str = ""

  def __len__(self):
    return len(self.triples)

  def has(self, t: Triple) -> bool:
    return self.graph.has_edge(t.subject, t.object) and any(
        d["triple"].key() == t.key() for d in self.graph.get_edge_data(t.subject, t.object).values())


def _scene_objects(graph: Mapping) -> list[str]:
  names = []
  for obj in graph.get("objects", []):
    if isinstance(obj, Mapping):
      name = obj.get("names", [obj.get("name")])
      name = name[0] if isinstance(name, list) and name else obj.get("name")
      if isinstance(name, str) and name.strip():
        names.append(name.strip())
  return names


def as_triples(triples: Any, where: str = "triples") -> tuple[list[Triple], list[str] | None]:
  """Triples from a sequence of Triple / JSON records or a VG-style scene graph dict, plus the
  scene graph's object names (None when no scene graph was given)."""
  if isinstance(triples, Mapping):
    return scene_graph_triples(dict(triples), where), _scene_objects(triples)
  if isinstance(triples, (str, bytes)) or not isinstance(triples, Sequence):
    raise TypeError(f"{where}: expected a sequence of Triple or a scene graph dict, got "
                    f"{type(triples).__name__}")
  out = []
  for i, t in enumerate(triples):
    if isinstance(t, Triple):
      out.append(t)
    elif isinstance(t, Mapping):
      try:
        out.append(triple_from_json(dict(t)))
      except TripleFormatError as e:
        raise TripleFormatError(f"{where}[{i}]: {e}") from None
    else:
      raise TypeError(f"{where}[{i}]: expected a Triple or a triple record, got "
                      f"{type(t).__name__}")
  return out, None


INDEXES = ("exact", "scann")


def build_graph(triples: Any, *, config, kb_sources: Sequence = (),
                objects: Sequence[str] | None = None, instance_id: str = "",
                canonicalizer: canonical.Canonicalizer | None = None
                ) -> tuple[nx.MultiDiGraph, list[Triple], list[str]]:
  """The graph part of `build`: (graph, its triples in a stable order, object names).

  config: the full config (reads graph.tau_edge, graph.tau_kb, graph.kb_hops,
  graph.kb_max_per_entity and, without a `canonicalizer`, graph.singularize)."""
  g = config.graph
  if canonicalizer is None:
    canonicalizer = canonical.Canonicalizer(singularize=g.singularize)
  where = f"instance {instance_id!r}" if instance_id else "triples"
  extracted, scene_objects = as_triples(triples, where)
  if not extracted:
    raise ValueError(f"{where}: no triples given; GraphLoom needs an instance graph to "
                     "retrieve from (use mode='no_retrieval' to answer without one)")
  graph, canon = instance_graph.build(
      extracted, tau_edge=g.tau_edge, tau_kb=g.tau_kb, kb_hops=g.kb_hops,
      kb_max_per_entity=g.kb_max_per_entity, kb_sources=kb_sources, instance_id=instance_id,
      canonicalizer=canonicalizer)
  if objects is None:
    objects = scene_objects if scene_objects is not None else [
        x for t in instance_graph.filter_edges(extracted, g.tau_edge)
        for x in (t.subject, t.object)]
  objects = sorted({canon(o) for o in objects if isinstance(o, str) and o.strip()})
  return graph, instance_graph.graph_triples(graph), objects


def build(triples: Any, *, config, embedder, kb_sources: Sequence = (),
          objects: Sequence[str] | None = None, instance_id: str = "",
          canonicalizer: canonical.Canonicalizer | None = None) -> InstanceGraph:
  """The instance graph of one image / document with its retrieval pool (see the module
  docstring); reads retrieval.index and retrieval.seeds besides `build_graph`'s keys."""
  graph, rows, objects = build_graph(triples, config=config, kb_sources=kb_sources,
                                     objects=objects, instance_id=instance_id,
                                     canonicalizer=canonicalizer)
  if config.retrieval.index not in INDEXES:
    raise ValueError(f"config.retrieval.index={config.retrieval.index!r}; expected one of "
                     f"{INDEXES}")
  texts = [t.verbalize() for t in rows]
  vectors = np.asarray(embedder.embed(texts if texts else ["."]), np.float32)[:len(rows)]
  # An index only pays off when the pool is much larger than the seed count (TriplePool scores
  # small pools exactly either way).
  index = (index_lib.make_index(config.retrieval.index, vectors)
           if len(rows) > 4 * config.retrieval.seeds else None)
  return InstanceGraph(graph, rows, objects, TriplePool(rows, vectors, index=index), instance_id)


def scenekb(kb, instance_id: str, *, config, embedder=None):
  """A SceneKB instance (its scene graph plus the benchmark's WordNet facts): the InstanceGraph
  when an embedder is given, else `build_graph`'s (graph, triples, objects)."""
  args = dict(config=config, kb_sources=[kb.kb_source()], instance_id=instance_id)
  if embedder is None:
    return build_graph(kb.scene_graph(instance_id), **args)
  return build(kb.scene_graph(instance_id), embedder=embedder, **args)


def pool_rows(triples: Sequence[Triple], *, config,
              canonicalizer: canonical.Canonicalizer | None = None) -> list[Triple]:
  """The rows of a retrieval pool shared by many questions (the scalability setting of
  docs/pathqa.md): `triples` kept and named as `build_graph` keeps and names an instance graph's
  (confidence >= graph.tau_edge, canonical names), one row per fact key (the first wins), in the
  given order; no KB enrichment."""
  if canonicalizer is None:
    canonicalizer = canonical.Canonicalizer(singularize=config.graph.singularize)
  rows: dict[tuple, Triple] = {}
  for t in instance_graph.filter_edges(triples, config.graph.tau_edge):
    c = canonicalizer.triple(t)
    rows.setdefault(c.key(), c)
  return list(rows.values())


def with_pool(graph: InstanceGraph, pool: TriplePool) -> InstanceGraph:
  """`graph` retrieving from `pool` instead of its own triples: the question keeps its own
  graph and prefix objects (its image), and its retrieval (seeds and bounded expansion) reads
  the shared pool, whose rows are then the graph's `triples`."""
  return dataclasses.replace(graph, triples=pool.triples, pool=pool)
