"""Loads SceneKB (built by `graphloom_jax.data.build_benchmark`): MMQA-layout questions plus,
per instance, the scene triples (from the scene graph) and the WordNet triples about the scene's
objects. `root=None` reads the embedded copy (SceneKB v3, graphloom_jax/data/resources/
scenekb_v3/, gzipped), `root=DIR` a benchmark written with `--out=DIR` (v2 and v3 add
truth.jsonl, read by `graphloom_jax.evaluation.hallucination`); `root=V1_FOLDER` the small v1
copy the tests read.

  kb = scenekb.load("train")                          # or load("train", root="runs/scenekb_v2")
  q = kb.questions[0]
  graph = kb.scene_graph(q.extra["instance_id"])      # VG-style scene graph
  source = kb.kb_source()                             # WordNet facts for graph.enrich

The instance graph (tau_edge filtering, canonical names, enrichment with tau_KB) is built by
`graphloom_jax.pipeline.instance.scenekb(kb, instance_id, config=...)`.
"""

from __future__ import annotations

import dataclasses
import pathlib

from graphloom_jax.data import mmqa
from graphloom_jax.graph.scene_graph import scene_graph_triples
from graphloom_jax.graph.enrich import enrich
from graphloom_jax.graph.kb import TripleKB
from graphloom_jax.graph.triples import Triple, read_triples_jsonl

RESOURCES = pathlib.Path(__file__).resolve().parent / "resources"
FOLDER = RESOURCES / "scenekb_v3"  # the embedded SceneKB (v3)
V1_FOLDER = RESOURCES / "scenekb"  # SceneKB v1, 400 scenes: the tests' small benchmark
SPLITS = ("train", "validation", "test")


@dataclasses.dataclass
class SceneKB:
  questions: list[mmqa.Question]
  images: dict[str, mmqa.ImageDoc]
  texts: dict[str, mmqa.TextDoc]
  kb_triples: list[Triple]

  def scene_triples(self, instance_id: str) -> list[Triple]:
    """Every scene-graph triple of the instance, noise included (filter with tau_edge)."""
    return scene_graph_triples(self.scene_graph(instance_id), f"SceneKB image {instance_id}")

  def scene_graph(self, instance_id: str) -> dict:
    """The instance's Visual-Genome style scene graph (objects with boxes, relationships with
    extraction confidences)."""
    if instance_id not in self.images:
      raise KeyError(f"SceneKB: no instance {instance_id!r} in MMQA_images.jsonl")
    return self.images[instance_id].extra["scene_graph"]

  def kb_source(self) -> TripleKB:
    """The benchmark's WordNet facts as a knowledge source for `graph.enrich`: like
    `kb.WordNet.neighbors`, an entity's neighbours are the facts with it as subject."""
    return wordnet_source(self.kb_triples)

  def instance_facts(self, instance_id: str, hops: int) -> list[Triple]:
    """Every fact the benchmark holds about the instance: its scene triples (noise included)
    and all WordNet facts within `hops` of their entities, with no tau_KB or per-entity cap.
    This is raw material: GraphLoom's instance graph (pipeline.instance) filters it."""
    scene = self.scene_triples(instance_id)
    entities = {x for t in scene for x in (t.subject, t.object)}
    return scene + enrich(entities, [self.kb_source()], tau_kb=0.0, hops=hops,
                          max_per_entity=len(self.kb_triples), instance=instance_id)


def round_robin(questions, n: int) -> list:
  """n questions taken in turn from each family (in file order within a family), so a small
  sample covers all five."""
  by_family: dict[str, list] = {}
  for q in questions:
    by_family.setdefault(q.family, []).append(q)
  out, i = [], 0
  while len(out) < n and any(i < len(v) for v in by_family.values()):
    for fam in sorted(by_family):
      if i < len(by_family[fam]) and len(out) < n:
        out.append(by_family[fam][i])
    i += 1
  return out


def load(split: str = "train", root=None) -> SceneKB:
  """One split of the SceneKB in folder `root` (None: the embedded copy)."""
  if split not in SPLITS:
    raise ValueError(f"scenekb.load: unknown split {split!r}; expected one of {SPLITS}")
  root = FOLDER if root is None else pathlib.Path(root)
  kb = read_kb(root)
  data = mmqa.MMQA.load(root, split)
  return SceneKB(data.questions, data.images, data.texts, kb)


def read_kb(root=None) -> list[Triple]:
  """The WordNet triples (kb_wordnet.jsonl(.gz)) of the SceneKB in folder `root` (None: the
  embedded copy)."""
  root = FOLDER if root is None else pathlib.Path(root)
  kb_file = mmqa.find_file(root, "kb_wordnet")
  if kb_file is None:
    raise FileNotFoundError(f"scenekb: {root} has no kb_wordnet.jsonl(.gz) (a folder written "
                            "by `python -m graphloom_jax.data.build_benchmark --out=DIR` expected)")
  return read_triples_jsonl(kb_file)[0]


def wordnet_source(kb_triples: list[Triple]) -> TripleKB:
  """SceneKB's WordNet facts as a knowledge source: an entity's neighbours are the facts with it
  as subject (as `kb.WordNet.neighbors`)."""
  return TripleKB(kb_triples, "kb:wordnet", subject_only=True)
