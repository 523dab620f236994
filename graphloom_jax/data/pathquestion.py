"""Reader for PathQuestion (Zhou, Huang and Zhu, COLING 2018, "An Interpretable Reasoning Network
for Multi-Relation Question Answering"; the release of github.com/zmtkeke/IRN): Freebase facts
and 2- and 3-hop questions written from paraphrase templates.

Files in the folder `root` (the release's names):
  PQ-2H.txt, PQ-3H.txt, PQL-2H.txt, PQL-3H.txt   one question per line,
      `question<TAB>answer(answer1/answer2/...)<TAB>path`, the path `e0#r1#e1#...#eN#<end>#eN`
      (PQ) or `e0#r1#e1#...#eN` (PQL); consecutive lines are paraphrases of one path
  2H-kb.txt, 3H-kb.txt, PQL2-KB.txt, PQL3-KB.txt  the facts, `subject<TAB>relation<TAB>object`
      (PQ files may hold an empty field between subject and relation)

  ds = pathquestion.load("PQ-3H", root=DIR)
  q = ds.split("test")[0]                       # path split; protocol="line": published split
  q.question, q.answers, q.path, q.split
  triples = ds.instance_triples(q)              # its instance graph (graphloom_jax.data.pathqa)

The answer field may itself hold parentheses ("PG_(USA)(PG_(USA)/)"): the answer set is the
last parenthesised group that lists the answer.
"""

from __future__ import annotations

import pathlib

from graphloom_jax.data import pathqa
from graphloom_jax.data.pathqa import PathQAFormatError

SOURCE = "kb:pathquestion"
# config -> (question file, KB file)
FILES = {
    "PQ-2H": ("PQ-2H.txt", "2H-kb.txt"),
    "PQ-3H": ("PQ-3H.txt", "3H-kb.txt"),
    "PQL-2H": ("PQL-2H.txt", "PQL2-KB.txt"),
    "PQL-3H": ("PQL-3H.txt", "PQL3-KB.txt"),
}
NAMES = tuple(FILES)


def parse_answer(text: str, where: str) -> tuple[str, ...]:
  """`answer(answer1/answer2/)` -> (answer, the others of the set)."""
  text = text.strip()
  if not text.endswith(")"):
    raise PathQAFormatError(f"{where}: the answer field {text!r} is not answer(answer set)")
  for k in [i for i, c in enumerate(text) if c == "("]:
    first, rest = text[:k], pathqa.answer_set(text[k + 1:-1], where) if text[k + 1:-1] else ()
    if first and first in rest:
      return pathqa.with_first(first, rest, where)
  raise PathQAFormatError(f"{where}: the answer field {text!r} has no answer(answer set) whose "
                          "set lists the answer")


def parse_line(text: str, where: str) -> pathqa.LineFields:
  question, answer, path = pathqa.fields_of(text, where, 3, 3)
  return pathqa.LineFields(question, parse_answer(answer, where), (path,))


def load(name: str, root, strict: bool = True) -> pathqa.PathQA:
  """One PathQuestion dataset (PQ-2H, PQ-3H, PQL-2H or PQL-3H) from the folder `root`."""
  if name not in FILES:
    raise ValueError(f"pathquestion.load: unknown dataset {name!r}; expected one of {NAMES}")
  root = pathlib.Path(root)
  questions, kb = FILES[name]
  return pathqa.load(name, SOURCE, root / questions, root / kb, parse_line, strict)
