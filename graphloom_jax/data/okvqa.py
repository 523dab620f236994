"""Reader for OK-VQA (Marino et al., CVPR 2019) in its official files (okvqa.allenai.org), which
follow the VQA layout:

  OpenEnded_mscoco_<split>2014_questions.json
      {"questions": [{image_id, question, question_id}], info, license, ...}
  mscoco_<split>2014_annotations.json
      {"annotations": [{image_id, question_id, question_type ("one".."ten", "other"),
                        answer_type, confidence,
                        answers: [{answer_id, answer, raw_answer, answer_confidence}] x 10}],
       "question_types": {"one": "Vehicles and Transportation", ...}, ...}
  <split>2014/COCO_<split>2014_<image_id:012d>.jpg   the COCO images, when present

<split> is "train" or "val" (OK-VQA evaluates on val). `answers` are the `answer` fields, which
the dataset gives already normalised; `vqa_accuracy` (graphloom_jax.evaluation.answers) scores a
prediction against them.

  questions = okvqa.load(folder, "val")
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

SPLITS = ("train", "val")
QUESTION_TYPES = {
    "one": "Vehicles and Transportation", "two": "Brands, Companies and Products",
    "three": "Objects, Material and Clothing", "four": "Sports and Recreation",
    "five": "Cooking and Food", "six": "Geography, History, Language and Culture",
    "seven": "People and Everyday life", "eight": "Plants and Animals",
    "nine": "Science and Technology", "ten": "Weather and Climate", "other": "Other",
}


class OKVQAFormatError(ValueError):
  """An OK-VQA record that does not match the format; the message names file and question."""


@dataclasses.dataclass(frozen=True)
class Question:
  question_id: int
  image_id: int
  question: str
  question_type: str
  answer_type: str
  confidence: int
  answers: tuple[str, ...]
  raw_answers: tuple[str, ...]
  answer_confidences: tuple[str, ...]
  split: str

  @property
  def image_file(self) -> str:
    """The COCO image, relative to the folder."""
    sub = f"{self.split}2014"
    return f"{sub}/COCO_{sub}_{self.image_id:012d}.jpg"


def question_file(split: str) -> str:
  return f"OpenEnded_mscoco_{split}2014_questions.json"


def annotation_file(split: str) -> str:
  return f"mscoco_{split}2014_annotations.json"


def _read(path: pathlib.Path, key: str) -> list:
  if not path.exists():
    raise FileNotFoundError(f"OK-VQA: {path} is missing (the official {path.name})")
  with open(path, encoding="utf-8") as f:
    try:
      data = json.load(f)
    except json.JSONDecodeError as e:
      raise OKVQAFormatError(f"{path}: not valid JSON: {e.msg} (line {e.lineno})") from None
  if not isinstance(data, dict) or not isinstance(data.get(key), list):
    raise OKVQAFormatError(f"{path}: expected an object with a {key!r} list")
  return data[key]


def load(folder, split: str = "val") -> list[Question]:
  """The questions of one split joined with their annotations, in the questions file's order."""
  if split not in SPLITS:
    raise ValueError(f"OK-VQA: unknown split {split!r}; expected one of {SPLITS}")
  folder = pathlib.Path(folder)
  qpath, apath = folder / question_file(split), folder / annotation_file(split)
  annotations = {}
  for i, a in enumerate(_read(apath, "annotations")):
    if not isinstance(a, dict) or "question_id" not in a:
      raise OKVQAFormatError(f"{apath}: annotations[{i}] has no question_id")
    annotations[a["question_id"]] = a
  out = []
  for i, q in enumerate(_read(qpath, "questions")):
    try:
      qid = q["question_id"]
      ann = annotations[qid]
    except (TypeError, KeyError):
      raise OKVQAFormatError(f"{qpath}: questions[{i}] has no question_id, or {apath.name} "
                             f"has no annotation for it") from None
    where = f"{apath} (question_id {qid})"
    if ann.get("image_id") != q.get("image_id"):
      raise OKVQAFormatError(f"{where}: image_id {ann.get('image_id')} but the questions file "
                             f"says {q.get('image_id')}")
    answers = ann.get("answers")
    if not isinstance(answers, list) or not answers:
      raise OKVQAFormatError(f"{where}: 'answers' must be a non-empty list")
    try:
      out.append(Question(
          question_id=int(qid), image_id=int(q["image_id"]), question=q["question"],
          question_type=ann.get("question_type", ""), answer_type=ann.get("answer_type", ""),
          confidence=int(ann.get("confidence", 0)),
          answers=tuple(a["answer"] for a in answers),
          raw_answers=tuple(a.get("raw_answer", a["answer"]) for a in answers),
          answer_confidences=tuple(a.get("answer_confidence", "") for a in answers),
          split=split))
    except (TypeError, KeyError) as e:
      raise OKVQAFormatError(f"{where}: missing field {e}") from None
  return out
