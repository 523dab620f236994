"""TFDS builder for ScienceQA from its official files in manual_dir (problems.json,
pid_splits.json and images/<split>/<pid>/<image>, as lupantech/ScienceQA lays out
data/scienceqa/), read with graphloom_jax.data.scienceqa.

Splits: train, val, test, and minitrain / minival / minitest when pid_splits.json lists them.
`image` holds the decoded RGB pixels, [0, 0, 3] for a problem without an image.
"""

from __future__ import annotations

import pathlib

import numpy as np
import tensorflow_datasets as tfds

from graphloom_jax.data import scienceqa

_TEXT = tfds.features.Text
SPLITS = ("train", "val", "test", "minitrain", "minival", "minitest")

_INSTRUCTIONS = """\
Put ScienceQA's official files (https://github.com/lupantech/ScienceQA, data/scienceqa/) in
manual_dir: problems.json, pid_splits.json, and images/<split>/<pid>/image.png for the problems
that have an image."""


def read_image(path: pathlib.Path) -> np.ndarray:
  from PIL import Image  # only needed when building
  with Image.open(path) as im:
    return np.asarray(im.convert("RGB"), np.uint8)


class ScienceQA(tfds.core.GeneratorBasedBuilder):
  """ScienceQA multiple-choice science problems with their context and images."""

  name = "scienceqa"
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "problems.json + pid_splits.json + images, every split."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = _INSTRUCTIONS

  def _info(self) -> tfds.core.DatasetInfo:
    features = tfds.features.FeaturesDict({
        "pid": _TEXT(),
        "question": _TEXT(),
        "choices": tfds.features.Sequence(_TEXT()),
        "answer": np.int32,
        "hint": _TEXT(),
        "image_file": _TEXT(),  # "" when the problem has no image
        "image": tfds.features.Tensor(shape=(None, None, 3), dtype=np.uint8, encoding="zlib"),
        "task": _TEXT(),
        "grade": _TEXT(),
        "subject": _TEXT(),
        "topic": _TEXT(),
        "category": _TEXT(),
        "skill": _TEXT(),
        "lecture": _TEXT(),
        "solution": _TEXT(),
        "split": _TEXT(),
    })
    return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True,
                                 homepage="https://scienceqa.github.io/")

  def _split_generators(self, dl_manager):
    folder = pathlib.Path(dl_manager.manual_dir)
    if not (folder / "problems.json").exists():
      raise FileNotFoundError(f"scienceqa: no problems.json in {folder}.\n{_INSTRUCTIONS}")
    names = scienceqa.split_names(folder)
    return {s: self._generate_examples(folder, s) for s in SPLITS if s in names}

  def _generate_examples(self, folder, split):
    for i, p in enumerate(scienceqa.load(folder, split)):
      path = p.image_path(folder)
      if path is not None and not path.exists():
        raise FileNotFoundError(f"scienceqa pid {p.pid}: its image {path} is missing.\n"
                                f"{_INSTRUCTIONS}")
      yield i, {
          "pid": p.pid, "question": p.question, "choices": list(p.choices), "answer": p.answer,
          "hint": p.hint, "image_file": p.image or "",
          "image": read_image(path) if path is not None else np.zeros((0, 0, 3), np.uint8),
          "task": p.task, "grade": p.grade, "subject": p.subject, "topic": p.topic,
          "category": p.category, "skill": p.skill, "lecture": p.lecture,
          "solution": p.solution, "split": p.split,
      }
