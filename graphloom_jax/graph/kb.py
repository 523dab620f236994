"""Knowledge-base loaders: WordNet 3.0 database files, ConceptNet 5 assertions, VG150 relation
statistics. Each loader yields `Triple`s whose `confidence` is the normalised source score that
enrichment compares with tau_KB.

WordNet (wndb(5) format, e.g. Debian's `wordnet-base` in /usr/share/wordnet, or the excerpt
committed under graphloom_jax/data/resources/wordnet/):
  data.POS   `offset lex_filenum ss_type w_cnt(hex) {word lex_id(hex)}* p_cnt(3 dec)
              {symbol offset pos source/target(4 hex)}* [f_cnt {+ f_num w_num}*] | gloss`
  index.POS  `lemma pos synset_cnt p_cnt {symbol}* sense_cnt tagsense_cnt {offset}*`
  Lines starting with two spaces are the licence header. Synsets are keyed by their offset
  field (not by byte position) so that excerpts of the files load the same way.
  Score of an edge taken from a lemma's i-th sense (1-based, senses ordered by frequency as in
  index.POS), by `WordNet(score=...)`:
    "rank"       1 / i (the dominant sense passes tau_KB = 0.7, later senses do not);
    "frequency"  (c_i + 1) / (max_j c_j + 1), c the senses' tag counts in the semantic
                 concordance (cntlist.rev) over all of the lemma's senses: the dominant sense
                 scores 1, a sense tagged half as often about 1/2, so tau_KB trades true
                 secondary senses against wrong ones. Needs `sense_counts.tsv` beside the wndb
                 files (`lemma TAB sense_number TAB offset TAB tag_count`, written by
                 launch/build_wordnet_resources.py).

ConceptNet 5 assertions (`conceptnet-assertions-5.x.csv`): five tab-separated columns
  `/a/[...]  /r/Relation  /c/en/start[/pos/...]  /c/en/end[/pos/...]  {"weight": w, ...}`.
  /r/ExternalURL rows (a concept and a URL) are read and ignored. Weights are positive and may
  exceed 1; `normalize="saturate"` maps w -> 1 - exp(-w)
  (file-independent: an excerpt and the full file agree), `"max"` maps w -> w / max w.

Bad input: a line that is not UTF-8, longer than MAX_LINE_BYTES, malformed or missing fields
(or a ConceptNet weight that is NaN, infinite or negative), and damaged gzip data, raise
`TripleFormatError` naming the file and line (strict, the default); with strict=False they are
skipped and counted in the loader's `ReadReport` (`skipped`, `errors`), every good line kept.

VG150 relation statistics: score(s, p, o) = count(s, p, o) / sum_p' count(s, p', o), the
predicate frequency given the subject and object classes, counted from scene graphs.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import pathlib
import re
from typing import Iterable

from graphloom_jax import atomic
from graphloom_jax.graph.triples import (GZIP_ERRORS, Provenance, ReadReport, Triple,
                                         TripleFormatError, _decode_json, _open_bytes)

# Longer lines are refused without being held in memory (the longest WordNet 3.0 data line is
# about 12 KB; a ConceptNet 5.7 assertion line under 4 KB).
MAX_LINE_BYTES = 1 << 20


def iter_text_lines(path: pathlib.Path, report: ReadReport, strict: bool,
                    max_bytes: int | None = None):
  """Yields (line number, text) of a text file (optionally .gz), read as bytes: a line that is
  not UTF-8 or longer than `max_bytes`, and damaged gzip data (which ends the read), are
  rejected through `report` with the file and line, never raised as a bare decode error.
  `max_bytes` defaults to MAX_LINE_BYTES."""
  max_bytes = MAX_LINE_BYTES if max_bytes is None else max_bytes
  lineno = 0
  with _open_bytes(path) as f:
    while True:
      try:
        raw = f.readline(max_bytes + 1)
        too_long = len(raw) > max_bytes and not raw.endswith(b"\n")
        while too_long and raw:  # skip the rest of the line, a bounded chunk at a time
          raw = f.readline(max_bytes)
          if raw.endswith(b"\n"):
            break
      except GZIP_ERRORS as e:
        report.reject(f"{path}:{lineno + 1}: truncated or corrupt gzip data ({e}); nothing "
                      f"after line {lineno} can be read", strict)
        return
      if not raw and not too_long:
        return
      lineno += 1
      if too_long:
        report.reject(f"{path}:{lineno}: line longer than {max_bytes} bytes", strict)
        continue
      try:
        text = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        report.reject(f"{path}:{lineno}: not valid UTF-8 (byte {raw[e.start:e.start + 1]!r} at "
                      f"offset {e.start}); expected UTF-8 text", strict)
        continue
      if "\x00" in text:
        report.reject(f"{path}:{lineno}: NUL byte in the line", strict)
        continue
      yield lineno, text

# --------------------------------------------------------------------------------------------
# WordNet
# --------------------------------------------------------------------------------------------

POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}

# Pointer symbol -> relation as read from the synset that holds the pointer.
WORDNET_RELATIONS = {
    "@": "is a", "@i": "instance of", "~": "has kind", "~i": "has instance",
    "#m": "member of", "#s": "substance of", "#p": "part of",
    "%m": "has member", "%s": "made of", "%p": "has part",
    "=": "attribute", "!": "antonym",
}


@dataclasses.dataclass(frozen=True)
class Pointer:
  symbol: str
  offset: int
  pos: str
  source_target: str


@dataclasses.dataclass(frozen=True)
class Synset:
  offset: int
  pos: str
  lex_filenum: int
  words: tuple[str, ...]
  pointers: tuple[Pointer, ...]
  gloss: str

  @property
  def head(self) -> str:
    """The synset's first word as plain text ("passenger_vehicle" -> "passenger vehicle")."""
    return self.words[0].replace("_", " ")


