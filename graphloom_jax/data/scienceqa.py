"""Reader for ScienceQA (Lu et al., NeurIPS 2022) in its official layout (lupantech/ScienceQA,
data/scienceqa/):

  problems.json     {pid: {question, choices: [str], answer: int (index into choices), hint,
                     image: "image.png" or null, task, grade: "grade1".."grade12",
                     subject: "natural science" | "social science" | "language science",
                     topic, category, skill, lecture, solution, split: "train"|"val"|"test"}}
  pid_splits.json   {"train": [pid], "val": [pid], "test": [pid], "minitrain": ..., ...}
  images/<split>/<pid>/<image>   the problem's image, when `image` is set

  problems = scienceqa.load(folder, "test")
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

SUBJECTS = ("natural science", "social science", "language science")


class ScienceQAFormatError(ValueError):
  """A ScienceQA record that does not match the format; the message names file and pid."""


@dataclasses.dataclass(frozen=True)
class Problem:
  pid: str
  question: str
  choices: tuple[str, ...]
  answer: int
  hint: str
  image: str | None
  task: str
  grade: str
  subject: str
  topic: str
  category: str
  skill: str
  lecture: str
  solution: str
  split: str

  @property
  def has_text(self) -> bool:
    return bool(self.hint)

  @property
  def has_image(self) -> bool:
    return bool(self.image)

  def image_path(self, folder) -> pathlib.Path | None:
    """Where the official layout keeps this problem's image (None when it has none)."""
    if not self.image:
      return None
    return pathlib.Path(folder) / "images" / self.split / self.pid / self.image


def problem_from_json(pid: str, record, where: str) -> Problem:
  where = f"{where} (pid {pid})"
  if not isinstance(record, dict):
    raise ScienceQAFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
  missing = [k for k in ("question", "choices", "answer", "grade", "subject", "split")
             if k not in record]
  if missing:
    raise ScienceQAFormatError(f"{where}: missing keys {missing}")
  choices = record["choices"]
  if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
    raise ScienceQAFormatError(f"{where}: 'choices' must be a list of strings, got {choices!r}")
  answer = record["answer"]
  if not isinstance(answer, int) or not 0 <= answer < len(choices):
    raise ScienceQAFormatError(f"{where}: 'answer' must index the {len(choices)} choices, "
                               f"got {answer!r}")
  return Problem(
      pid=pid, question=record["question"], choices=tuple(choices), answer=answer,
      hint=record.get("hint") or "", image=record.get("image") or None,
      task=record.get("task", ""), grade=record["grade"], subject=record["subject"],
      topic=record.get("topic", ""), category=record.get("category", ""),
      skill=record.get("skill", ""), lecture=record.get("lecture", ""),
      solution=record.get("solution", ""), split=record["split"])


def _read_json(path: pathlib.Path):
  if not path.exists():
    raise FileNotFoundError(f"ScienceQA: {path} is missing (expected the official "
                            f"problems.json and pid_splits.json in that folder)")
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ScienceQAFormatError(f"{path}: not valid JSON: {e.msg} (line {e.lineno})") from None


def split_names(folder) -> list[str]:
  """The split names that pid_splits.json lists ("train", "val", "test", "minitrain", ...)."""
  return list(_read_json(pathlib.Path(folder) / "pid_splits.json"))


def load(folder, split: str = "test") -> list[Problem]:
  """The problems of one split, in the order pid_splits.json lists them."""
  folder = pathlib.Path(folder)
  problems = _read_json(folder / "problems.json")
  splits = _read_json(folder / "pid_splits.json")
  if split not in splits:
    raise ValueError(f"ScienceQA: no split {split!r} in {folder / 'pid_splits.json'}; "
                     f"it has {sorted(splits)}")
  out = []
  for pid in splits[split]:
    pid = str(pid)
    if pid not in problems:
      raise ScienceQAFormatError(f"{folder / 'pid_splits.json'}: split {split!r} lists pid "
                                 f"{pid} that problems.json does not have")
    out.append(problem_from_json(pid, problems[pid], str(folder / "problems.json")))
  return out
