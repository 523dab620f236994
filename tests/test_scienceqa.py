"""ScienceQA: the reader on a fixture in the official layout, and accuracy with the official
breakdowns on hand-computed cases."""

import json
import pathlib

import pytest

from graphloom_jax.data import scienceqa
from graphloom_jax.evaluation.scienceqa import scienceqa_accuracy

FIXTURE = pathlib.Path(__file__).resolve().parent / "data" / "scienceqa"


def test_load_fixture_split_order_and_fields():
  test = scienceqa.load(FIXTURE, "test")
  assert [p.pid for p in test] == ["5", "8", "12"]
  p = test[1]
  assert p.choices[1].startswith("Do ping pong balls travel farther")
  assert p.answer == 1 and p.subject == "natural science" and p.grade == "grade8"
  assert p.has_text and p.has_image
  assert p.image_path(FIXTURE) == FIXTURE / "images" / "test" / "8" / "image.png"
  assert p.image_path(FIXTURE).exists()
  assert test[2].image is None and test[2].image_path(FIXTURE) is None and not test[2].has_text
  # a mini split keeps each problem's own split for its image folder
  assert [p.split for p in scienceqa.load(FIXTURE, "minitest")] == ["test", "test"]
  assert scienceqa.split_names(FIXTURE)[:3] == ["train", "val", "test"]


def test_load_errors(tmp_path):
  with pytest.raises(ValueError, match="no split 'dev'"):
    scienceqa.load(FIXTURE, "dev")
  with pytest.raises(FileNotFoundError, match="problems.json is missing"):
    scienceqa.load(tmp_path, "test")
  problems = json.loads((FIXTURE / "problems.json").read_text())
  problems["12"]["answer"] = 3
  (tmp_path / "problems.json").write_text(json.dumps(problems))
  (tmp_path / "pid_splits.json").write_text(json.dumps({"test": ["12"], "val": ["99"]}))
  with pytest.raises(scienceqa.ScienceQAFormatError, match=r"pid 12.*index the 3 choices"):
    scienceqa.load(tmp_path, "test")
  with pytest.raises(scienceqa.ScienceQAFormatError, match="lists pid 99"):
    scienceqa.load(tmp_path, "val")


def _problem(pid, subject, hint, image, grade, answer):
  return scienceqa.Problem(pid=pid, question="q", choices=("a", "b", "c", "d"), answer=answer,
                           hint=hint, image=image, task="closed choice", grade=grade,
                           subject=subject, topic="", category="", skill="", lecture="",
                           solution="", split="test")


def test_accuracy_breakdowns_hand_computed():
  problems = [
      _problem("1", "natural science", "a hint", None, "grade2", 0),          # right
      _problem("2", "natural science", "", "image.png", "grade7", 1),         # wrong
      _problem("3", "social science", "a hint", "image.png", "grade3", 2),    # right
      _problem("4", "language science", "", None, "grade10", 0),              # right
      _problem("5", "social science", "", None, "grade5", 1),                 # wrong
      _problem("6", "natural science", "", None, "grade8", 3),                # wrong
  ]
  predictions = [0, 0, 2, 0, 0, 0]
  got = scienceqa_accuracy(predictions, problems)
  want = {
      "NAT": 100 / 3,    # 1, 2, 6: one right
      "SOC": 50.0,       # 3 right, 5 wrong
      "LAN": 100.0,      # 4
      "TXT": 100.0,      # hints: 1, 3 (3 also has an image)
      "IMG": 50.0,       # images: 2 wrong, 3 right
      "NO": 100 / 3,     # neither: 4 right, 5 and 6 wrong
      "G1-6": 200 / 3,   # grades 2, 3, 5: 1 and 3 right
      "G7-12": 100 / 3,  # grades 7, 10, 8: 4 right
      "average": 50.0,   # 3 of 6
  }
  for name, value in want.items():
    assert got[name] == pytest.approx(value, abs=1e-9), name
  assert got["counts"] == {"NAT": 3, "SOC": 2, "LAN": 1, "TXT": 2, "IMG": 2, "NO": 3,
                           "G1-6": 3, "G7-12": 3, "average": 6}


def test_accuracy_empty_group_and_errors():
  got = scienceqa_accuracy([1], [_problem("1", "natural science", "", None, "grade1", 1)])
  assert got["NAT"] == 100.0 and got["SOC"] is None and got["G7-12"] is None
  with pytest.raises(ValueError, match="2 predictions for 1 problems"):
    scienceqa_accuracy([0, 1], [_problem("1", "natural science", "", None, "grade1", 1)])


def test_accuracy_on_fixture():
  test = scienceqa.load(FIXTURE, "test")
  got = scienceqa_accuracy([0, 0, 1], test)  # pids 5 right, 8 wrong, 12 right
  assert got["average"] == pytest.approx(200 / 3)
  assert got["NAT"] == 0.0 and got["SOC"] == 100.0 and got["LAN"] == 100.0