def parse_data_line(line: str) -> Synset:
  """Parses one wndb data.POS line; raises ValueError saying which field is wrong."""
  body, sep, gloss = line.partition("|")
  if not sep:
    raise ValueError("missing the '|' that starts the gloss")
  f = body.split()
  try:
    offset, lex_filenum, ss_type = int(f[0]), int(f[1]), f[2]
    if offset < 0 or lex_filenum < 0:
      raise ValueError(f"offset {offset} / lex_filenum {lex_filenum} must be >= 0")
    if ss_type not in ("n", "v", "a", "s", "r"):
      raise ValueError(f"ss_type {ss_type!r} is not one of n v a s r")
    w_cnt = int(f[3], 16)
    if w_cnt < 1:
      raise ValueError(f"w_cnt {f[3]!r}: a synset needs at least one word")
    words = tuple(re.sub(r"\([a-z]+\)$", "", f[4 + 2 * i]) for i in range(w_cnt))
    for i in range(w_cnt):
      int(f[5 + 2 * i], 16)
    i = 4 + 2 * w_cnt
    p_cnt = int(f[i])
    if p_cnt < 0:
      raise ValueError(f"p_cnt {p_cnt} must be >= 0")
    pointers = []
    for j in range(p_cnt):
      sym, off, pos, st = f[i + 1 + 4 * j: i + 5 + 4 * j]
      if pos not in ("n", "v", "a", "s", "r"):
        raise ValueError(f"pointer {j}: pos {pos!r} is not one of n v a s r")
      if int(off) < 0:
        raise ValueError(f"pointer {j}: offset {off} must be >= 0")
      if len(st) != 4:
        raise ValueError(f"pointer {j}: source/target {st!r} is not 4 hex digits")
      int(st, 16)
      pointers.append(Pointer(sym, int(off), pos, st))
    rest = f[i + 1 + 4 * p_cnt:]
    if ss_type == "v":
      f_cnt = int(rest[0])
      if f_cnt < 0 or len(rest) < 1 + 3 * f_cnt:
        raise ValueError(f"f_cnt {f_cnt}: {len(rest) - 1} frame fields follow")
      rest = rest[1 + 3 * f_cnt:]
    if rest:
      raise ValueError(f"{len(rest)} unexpected field(s) before the gloss: {rest[:3]}")
  except (IndexError, ValueError) as e:
    raise ValueError(f"malformed wndb data line ({e})") from None
  return Synset(offset, "a" if ss_type == "s" else ss_type, lex_filenum, words,
                tuple(pointers), gloss.strip())


def _is_header(line: str) -> bool:
  return line.startswith("  ")


