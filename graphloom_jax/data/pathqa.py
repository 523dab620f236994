"""What PathQuestion and WorldCup2014 share: a knowledge base of `subject<TAB>relation<TAB>object`
facts, questions annotated with their answer path through it, the two splits, and the question's
instance graph. `graphloom_jax.data.pathquestion` and `graphloom_jax.data.wc2014` read the two
releases with it (file layouts in their docstrings).

Paths. A path is written `e0#r1#e1#r2#e2...#eN`, optionally followed by `#<end>#eN` (the
PathQuestion form); it is kept as the tuple (e0, r1, e1, ..., eN) of KB ids and every hop
(e_i, r_i+1, e_i+1) must be a KB fact. Its hop count is N. e0, the topic entity, is written in
the question.

Splits (`Question.split`, `Question.line_split`):
  split       by answer path, the headline protocol: `split_of_path` hashes the path's text
              (SHA-256), so every paraphrase of one path lands in the same split, and the split
              does not depend on the file's order. 80 / 10 / 10 train / validation / test in
              expectation.
  line_split  the protocol of the published results (a random 80 / 10 / 10 split by line): a
              permutation of the file's question lines drawn with numpy's PCG64 from
              `LINE_SPLIT_SEED`; exactly floor(0.8 n) train lines, floor(0.1 n) validation and
              the rest test. Consecutive lines of these files are paraphrases of one path, so
              this split puts the same fact in train and test; it is there only to stand next to
              the published figures.

Instance graph (`PathQA.instance_triples`): the KB facts within `hops` of the topic entity
(default: the question's hop count plus one, so the answer is never on the graph's frontier),
walking facts in both directions (`direction="both"`, the default) or only from subject to
object (`"out"`), plus the facts a WorldCup2014 question carries. Facts are Triples with
readable names (underscores to spaces; Freebase-style relations such as
`__film__film__rating` become "film film rating"), confidence 1, source `kb:<dataset>`, and
their KB line as `provenance.ref`; `PathQA.kb_id` maps a readable name back to its KB id.

Reading is strict by default: a line that is not UTF-8, a missing field, a path that leaves the
KB, an answer that is not the path's end, a KB line without exactly three fields, or an empty
file raises `PathQAFormatError` naming the file and line. `strict=False` skips and counts such
lines instead (`PathQA.report` and `PathQA.kb_report`, `graph.triples.ReadReport`s).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import pathlib
import re
from typing import Callable, Iterator, Sequence

import numpy as np

from graphloom_jax.graph.triples import Provenance, ReadReport, Triple

SPLITS = ("train", "validation", "test")
PROTOCOLS = ("path", "line")
LINE_SPLIT_SEED = 0
END = "<end>"


class PathQAFormatError(ValueError):
  """A line of a PathQuestion or WorldCup2014 file that does not match the format; the message
  names the file and line."""


def readable(kb_id: str) -> str:
  """A KB id as text: underscores to spaces, whitespace folded ("united_kingdom" -> "united
  kingdom", "__film__film__rating" -> "film film rating")."""
  return re.sub(r"\s+", " ", kb_id.replace("_", " ")).strip()


def split_of_path(path_text: str) -> str:
  """The path split of one path (its text as written, without the `#<end>#x` suffix)."""
  bucket = int.from_bytes(hashlib.sha256(path_text.encode("utf-8")).digest()[:8], "big") % 10
  return "train" if bucket < 8 else ("validation" if bucket == 8 else "test")


def line_splits(n: int, seed: int = LINE_SPLIT_SEED) -> list[str]:
  """The published protocol's split of n lines (see the module docstring)."""
  order = np.random.Generator(np.random.PCG64(seed)).permutation(n)
  n_train, n_val = int(0.8 * n), int(0.1 * n)
  out = [""] * n
  for rank, i in enumerate(order):
    out[i] = "train" if rank < n_train else ("validation" if rank < n_train + n_val else "test")
  return out


@dataclasses.dataclass(frozen=True)
class Question:
  """One question line. Ids are the KB's; `question` and `answers` are readable text."""
  qid: str                        # "<dataset>:<line>"
  question: str                   # readable: underscores to spaces
  raw_question: str               # as in the file
  answers: tuple[str, ...]        # readable; the line's answer first, then the rest of its set
  answer_ids: tuple[str, ...]
  paths: tuple[tuple[str, ...], ...]  # (e0, r1, e1, ..., eN) per path; WC-C has two
  split: str                      # by path (the headline protocol)
  line_split: str                 # random by line (the published protocol)
  line: int
  facts: tuple[tuple[str, str, str], ...] = ()   # facts the line carries (WorldCup2014)
  constraints: tuple[str, ...] = ()              # WC-C: the two constraint entities

  @property
  def path(self) -> tuple[str, ...]:
    return self.paths[0]

  @property
  def answer_texts(self) -> tuple[str, ...]:
    """The gold answers as text (the name the other readers' questions use)."""
    return self.answers

  @property
  def topic(self) -> str:
    return self.path[0]

  @property
  def hops(self) -> int:
    return max((len(p) - 1) // 2 for p in self.paths)

  def path_facts(self) -> list[tuple[str, str, str]]:
    """The answer path's hops as KB facts (every path's, in order)."""
    return [(p[i], p[i + 1], p[i + 2]) for p in self.paths for i in range(0, len(p) - 2, 2)]


@dataclasses.dataclass(frozen=True)
class LineFields:
  """What a dataset's line parser returns: the raw question, the answer ids (the line's answer
  first), the paths' texts, carried facts and constraints."""
  question: str
  answer_ids: tuple[str, ...]
  path_texts: tuple[str, ...]
  facts: tuple[tuple[str, str, str], ...] = ()
  constraints: tuple[str, ...] = ()


def iter_lines(path: pathlib.Path, report: ReadReport, strict: bool
               ) -> Iterator[tuple[int, str]]:
  """(line number, text without its line break) for every non-blank line of a file. A line that
  is not UTF-8 or holds NUL is refused (strict) or skipped and counted; an empty file raises."""
  if not path.exists():
    raise FileNotFoundError(f"{path} is missing")
  raw = path.read_bytes()
  if not raw.strip():
    raise PathQAFormatError(f"{path}: the file is empty")
  for lineno, line in enumerate(raw.split(b"\n"), 1):
    line = line.rstrip(b"\r")
    try:
      text = line.decode("utf-8")
    except UnicodeDecodeError as e:
      _reject(report, f"{path}:{lineno}: not valid UTF-8 (byte {line[e.start:e.start + 1]!r} "
                      f"at column {e.start + 1})", strict)
      continue
    if "\x00" in text:
      _reject(report, f"{path}:{lineno}: holds a NUL character", strict)
      continue
    if text.strip():
      yield lineno, text


def _reject(report: ReadReport, message: str, strict: bool):
  if strict:
    raise PathQAFormatError(message)
  report.skipped += 1
  report.errors.append(message)


def read_kb(path, strict: bool = True) -> tuple[list[tuple[str, str, str]], dict, ReadReport]:
  """The facts of a KB file, their line numbers ({fact: line}) and the read report. Empty fields
  are dropped (PathQuestion writes `subject<TAB><TAB>relation<TAB>object`); a line must then hold
  exactly three. A fact written twice is kept once."""
  path = pathlib.Path(path)
  report = ReadReport(str(path))
  facts, lines = [], {}
  for lineno, text in iter_lines(path, report, strict):
    fields = [f.strip() for f in text.split("\t") if f.strip()]
    if len(fields) != 3:
      _reject(report, f"{path}:{lineno}: a KB line needs subject, relation and object "
                      f"separated by tabs; found {len(fields)} field(s)", strict)
      continue
    fact = tuple(fields)
    if fact not in lines:
      lines[fact] = lineno
      facts.append(fact)
    report.read += 1
  if not facts:
    raise PathQAFormatError(f"{path}: no KB fact could be read")
  return facts, lines, report


def parse_path(text: str, where: str) -> tuple[str, ...]:
  """`e0#r1#e1...#eN[#<end>#eN]` -> (e0, r1, ..., eN); raises naming `where` when malformed."""
  parts = text.strip().split("#")
  if len(parts) >= 3 and parts[-2] == END:
    if parts[-1] != parts[-3]:
      raise PathQAFormatError(f"{where}: the path ends in {parts[-3]!r} but names {parts[-1]!r} "
                              f"after {END}")
    parts = parts[:-2]
  if len(parts) < 3 or len(parts) % 2 == 0 or any(not p for p in parts):
    raise PathQAFormatError(f"{where}: the path {text.strip()!r} is not entity#relation#entity"
                            "... with an odd number of non-empty parts")
  return tuple(parts)


@dataclasses.dataclass
class PathQA:
  """One dataset: its KB, questions and read report (see the module docstring)."""
  name: str
  source: str                       # the triples' source, e.g. "kb:pathquestion"
  kb_path: str
  kb: list[tuple[str, str, str]]
  kb_lines: dict
  questions: list[Question]
  report: ReadReport                # the question file's
  kb_report: ReadReport

  def __post_init__(self):
    self._out = collections.defaultdict(list)
    self._in = collections.defaultdict(list)
    for fact in self.kb:
      self._out[fact[0]].append(fact)
      self._in[fact[2]].append(fact)
    self._ids = {}
    for fact in self.kb:
      for x in fact:
        self._ids.setdefault(readable(x), x)

  def split(self, name: str, protocol: str = "path") -> list[Question]:
    """The questions of one split under a protocol ("path": the headline split; "line": the
    published random split by line)."""
    if name not in SPLITS:
      raise ValueError(f"{self.name}: unknown split {name!r}; expected one of {SPLITS}")
    if protocol not in PROTOCOLS:
      raise ValueError(f"{self.name}: unknown split protocol {protocol!r}; expected one of "
                       f"{PROTOCOLS}")
    key = "split" if protocol == "path" else "line_split"
    return [q for q in self.questions if getattr(q, key) == name]

  def kb_id(self, name: str) -> str:
    """The KB id of a readable name (KeyError when no KB id reads so)."""
    return self._ids[name]

  def triple(self, fact: tuple[str, str, str], instance: str = "") -> Triple:
    """A KB fact as a Triple with readable names and its KB line as provenance."""
    ref = f"{pathlib.Path(self.kb_path).name}:{self.kb_lines[fact]}" if fact in self.kb_lines \
        else None
    return Triple(readable(fact[0]), readable(fact[1]), readable(fact[2]), 1.0, self.source,
                  Provenance(instance=instance, ref=ref))

  def kb_triples(self) -> list[Triple]:
    """The whole KB as Triples, in file order (a retrieval pool)."""
    return [self.triple(f) for f in self.kb]

  def gold_triples(self, q: Question) -> list[Triple]:
    """The answer path's hops as Triples."""
    return [self.triple(f, q.qid) for f in q.path_facts()]

  def neighbourhood(self, entity: str, hops: int, direction: str = "both"
                    ) -> list[tuple[str, str, str]]:
    """KB facts within `hops` of an entity id, breadth first, each fact once, in the order
    reached (facts of one entity in KB file order)."""
    if direction not in ("both", "out"):
      raise ValueError(f"{self.name}: direction must be 'both' or 'out', got {direction!r}")
    seen_facts, out = set(), []
    reached, frontier = {entity}, [entity]
    for _ in range(hops):
      nxt = []
      for x in frontier:
        edges = [(f, f[2]) for f in self._out.get(x, ())]
        if direction == "both":
          edges += [(f, f[0]) for f in self._in.get(x, ())]
        for fact, other in edges:
          if fact not in seen_facts:
            seen_facts.add(fact)
            out.append(fact)
          if other not in reached:
            reached.add(other)
            nxt.append(other)
      frontier = nxt
    return out

  def instance_triples(self, q: Question, hops: int | None = None, direction: str = "both"
                       ) -> list[Triple]:
    """The question's instance graph (see the module docstring)."""
    hops = q.hops + 1 if hops is None else hops
    facts = self.neighbourhood(q.topic, hops, direction)
    seen = set(facts)
    facts += [f for f in dict.fromkeys(q.facts) if f not in seen]
    return [self.triple(f, q.qid) for f in facts]


def load(name: str, source: str, question_path, kb_path, parse_line: Callable[[str, str],
         LineFields], strict: bool = True) -> PathQA:
  """Reads a KB and a question file whose lines `parse_line(text, where)` splits into fields,
  and checks every line against the KB (see the module docstring)."""
  question_path, kb_path = pathlib.Path(question_path), pathlib.Path(kb_path)
  for path in (question_path, kb_path):
    if not path.exists():
      raise FileNotFoundError(f"{name}: {path} is missing")
  kb, kb_lines, kb_report = read_kb(kb_path, strict)
  facts = set(kb)
  report = ReadReport(str(question_path))
  rows = []
  lines = list(iter_lines(question_path, report, strict))
  for lineno, text in lines:
    where = f"{question_path}:{lineno}"
    try:
      fields = parse_line(text, where)
      paths = tuple(parse_path(p, where) for p in fields.path_texts)
      for p in paths:
        for i in range(0, len(p) - 2, 2):
          if (p[i], p[i + 1], p[i + 2]) not in facts:
            raise PathQAFormatError(f"{where}: the path's hop ({p[i]}, {p[i + 1]}, {p[i + 2]}) "
                                    f"is not a fact of {kb_path}")
        if p[-1] != fields.answer_ids[0]:
          raise PathQAFormatError(f"{where}: the answer {fields.answer_ids[0]!r} is not the "
                                  f"path's end {p[-1]!r}")
    except PathQAFormatError as e:
      _reject(report, str(e), strict)
      continue
    rows.append((lineno, fields, paths))
    report.read += 1
  if not rows:
    raise PathQAFormatError(f"{question_path}: no question could be read"
                            + (f" ({report.skipped} bad lines; first: {report.errors[0]})"
                               if report.errors else ""))
  by_line = line_splits(len(rows))
  questions = []
  for (lineno, fields, paths), line_split in zip(rows, by_line):
    answer_ids = tuple(dict.fromkeys(fields.answer_ids))
    questions.append(Question(
        qid=f"{name}:{lineno}", question=readable(fields.question),
        raw_question=fields.question.strip(), answers=tuple(readable(a) for a in answer_ids),
        answer_ids=answer_ids, paths=paths,
        split=split_of_path("*".join("#".join(p) for p in paths)), line_split=line_split,
        line=lineno, facts=fields.facts, constraints=fields.constraints))
  return PathQA(name, source, str(kb_path), kb, kb_lines, questions, report, kb_report)


def fields_of(text: str, where: str, at_least: int, at_most: int) -> list[str]:
  """A question line's tab-separated fields, between at_least and at_most of them."""
  fields = text.split("\t")
  if not at_least <= len(fields) <= at_most:
    raise PathQAFormatError(f"{where}: expected {at_least}"
                            + (f" to {at_most}" if at_most != at_least else "")
                            + f" tab-separated fields, found {len(fields)}")
  if not fields[0].strip():
    raise PathQAFormatError(f"{where}: the question is empty")
  return fields


def answer_set(text: str, where: str) -> tuple[str, ...]:
  """`a/b/c/` -> ("a", "b", "c")."""
  items = tuple(a for a in text.strip().split("/") if a)
  if not items:
    raise PathQAFormatError(f"{where}: the answer set {text!r} is empty")
  return items


def with_first(first: str, rest: Sequence[str], where: str) -> tuple[str, ...]:
  """The answer ids with the line's answer first; it must be in its answer set."""
  if first not in rest:
    raise PathQAFormatError(f"{where}: the answer {first!r} is not in its answer set "
                            f"{'/'.join(rest)!r}")
  return (first,) + tuple(a for a in rest if a != first)
