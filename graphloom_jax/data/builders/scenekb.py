"""TFDS builder for SceneKB, the embedded benchmark (read through graphloom_jax.data.scenekb).

One record per question: the MMQA-layout question, its multiple-choice options and gold triples,
and its instance: the scene graph (objects with boxes, relationships with confidences, which
come back as float32 since TFDS stores floats so) and the scene description text. The WordNet
knowledge base is the same for every question and stays in the embedded folder
(`scenekb.read_kb()`, graphloom_jax/data/resources/scenekb_v3/kb_wordnet.jsonl.gz).
"""

from __future__ import annotations

import json

import numpy as np
import tensorflow_datasets as tfds

from graphloom_jax.data import scenekb

_TEXT = tfds.features.Text


def _answers_feature():
  return tfds.features.Sequence({"answer": _TEXT(), "type": _TEXT(), "modality": _TEXT()})


class SceneKB(tfds.core.GeneratorBasedBuilder):
  """SceneKB: synthetic VG150 scenes with WordNet knowledge and MMQA-style questions."""

  name = "scenekb"
  VERSION = tfds.core.Version("2.0.0")
  RELEASE_NOTES = {"1.0.0": "Every split of the embedded benchmark (SceneKB v1), with scene graphs.",
                   "2.0.0": "The embedded benchmark is SceneKB v3 (graphloom_jax.data.scenekb_v3)."}

  def _info(self) -> tfds.core.DatasetInfo:
    features = tfds.features.FeaturesDict({
        "qid": _TEXT(),
        "question": _TEXT(),
        "type": _TEXT(),
        "family": _TEXT(),
        "answers": _answers_feature(),
        "options": tfds.features.Sequence(_TEXT()),
        "answer_index": np.int32,
        "gold_triples": tfds.features.Sequence(
            {"subject": _TEXT(), "relation": _TEXT(), "object": _TEXT()}),
        "image_doc_ids": tfds.features.Sequence(_TEXT()),
        "text_doc_ids": tfds.features.Sequence(_TEXT()),
        "supporting_doc_ids": tfds.features.Sequence(_TEXT()),
        "metadata_json": _TEXT(),
        "instance_id": _TEXT(),
        "scene_graph": {
            "objects": tfds.features.Sequence({
                "object_id": np.int32, "name": _TEXT(),
                "box": tfds.features.Tensor(shape=(4,), dtype=np.float32)}),  # x, y, w, h
            "relationships": tfds.features.Sequence({
                "relationship_id": np.int32, "subject_id": np.int32, "object_id": np.int32,
                "predicate": _TEXT(), "confidence": np.float32}),
        },
        "scene_description": _TEXT(),
    })
    return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(split) for split in scenekb.SPLITS}

  def _generate_examples(self, split):
    kb = scenekb.load(split)
    for i, q in enumerate(kb.questions):
      where = f"SceneKB {split} qid {q.qid}"
      instance = q.extra.get("instance_id")
      if instance not in kb.images:
        raise ValueError(f"{where}: instance_id {instance!r} is not in MMQA_images.jsonl")
      image = kb.images[instance]
      description = kb.texts.get(image.extra.get("description_id", ""))
      yield i, {
          "qid": q.qid,
          "question": q.question,
          "type": q.type,
          "family": q.metadata.get("family", q.family),
          "answers": [{"answer": a.answer, "type": a.type, "modality": a.modality}
                      for a in q.answers],
          "options": list(q.extra.get("options", [])),
          "answer_index": int(q.extra.get("answer_index", -1)),
          "gold_triples": [{"subject": s, "relation": r, "object": o}
                           for s, r, o in q.extra.get("gold_triples", [])],
          "image_doc_ids": q.image_doc_ids,
          "text_doc_ids": q.text_doc_ids,
          "supporting_doc_ids": q.supporting_doc_ids,
          "metadata_json": json.dumps(q.metadata, sort_keys=True),
          "instance_id": instance,
          "scene_graph": _scene_graph(image.extra.get("scene_graph") or {}, where),
          "scene_description": description.text if description is not None else "",
      }


def _scene_graph(graph: dict, where: str) -> dict:
  objects = []
  for obj in graph.get("objects", []):
    names = obj.get("names", [])
    if len(names) != 1:
      raise ValueError(f"{where}: scene-graph object {obj.get('object_id')} has names {names}; "
                       f"expected exactly one")
    objects.append({"object_id": obj["object_id"], "name": names[0],
                    "box": np.asarray([obj["x"], obj["y"], obj["w"], obj["h"]], np.float32)})
  relationships = [{k: rel[k] for k in ("relationship_id", "subject_id", "object_id",
                                        "predicate", "confidence")}
                   for rel in graph.get("relationships", [])]
  return {"objects": objects, "relationships": relationships}