class WordNet:
  """WordNet synsets and lemma index read from wndb files.

  `WordNet.load(folder, pos="n")` reads data.noun and index.noun (any of n v a r). As a
  knowledge source, `neighbors(lemma)` gives its one-hop facts.
  """

  name = "kb:wordnet"

  def __init__(self, synsets: dict[tuple[str, int], Synset],
               index: dict[tuple[str, str], tuple[int, ...]], report: ReadReport | None = None,
               score: str = "rank", counts: dict[str, dict[int, int]] | None = None):
    if score not in SCORES:
      raise ValueError(f"WordNet: score={score!r}; expected one of {SCORES}")
    if score == "frequency" and counts is None:
      raise ValueError("WordNet: score='frequency' needs sense counts (sense_counts.tsv)")
    self.synsets = synsets
    self.index = index
    self.report = report
    self.score = score
    self.counts = counts  # lemma -> {offset: tag count} over all of the lemma's noun senses

  @classmethod
  def load(cls, folder, pos: str | Iterable[str] = "n", strict: bool = True,
           score: str = "rank") -> "WordNet":
    """Reads data.POS and index.POS for each part of speech in `pos` (and sense_counts.tsv for
    score="frequency"); see the module docstring for what strict=False skips (counted in
    `.report`)."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
      raise FileNotFoundError(f"WordNet.load: {folder} is not a folder (wndb folder expected)")
    report = ReadReport(str(folder))
    synsets, index = {}, {}
    for p in pos:
      if p not in POS_FILES:
        raise ValueError(f"WordNet.load: unknown part of speech {p!r}; expected one of n v a r")
      for kind in ("data", "index"):
        path = folder / f"{kind}.{POS_FILES[p]}"
        if not path.exists():
          raise FileNotFoundError(f"WordNet.load: {path} does not exist (wndb folder expected)")
        for lineno, line in iter_text_lines(path, report, strict):
          if _is_header(line) or not line.strip():
            continue
          try:
            if kind == "data":
              s = parse_data_line(line)
              synsets[(s.pos, s.offset)] = s
            else:
              lemma, offsets = _parse_index_line(line, p)
              index[(p, lemma)] = offsets
          except ValueError as e:
            report.reject(f"{path}:{lineno}: {e}", strict)
          else:
            report.read += 1
    counts = read_sense_counts(folder / SENSE_COUNTS) if score == "frequency" else None
    return cls(synsets, index, report, score, counts)

  def sense_score(self, lemma: str, synset: Synset, rank: int) -> float:
    """The score of a fact taken from `synset`, the `rank`-th sense of `lemma` (module
    docstring); a lemma the counts do not know scores as monosemous under "frequency"."""
    if self.score == "rank":
      return 1.0 / rank
    counts = self.counts.get(lemma.strip().lower().replace(" ", "_"), {})
    if not counts:
      return 1.0
    return (counts.get(synset.offset, 0) + 1) / (max(counts.values()) + 1)

  def senses(self, lemma: str, pos: str = "n") -> list[Synset]:
    """Synsets of `lemma` in WordNet's sense order (most frequent first)."""
    key = (pos, lemma.strip().lower().replace(" ", "_"))
    return [self.synsets[(pos, o)] for o in self.index.get(key, ())
            if (pos, o) in self.synsets]

  def related(self, synset: Synset, symbol: str) -> list[Synset]:
    return [self.synsets[(p.pos if p.pos != "s" else "a", p.offset)] for p in synset.pointers
            if p.symbol == symbol and (p.pos if p.pos != "s" else "a", p.offset) in self.synsets]

  def hypernym_paths(self, synset: Synset) -> list[list[Synset]]:
    """Every path from `synset` up to a root through @ and @i pointers."""
    ups = self.related(synset, "@") + self.related(synset, "@i")
    if not ups:
      return [[synset]]
    return [[synset] + path for up in ups for path in self.hypernym_paths(up)]

  def triples(self, lemma: str, pos: str = "n", relations: Iterable[str] = tuple(
      s for s in WORDNET_RELATIONS if s not in ("~", "~i", "!", "=")),
              instance: str = "") -> list[Triple]:
    """One-hop WordNet facts about `lemma`, one per (sense, pointer), scored by `sense_score`.

    The subject is the lemma as given (the entity name in the graph), objects are the related
    synsets' first words."""
    name = lemma.strip().lower().replace("_", " ")
    out = []
    for rank, s in enumerate(self.senses(lemma, pos), start=1):
      for sym in relations:
        for other in self.related(s, sym):
          out.append(Triple(name, WORDNET_RELATIONS[sym], other.head.lower(),
                            self.sense_score(lemma, s, rank), "kb:wordnet",
                            Provenance(instance=instance)))
    return out

  def neighbors(self, entity: str) -> list[Triple]:
    """KnowledgeSource protocol: facts with `entity` as subject, deduplicated by the best score."""
    best = {}
    for t in self.triples(entity):
      if t.key() not in best or t.confidence > best[t.key()].confidence:
        best[t.key()] = t
    return list(best.values())


