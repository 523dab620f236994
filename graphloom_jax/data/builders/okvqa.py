"""TFDS builder for OK-VQA from its official question and annotation files in manual_dir, read
with graphloom_jax.data.okvqa. Splits train and val; the 10 human answers per question are kept
in order (the `answer` fields that VQA accuracy compares with, and the raw ones). Images stay
COCO files: `image_file` is relative to manual_dir (train2014/..., val2014/...).
"""

from __future__ import annotations

import pathlib

import numpy as np
import tensorflow_datasets as tfds

from graphloom_jax.data import okvqa

_TEXT = tfds.features.Text

_INSTRUCTIONS = """\
Put OK-VQA's official files (https://okvqa.allenai.org/download.html, unzipped) in manual_dir:
OpenEnded_mscoco_{train,val}2014_questions.json and mscoco_{train,val}2014_annotations.json
(either split alone is enough)."""


class OKVQA(tfds.core.GeneratorBasedBuilder):
  """OK-VQA: visual questions that need outside knowledge, 10 human answers each."""

  name = "okvqa"
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Questions and annotations, train and val."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = _INSTRUCTIONS

  def _info(self) -> tfds.core.DatasetInfo:
    features = tfds.features.FeaturesDict({
        "question_id": np.int64,
        "image_id": np.int64,
        "question": _TEXT(),
        "question_type": _TEXT(),
        "question_type_name": _TEXT(),
        "answer_type": _TEXT(),
        "confidence": np.int32,
        "answers": tfds.features.Sequence(_TEXT()),
        "raw_answers": tfds.features.Sequence(_TEXT()),
        "answer_confidences": tfds.features.Sequence(_TEXT()),
        "image_file": _TEXT(),
    })
    return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True,
                                 homepage="https://okvqa.allenai.org/")

  def _split_generators(self, dl_manager):
    folder = pathlib.Path(dl_manager.manual_dir)
    found = [s for s in okvqa.SPLITS if (folder / okvqa.question_file(s)).exists()]
    if not found:
      raise FileNotFoundError(f"okvqa: no OK-VQA question files in {folder}.\n{_INSTRUCTIONS}")
    return {s: self._generate_examples(folder, s) for s in found}

  def _generate_examples(self, folder, split):
    for i, q in enumerate(okvqa.load(folder, split)):
      yield i, {
          "question_id": q.question_id, "image_id": q.image_id, "question": q.question,
          "question_type": q.question_type,
          "question_type_name": okvqa.QUESTION_TYPES.get(q.question_type, ""),
          "answer_type": q.answer_type, "confidence": q.confidence,
          "answers": list(q.answers), "raw_answers": list(q.raw_answers),
          "answer_confidences": list(q.answer_confidences), "image_file": q.image_file,
      }
