"""The committed SceneKB results say how their benchmarks were drawn: the build_benchmark
commands in the results READMEs must draw every question a committed row answered (question ids
are a hash of the version, seed, scene and family, so this needs no rebuild)."""

import json
import pathlib
import re

import pytest

from graphloom_jax.data import build_benchmark

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results"
COMMAND = re.compile(r"build_benchmark --version=(\d+) --seed=(\d+) --scenes=(\d+)")


def _folders():
  return sorted(p for p in RESULTS.glob("scenekb_v*") if (p / "rows").is_dir()
                and any((p / "rows").rglob("*.json")))


def _commands():
  return {c for readme in RESULTS.glob("*/README.md")
          for c in COMMAND.findall(readme.read_text(encoding="utf-8"))}


@pytest.mark.parametrize("folder", _folders(), ids=lambda p: p.name)
def test_documented_command_draws_the_answered_questions(folder):
  commands = _commands()
  qids = set()
  for path in (folder / "rows").rglob("*.json"):
    row = json.loads(path.read_text())
    qids.update(r["qid"] for r in row.get("records", []))
  assert qids
  drawn = set()
  for version, seed, scenes in commands:
    namespace = f"{build_benchmark.NAME}{version}:{seed}"
    drawn.update(build_benchmark.doc_id("question", i, family, namespace=namespace)
                 for i in range(int(scenes)) for family in build_benchmark.FAMILIES)
  assert qids <= drawn, f"{len(qids - drawn)} of {len(qids)} answered questions are not drawn " \
                        f"by the commands {sorted(commands)} of the results READMEs"