# Pointer symbols beyond WORDNET_RELATIONS, phrased from wninput(5WN)'s descriptions, for
# enumerating every WordNet fact (`wordnet_facts`).
EXTRA_WORDNET_RELATIONS = {
    "+": "is derivationally related to", "&": "is similar to", "\\": "pertains to",
    ";c": "belongs to the topic", "-c": "is the topic of", ";r": "belongs to the region",
    "-r": "is the region of", ";u": "is used in the register", "-u": "is the register of",
    "^": "see also", "$": "is in a verb group with", "*": "entails", ">": "causes",
    "<": "is a participle of",
}


def _lemma_word(w: str) -> str:
  # Adjective entries carry syntactic markers such as "long(a)".
  return re.sub(r"\([a-z]+\)$", "", w).replace("_", " ").lower()


def wordnet_facts(wn: WordNet) -> list[Triple]:
  """Every distinct fact of a loaded WordNet (all parts of speech it holds), sorted: each pointer
  of each synset, from every word of the synset to the first four words of the target synset
  (a pointer between particular words: those two words), relations named by WORDNET_RELATIONS
  and EXTRA_WORDNET_RELATIONS; confidence 1, source "kb:wordnet". Distractor pools use it."""
  names = {**WORDNET_RELATIONS, **EXTRA_WORDNET_RELATIONS}
  keys = set()
  for s in wn.synsets.values():
    for p in s.pointers:
      target = wn.synsets.get((p.pos if p.pos != "s" else "a", p.offset))
      if target is None or p.symbol not in names:
        continue
      rel = names[p.symbol]
      if p.source_target == "0000":  # a relation between whole synsets
        for w in s.words:
          for u in target.words[:4]:
            keys.add((_lemma_word(w), rel, _lemma_word(u)))
      else:  # a relation between two particular words
        si, ti = int(p.source_target[:2], 16), int(p.source_target[2:], 16)
        keys.add((_lemma_word(s.words[si - 1]), rel, _lemma_word(target.words[ti - 1])))
  return [Triple(a, r, b, 1.0, "kb:wordnet") for a, r, b in sorted(keys)]


SCORES = ("rank", "frequency")
SENSE_COUNTS = "sense_counts.tsv"


def read_sense_counts(path) -> dict[str, dict[int, int]]:
  """sense_counts.tsv -> lemma -> {offset: tag count}; a malformed line raises
  TripleFormatError naming the file and line."""
  path = pathlib.Path(path)
  if not path.exists():
    raise FileNotFoundError(f"WordNet: {path} does not exist (score='frequency' reads the sense "
                            "counts that launch/build_wordnet_resources.py writes)")
  out: dict[str, dict[int, int]] = {}
  report = ReadReport(str(path))
  for lineno, line in iter_text_lines(path, report, True):
    if not line.strip():
      continue
    f = line.rstrip("\n").split("\t")
    try:
      if len(f) != 4:
        raise ValueError(f"{len(f)} tab-separated fields")
      number, offset, tagged = int(f[1]), int(f[2]), int(f[3])
      if number < 1 or offset < 0 or tagged < 0 or not f[0]:
        raise ValueError("an empty lemma or a negative number")
    except ValueError as e:
      raise TripleFormatError(f"{path}:{lineno}: expected 'lemma TAB sense_number TAB offset "
                              f"TAB tag_count' ({e})") from None
    out.setdefault(f[0], {})[offset] = tagged
  return out


