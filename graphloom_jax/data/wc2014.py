"""Reader for WorldCup2014 (Zhou, Huang and Zhu, COLING 2018; the release of
github.com/zmtkeke/IRN): a KB of the 2014 World Cup's players (clubs, countries, positions,
ages, numbers, with `_inverse` relations) and 1-hop, 2-hop and conjunctive questions.

Files in the folder `root` (the release's names):
  WC2014.txt  the facts, `subject<TAB>relation<TAB>object`
  WC-P1.txt (WC-1H), WC-P2.txt (WC-2H), WC-P.txt (WC-M, the two mixed), WC-C.txt (WC-C)
      one question per line:
      `question<TAB>answer<TAB>path<TAB>answer set<TAB>facts[<TAB>constraints]`, the path as in
      PathQuestion (WC-C: two paths joined by `*`, both ending at the answer), the answer set
      `a/b/.../`, the facts about the question's player `s#r#o///s#r#o...`, and in WC-C the two
      constraint entities `e1/e2`

  ds = wc2014.load("WC-2H", root=DIR)
  q = ds.split("test")[0]
  q.question, q.answers, q.path, q.split, q.facts
  triples = ds.instance_triples(q)   # KB neighbourhood plus the line's facts (data.pathqa)
"""

from __future__ import annotations

import pathlib

from graphloom_jax.data import pathqa
from graphloom_jax.data.pathqa import PathQAFormatError

SOURCE = "kb:wc2014"
KB_FILE = "WC2014.txt"
FILES = {"WC-1H": "WC-P1.txt", "WC-2H": "WC-P2.txt", "WC-M": "WC-P.txt", "WC-C": "WC-C.txt"}
NAMES = tuple(FILES)


def parse_facts(text: str, where: str) -> tuple[tuple[str, str, str], ...]:
  facts = []
  for item in (x for x in text.strip().split("///") if x):
    parts = item.split("#")
    if len(parts) != 3 or not all(parts):
      raise PathQAFormatError(f"{where}: the carried fact {item!r} is not subject#relation#object")
    facts.append(tuple(parts))
  return tuple(facts)


def parse_line(text: str, where: str, conjunctive: bool) -> pathqa.LineFields:
  n = 6 if conjunctive else 5
  fields = pathqa.fields_of(text, where, n, n)
  question, answer, paths, answers, facts = fields[:5]
  path_texts = tuple(paths.split("*"))
  if len(path_texts) != (2 if conjunctive else 1):
    raise PathQAFormatError(f"{where}: expected {2 if conjunctive else 1} path(s), found "
                            f"{len(path_texts)}")
  constraints = pathqa.answer_set(fields[5], where) if conjunctive else ()
  return pathqa.LineFields(question, pathqa.with_first(answer.strip(), pathqa.answer_set(
      answers, where), where), path_texts, parse_facts(facts, where), constraints)


def load(name: str, root, strict: bool = True) -> pathqa.PathQA:
  """One WorldCup2014 dataset (WC-1H, WC-2H, WC-M or WC-C) from the folder `root`."""
  if name not in FILES:
    raise ValueError(f"wc2014.load: unknown dataset {name!r}; expected one of {NAMES}")
  root = pathlib.Path(root)
  conjunctive = name == "WC-C"
  return pathqa.load(name, SOURCE, root / FILES[name], root / KB_FILE,
                     lambda text, where: parse_line(text, where, conjunctive), strict)
