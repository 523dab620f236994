"""TFDS builders for PathQuestion (`pathquestion`, configs PQ-2H, PQ-3H, PQL-2H, PQL-3H) and
WorldCup2014 (`wc2014`, configs WC-1H, WC-2H, WC-M, WC-C) from the release files in manual_dir,
read with graphloom_jax.data.pathquestion / wc2014 (strict: a bad line stops the build, naming
it).

Splits: `train`, `validation`, `test` by answer path (the headline protocol: no path in two
splits) and `line_train`, `line_validation`, `line_test`, the published random split by line
(graphloom_jax.data.pathqa); a split no question falls in is not written. Each record is one question line: its ids as in the file
(`answer_ids`, `paths` as `e0#r1#...#eN` texts), readable `question` and `answers`, the line
number, the facts a WorldCup2014 line carries and WC-C's constraints. Instance graphs are not
stored (up to ~3,500 facts per question); `load(...).instance_triples(q)` builds them.
"""

from __future__ import annotations

import pathlib

import numpy as np
import tensorflow_datasets as tfds

from graphloom_jax.data import pathqa, pathquestion, wc2014

_TEXT = tfds.features.Text
SPLITS = pathqa.SPLITS + tuple(f"line_{s}" for s in pathqa.SPLITS)


def _features() -> tfds.features.FeaturesDict:
  return tfds.features.FeaturesDict({
      "qid": _TEXT(), "question": _TEXT(), "raw_question": _TEXT(),
      "answers": tfds.features.Sequence(_TEXT()), "answer_ids": tfds.features.Sequence(_TEXT()),
      "paths": tfds.features.Sequence(_TEXT()), "hops": np.int32,
      "line": np.int32,
      "facts": tfds.features.Sequence({"subject": _TEXT(), "relation": _TEXT(),
                                       "object": _TEXT()}),
      "constraints": tfds.features.Sequence(_TEXT()),
  })


def record(q: pathqa.Question) -> dict:
  """A question as the builders store it."""
  return {
      "qid": q.qid, "question": q.question, "raw_question": q.raw_question,
      "answers": list(q.answers), "answer_ids": list(q.answer_ids),
      "paths": ["#".join(p) for p in q.paths], "hops": q.hops, "line": q.line,
      "facts": {"subject": [f[0] for f in q.facts], "relation": [f[1] for f in q.facts],
                "object": [f[2] for f in q.facts]},
      "constraints": list(q.constraints),
  }


class _PathQABuilder(tfds.core.GeneratorBasedBuilder):
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Questions with answer paths; path and line splits."}
  _reader = None

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(builder=self, features=_features(), disable_shuffling=True,
                                 homepage="https://github.com/zmtkeke/IRN")

  def _split_generators(self, dl_manager):
    ds = self._reader.load(self.builder_config.name, root=pathlib.Path(dl_manager.manual_dir))
    out = {}
    for split in SPLITS:
      protocol, name = ("line", split[5:]) if split.startswith("line_") else ("path", split)
      questions = ds.split(name, protocol)
      if questions:  # TFDS writes no empty split (small files may leave one empty)
        out[split] = self._generate_examples(questions)
    return out

  def _generate_examples(self, questions):
    for q in questions:
      yield q.line, record(q)


class PathQuestion(_PathQABuilder):
  """PathQuestion questions (Zhou et al., 2018) from the release files."""
  name = "pathquestion"
  _reader = pathquestion
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=n, description=f"{q} over {kb}")
                     for n, (q, kb) in pathquestion.FILES.items()]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Put the PathQuestion release (github.com/zmtkeke/IRN, PathQuestion/) in manual_dir: "
      "PQ-2H.txt, PQ-3H.txt, PQL-2H.txt, PQL-3H.txt and their KBs 2H-kb.txt, 3H-kb.txt, "
      "PQL2-KB.txt, PQL3-KB.txt.")


class WC2014(_PathQABuilder):
  """WorldCup2014 questions (Zhou et al., 2018) from the release files."""
  name = "wc2014"
  _reader = wc2014
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=n, description=f"{f} over {wc2014.KB_FILE}")
                     for n, f in wc2014.FILES.items()]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Put the WorldCup2014 release (github.com/zmtkeke/IRN, WorldCup2014/) in manual_dir: "
      "WC2014.txt and WC-P1.txt, WC-P2.txt, WC-P.txt, WC-C.txt.")