def _parse_index_line(line: str, pos: str) -> tuple[str, tuple[int, ...]]:
  f = line.split()
  try:
    lemma, p = f[0], f[1]
    if p != pos:
      raise ValueError(f"pos {p!r} where {pos!r} was expected")
    synset_cnt, p_cnt = int(f[2]), int(f[3])
    if synset_cnt < 1 or p_cnt < 0:
      raise ValueError(f"synset_cnt {synset_cnt} must be >= 1 and p_cnt {p_cnt} >= 0")
    i = 4 + p_cnt
    int(f[i]), int(f[i + 1])
    offsets = tuple(int(x) for x in f[i + 2:])
    if any(o < 0 for o in offsets):
      raise ValueError(f"negative synset offset in {offsets}")
    if len(offsets) != synset_cnt:
      raise ValueError(f"synset_cnt says {synset_cnt} senses but {len(offsets)} offsets follow")
  except (IndexError, ValueError) as e:
    raise ValueError(f"malformed wndb index line ({e})") from None
  return lemma, offsets


# --------------------------------------------------------------------------------------------
# ConceptNet
# --------------------------------------------------------------------------------------------


def conceptnet_term(uri: str) -> tuple[str, str]:
  """'/c/en/ice_cream/n/wn/food' -> ('en', 'ice cream')."""
  parts = uri.split("/")
  if len(parts) < 4 or parts[1] != "c" or not parts[3]:
    raise ValueError(f"{uri!r} is not a ConceptNet concept URI (/c/<lang>/<term>...)")
  return parts[2], parts[3].replace("_", " ")


def conceptnet_relation(uri: str) -> str:
  """'/r/IsA' -> 'is a', '/r/dbpedia/genre' -> 'genre', '/r/PartOf' -> 'part of'."""
  if not uri.startswith("/r/"):
    raise ValueError(f"{uri!r} is not a ConceptNet relation URI (/r/...)")
  name = uri.rsplit("/", 1)[-1]
  return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).lower().replace("_", " ")


def load_conceptnet(path, language: str = "en", normalize: str = "saturate",
                    strict: bool = True) -> tuple[list[Triple], ReadReport]:
  """Reads ConceptNet 5 assertions (CSV, tab-separated, optionally .gz) into Triples.

  Keeps the edges whose start and end are both in `language`; confidence is the normalised
  weight (see the module docstring)."""
  if normalize not in ("saturate", "max"):
    raise ValueError(f"load_conceptnet: normalize={normalize!r}; expected 'saturate' or 'max'")
  path = pathlib.Path(path)
  report = ReadReport(str(path))
  rows = []
  for lineno, line in iter_text_lines(path, report, strict):
    if not line.strip():
      continue
    try:
      cols = line.rstrip("\r\n").split("\t")
      if len(cols) != 5:
        raise ValueError(f"expected 5 tab-separated columns (URI, relation, start, end, JSON), "
                         f"got {len(cols)}")
      rel = conceptnet_relation(cols[1])
      if cols[1] == "/r/ExternalURL":
        report.read += 1  # links a concept to a web page: not a fact between concepts
        continue
      (ls, s), (lo, o) = conceptnet_term(cols[2]), conceptnet_term(cols[3])
      try:
        info = json.loads(cols[4])
      except json.JSONDecodeError as e:
        raise ValueError(f"column 5 is not valid JSON ({e.msg})") from None
      except RecursionError:
        raise ValueError("column 5 is JSON nested too deeply to read") from None
      w = info.get("weight") if isinstance(info, dict) else None
      if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) \
          or w < 0:
        raise ValueError(f"column 5 needs a finite non-negative numeric 'weight', got {w!r}")
      # the fields are checked here (line breaks, empty names), the score set after the read
      triple = Triple(s, rel, o, 1.0, "kb:conceptnet")
    except ValueError as e:  # TripleFormatError included
      report.reject(f"{path}:{lineno}: {e}", strict)
      continue
    report.read += 1
    if ls == language and lo == language:
      rows.append((triple, float(w)))
  if normalize == "max":
    top = max((w for _, w in rows), default=1.0) or 1.0
    score = lambda w: w / top
  else:
    score = lambda w: 1.0 - math.exp(-w)
  return [t.replace(confidence=score(w)) for t, w in rows], report


