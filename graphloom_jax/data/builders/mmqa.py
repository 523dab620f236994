"""TFDS builder for MultiModalQA from its official JSONL files (allenai/multimodalqa, dataset/)
in manual_dir, read with graphloom_jax.data.mmqa.

Configs:
  questions  one split per MMQA_<split>.jsonl(.gz) in manual_dir (train, dev, test; offline
             usually only dev). `record_json` is the whole source record, so nothing is lost.
  texts      MMQA_texts: id, title, url, text                       (split "documents")
  tables     MMQA_tables: id, title, url, table name, header, and `table_json`, the source
             `table` object (rows of {text, links} cells)          (split "documents")
  images     MMQA_images: id, title, url, path (the image file, relative to the images folder;
             pixels are not stored)                                 (split "documents")
"""

from __future__ import annotations

import json
import pathlib

import tensorflow_datasets as tfds

from graphloom_jax.data import mmqa
from graphloom_jax.graph.triples import iter_jsonl

_TEXT = tfds.features.Text
QUESTION_SPLITS = ("train", "dev", "test")
DOCUMENTS = "documents"

_INSTRUCTIONS = """\
Put the official MultiModalQA files (https://github.com/allenai/multimodalqa, dataset/) in
manual_dir, plain or gzipped: MMQA_train.jsonl, MMQA_dev.jsonl, MMQA_test.jsonl (any of them)
for mmqa/questions, and MMQA_texts.jsonl, MMQA_tables.jsonl, MMQA_images.jsonl for the
document configs."""


def _doc_features(**extra) -> tfds.features.FeaturesDict:
  return tfds.features.FeaturesDict({"id": _TEXT(), "title": _TEXT(), "url": _TEXT(), **extra})


class MMQA(tfds.core.GeneratorBasedBuilder):
  """MultiModalQA questions and documents from the official files."""

  name = "mmqa"
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Questions, texts, tables and image metadata."}
  BUILDER_CONFIGS = [
      tfds.core.BuilderConfig(name="questions", description="MMQA_<split> question files"),
      tfds.core.BuilderConfig(name="texts", description="MMQA_texts"),
      tfds.core.BuilderConfig(name="tables", description="MMQA_tables"),
      tfds.core.BuilderConfig(name="images", description="MMQA_images (metadata only)"),
  ]
  MANUAL_DOWNLOAD_INSTRUCTIONS = _INSTRUCTIONS

  def _info(self) -> tfds.core.DatasetInfo:
    kind = self.builder_config.name
    if kind == "questions":
      features = tfds.features.FeaturesDict({
          "qid": _TEXT(),
          "question": _TEXT(),
          "type": _TEXT(),
          "family": _TEXT(),
          "modalities": tfds.features.Sequence(_TEXT()),
          "answers": tfds.features.Sequence(
              {"answer": _TEXT(), "type": _TEXT(), "modality": _TEXT()}),
          "image_doc_ids": tfds.features.Sequence(_TEXT()),
          "text_doc_ids": tfds.features.Sequence(_TEXT()),
          "table_id": _TEXT(),  # "" when the question has no table
          "supporting_context": tfds.features.Sequence({"doc_id": _TEXT(), "doc_part": _TEXT()}),
          "record_json": _TEXT(),
      })
    elif kind == "texts":
      features = _doc_features(text=_TEXT())
    elif kind == "tables":
      features = _doc_features(table_name=_TEXT(), header=tfds.features.Sequence(_TEXT()),
                               table_json=_TEXT())
    else:
      features = _doc_features(path=_TEXT())
    return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True,
                                 homepage="https://allenai.github.io/multimodalqa/")

  def _split_generators(self, dl_manager):
    folder = pathlib.Path(dl_manager.manual_dir)
    kind = self.builder_config.name
    if kind == "questions":
      found = {s: mmqa.find_file(folder, f"MMQA_{s}") for s in QUESTION_SPLITS}
      found = {s: p for s, p in found.items() if p is not None}
      if not found:
        raise FileNotFoundError(f"mmqa/questions: no MMQA_train/dev/test.jsonl(.gz) in "
                                f"{folder}.\n{_INSTRUCTIONS}")
      return {s: self._generate_examples(p) for s, p in found.items()}
    path = mmqa.find_file(folder, f"MMQA_{kind}")
    if path is None:
      raise FileNotFoundError(f"mmqa/{kind}: no MMQA_{kind}.jsonl(.gz) in {folder}.\n"
                              f"{_INSTRUCTIONS}")
    return {DOCUMENTS: self._generate_examples(path)}

  def _generate_examples(self, path):
    kind = self.builder_config.name
    for i, (lineno, record) in enumerate(iter_jsonl(path, what="MMQA record")):
      where = f"{path}:{lineno}"
      if kind == "questions":
        q = mmqa.question_from_json(record, where)
        yield i, {
            "qid": q.qid, "question": q.question, "type": q.type, "family": q.family,
            "modalities": q.modalities,
            "answers": [{"answer": a.answer, "type": a.type, "modality": a.modality}
                        for a in q.answers],
            "image_doc_ids": q.image_doc_ids, "text_doc_ids": q.text_doc_ids,
            "table_id": q.table_id or "",
            "supporting_context": [{"doc_id": d, "doc_part": p} for d, p in q.supporting_context],
            "record_json": json.dumps(record, sort_keys=True),
        }
      elif kind == "texts":
        t = mmqa.text_from_json(record, where)
        yield i, {"id": t.id, "title": t.title, "url": t.url, "text": t.text}
      elif kind == "tables":
        t = mmqa.table_from_json(record, where)
        yield i, {"id": t.id, "title": t.title, "url": t.url, "table_name": t.name,
                  "header": list(t.header),
                  "table_json": json.dumps(record["table"], sort_keys=True)}
      else:
        im = mmqa.image_from_json(record, where)
        yield i, {"id": im.id, "title": im.title, "url": im.url, "path": im.path}
