"""Loads SceneKB, the embedded benchmark (graphloom_jax/data/resources/scenekb/, built by
`graphloom_jax.data.build_benchmark`): MMQA-layout questions plus, per instance, the scene
triples (from the scene graph) and the WordNet triples about the scene's objects.

  kb = scenekb.load("train")
  q = kb.questions[0]
  triples = kb.instance_triples(q.extra["instance_id"])   # scene + WordNet within 2 hops
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib

from graphloom_jax.data import mmqa
from graphloom_jax.graph.scene_graph import scene_graph_triples
from graphloom_jax.graph.triples import Provenance, Triple, read_triples_jsonl

FOLDER = pathlib.Path(__file__).resolve().parent / "resources" / "scenekb"
SPLITS = ("train", "validation", "test")


@dataclasses.dataclass
class SceneKB:
  questions: list[mmqa.Question]
  images: dict[str, mmqa.ImageDoc]
  texts: dict[str, mmqa.TextDoc]
  kb_triples: list[Triple]

  def __post_init__(self):
    self._kb_by_subject = collections.defaultdict(list)
    for t in self.kb_triples:
      self._kb_by_subject[t.subject].append(t)

  def scene_triples(self, instance_id: str) -> list[Triple]:
    """Every scene-graph triple of the instance, noise included (filter with tau_edge)."""
    if instance_id not in self.images:
      raise KeyError(f"SceneKB: no instance {instance_id!r} in MMQA_images.jsonl")
    image = self.images[instance_id]
    return scene_graph_triples(image.extra["scene_graph"], f"SceneKB image {instance_id}")

  def kb_for(self, entities, hops: int = 2, instance_id: str = "") -> list[Triple]:
    """WordNet triples reachable from `entities` within `hops`, tagged with the instance."""
    out, frontier, seen = [], sorted(set(entities)), set(entities)
    for _ in range(hops):
      nxt = []
      for e in frontier:
        for t in self._kb_by_subject.get(e, ()):
          out.append(t.replace(provenance=Provenance(instance_id)))
          if t.object not in seen:
            seen.add(t.object)
            nxt.append(t.object)
      frontier = nxt
    return out

  def instance_triples(self, instance_id: str, hops: int = 2) -> list[Triple]:
    """The instance graph's raw material: scene triples plus WordNet facts about its objects."""
    scene = self.scene_triples(instance_id)
    entities = {x for t in scene for x in (t.subject, t.object)}
    return scene + self.kb_for(entities, hops, instance_id)


def load(split: str = "train", folder=FOLDER) -> SceneKB:
  if split not in SPLITS:
    raise ValueError(f"scenekb.load: unknown split {split!r}; expected one of {SPLITS}")
  data = mmqa.MMQA.load(folder, split)
  kb, _ = read_triples_jsonl(pathlib.Path(folder) / "kb_wordnet.jsonl")
  return SceneKB(data.questions, data.images, data.texts, kb)