class TripleKB:
  """A KnowledgeSource over a fixed list of triples (ConceptNet, VG150 statistics, ...).

  `neighbors(entity)` returns the triples that have `entity` as subject or object (only as
  subject with `subject_only`, the convention of `WordNet.neighbors`)."""

  def __init__(self, triples: Iterable[Triple], name: str, subject_only: bool = False):
    self.name = name
    self._by_entity = collections.defaultdict(list)
    for t in triples:
      self._by_entity[t.subject].append(t)
      if t.object != t.subject and not subject_only:
        self._by_entity[t.object].append(t)

  def neighbors(self, entity: str) -> list[Triple]:
    return list(self._by_entity.get(entity, ()))


# --------------------------------------------------------------------------------------------
# VG150 relation statistics
# --------------------------------------------------------------------------------------------


def _read_json(path: pathlib.Path):
  """A whole JSON file, its bad bytes or syntax named with the file and line."""
  with open(path, "rb") as f:
    return _decode_json(f.read(), path, "file")


def load_vg150_vocab(path) -> tuple[list[str], list[str]]:
  """Reads the VG150 vocabulary file ({"objects": [...150], "predicates": [...50]})."""
  path = pathlib.Path(path)
  data = _read_json(path)
  if not isinstance(data, dict) or not {"objects", "predicates"} <= data.keys():
    raise TripleFormatError(f"{path}: expected an object with 'objects' and 'predicates' lists")
  for key in ("objects", "predicates"):
    if not isinstance(data[key], list) or not all(isinstance(x, str) and x for x in data[key]):
      raise TripleFormatError(f"{path}: '{key}' must be a list of non-empty strings")
  return list(data["objects"]), list(data["predicates"])


class VG150Stats:
  """Predicate counts per (subject class, object class) over the VG150 vocabulary."""

  def __init__(self, objects: Iterable[str], predicates: Iterable[str]):
    self.objects = list(objects)
    self.predicates = list(predicates)
    self._objects, self._predicates = set(self.objects), set(self.predicates)
    self.counts: collections.Counter = collections.Counter()

  def add(self, subject: str, predicate: str, obj: str, count: int = 1) -> bool:
    """Counts one relation; returns False (and counts nothing) outside the vocabulary."""
    if subject in self._objects and obj in self._objects and predicate in self._predicates:
      self.counts[(subject, predicate, obj)] += count
      return True
    return False

  def frequency(self, subject: str, predicate: str, obj: str) -> float:
    total = sum(c for (s, _, o), c in self.counts.items() if s == subject and o == obj)
    return self.counts[(subject, predicate, obj)] / total if total else 0.0

  def triples(self) -> list[Triple]:
    """Every counted (s, p, o) as a kb:vg150 triple scored by P(p | s, o), in a stable order."""
    totals = collections.Counter()
    for (s, _, o), c in self.counts.items():
      totals[(s, o)] += c
    return [Triple(s, p, o, c / totals[(s, o)], "kb:vg150")
            for (s, p, o), c in sorted(self.counts.items())]

  def to_json(self) -> dict:
    return {"objects": self.objects, "predicates": self.predicates,
            "counts": [[s, p, o, c] for (s, p, o), c in sorted(self.counts.items())]}

  def save(self, path) -> None:
    atomic.atomic_write_json(path, self.to_json(), indent=0, sort_keys=True)

  @classmethod
  def load(cls, path) -> "VG150Stats":
    path = pathlib.Path(path)
    data = _read_json(path)
    if not isinstance(data, dict) or not {"objects", "predicates", "counts"} <= data.keys():
      raise TripleFormatError(f"{path}: expected 'objects', 'predicates' and 'counts'")
    for key in ("objects", "predicates", "counts"):
      if not isinstance(data[key], list):
        raise TripleFormatError(f"{path}: '{key}' must be a list")
    stats = cls(data["objects"], data["predicates"])
    for i, row in enumerate(data["counts"]):
      if (not isinstance(row, list) or len(row) != 4 or not isinstance(row[3], int)
          or isinstance(row[3], bool) or row[3] < 0
          or not all(isinstance(x, str) for x in row[:3])):
        raise TripleFormatError(f"{path}: counts[{i}] must be [subject, predicate, object, "
                                f"count >= 0], got {row!r}")
      if not stats.add(*row):
        raise TripleFormatError(f"{path}: counts[{i}] {row[:3]} is outside the vocabulary")
    return stats
