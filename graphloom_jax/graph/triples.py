"""The triple schema of the instance graph, and validated JSON / JSONL reading and writing.

A triple `t = (s, r, o)` carries `confidence` (conf_ext in [0, 1]), the `source` that produced
it (scene, rebel, table, text, kb:conceptnet, kb:vg150, kb:wordnet, ...) and its provenance: the
instance it belongs to and, where known, an image region `(x, y, w, h)` or a text span
`(start, end)` (character offsets, end exclusive).

On-disk record (one JSON object; JSONL holds one per line, a JSON file holds a list):
  {"subject": str, "relation": str, "object": str, "confidence": float, "source": str,
   "provenance": {"instance": str, "region": [x, y, w, h] | null, "span": [start, end] | null,
                  "ref": str (optional: the record's id in its source)}}
`provenance` and its keys are optional; unknown keys are rejected so that typos surface.

Reading has two modes: strict (the default) raises `TripleFormatError` naming the file, the line
(or list index) and what was expected; lenient skips bad records, counts them in a
`ReadReport` and keeps every good one. Bad bytes count as bad records: a line that is not UTF-8
or is nested too deeply for the JSON parser is one bad record, and truncated or corrupt gzip
data ends the read at the last good line (one bad record for everything after it). String fields
must not hold line breaks or NUL (they would split or end a record in every line-based format
downstream), and a region must be finite with non-negative width and height.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import pathlib
import zlib
from typing import Iterable, Iterator

from graphloom_jax import atomic

KNOWN_SOURCES = ("scene", "rebel", "table", "text", "kb:conceptnet", "kb:vg150", "kb:wordnet")


class TripleFormatError(ValueError):
  """A triple record that does not match the schema; the message names file and line."""


@dataclasses.dataclass(frozen=True)
class Provenance:
  instance: str = ""
  region: tuple[float, float, float, float] | None = None
  span: tuple[int, int] | None = None
  # Where in the source the triple was read: e.g. "relationship 12 (object 3 -> object 7)" for
  # a scene graph, a knowledge base's own id ("wordnet:n02084071"), or None.
  ref: str | None = None


@dataclasses.dataclass(frozen=True)
class Triple:
  subject: str
  relation: str
  object: str
  confidence: float = 1.0
  source: str = "scene"
  provenance: Provenance = Provenance()

  def __post_init__(self):
    problems = _triple_problems(self)
    if problems:
      raise TripleFormatError(f"invalid triple {self.key()!r}: {'; '.join(problems)}")

  def key(self) -> tuple[str, str, str]:
    return (self.subject, self.relation, self.object)

  def sort_key(self) -> tuple:
    """A total order independent of hashing (used to break score ties deterministically)."""
    p = self.provenance
    return (self.subject, self.relation, self.object, self.source, p.instance,
            -self.confidence, p.region or (), p.span or ())

  def verbalize(self) -> str:
    return f"{self.subject} {self.relation} {self.object}"

  def to_json(self) -> dict:
    p = self.provenance
    return {"subject": self.subject, "relation": self.relation, "object": self.object,
            "confidence": self.confidence, "source": self.source,
            "provenance": {"instance": p.instance,
                           "region": list(p.region) if p.region is not None else None,
                           "span": list(p.span) if p.span is not None else None,
                           **({"ref": p.ref} if p.ref is not None else {})}}

  def replace(self, **changes) -> "Triple":
    return dataclasses.replace(self, **changes)


# NUL and every character str.splitlines() breaks on.
_FORBIDDEN_CHARS = frozenset("\x00\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _has_forbidden_chars(v) -> bool:
  return isinstance(v, str) and not _FORBIDDEN_CHARS.isdisjoint(v)


def _triple_problems(t: Triple) -> list[str]:
  problems = []
  for name in ("subject", "relation", "object"):
    v = getattr(t, name)
    if not isinstance(v, str) or not v.strip():
      problems.append(f"{name} must be a non-empty string, got {v!r}")
  for name in ("subject", "relation", "object", "source"):
    if _has_forbidden_chars(getattr(t, name)):
      problems.append(f"{name} must not contain line breaks or NUL, got {getattr(t, name)!r}")
  c = t.confidence
  if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) \
      or not 0.0 <= c <= 1.0:
    problems.append(f"confidence must be a number in [0, 1], got {c!r}")
  if not isinstance(t.source, str) or not t.source:
    problems.append(f"source must be a non-empty string, got {t.source!r}")
  p = t.provenance
  if not isinstance(p, Provenance):
    problems.append(f"provenance must be a Provenance, got {type(p).__name__}")
    return problems
  if not isinstance(p.instance, str):
    problems.append(f"provenance.instance must be a string, got {p.instance!r}")
  if p.ref is not None and not isinstance(p.ref, str):
    problems.append(f"provenance.ref must be a string or null, got {p.ref!r}")
  for name in ("instance", "ref"):
    if _has_forbidden_chars(getattr(p, name)):
      problems.append(f"provenance.{name} must not contain line breaks or NUL, got "
                      f"{getattr(p, name)!r}")
  if p.region is not None and (len(p.region) != 4 or not all(
      isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
      for x in p.region) or p.region[2] < 0 or p.region[3] < 0):
    problems.append(f"provenance.region must be [x, y, w, h] finite numbers with w, h >= 0, "
                    f"got {p.region!r}")
  if p.span is not None and (len(p.span) != 2 or not all(
      isinstance(x, int) and not isinstance(x, bool) for x in p.span)
                             or not 0 <= p.span[0] <= p.span[1]):
    problems.append(f"provenance.span must be [start, end] ints with 0 <= start <= end, "
                    f"got {p.span!r}")
  return problems


_TRIPLE_KEYS = {"subject", "relation", "object", "confidence", "source", "provenance"}
_PROVENANCE_KEYS = {"instance", "region", "span", "ref"}


def triple_from_json(record) -> Triple:
  """Builds a Triple from a decoded JSON record; raises TripleFormatError saying what is wrong."""
  if not isinstance(record, dict):
    raise TripleFormatError(f"expected a JSON object, got {type(record).__name__}")
  missing = {"subject", "relation", "object"} - record.keys()
  if missing:
    raise TripleFormatError(f"missing key(s) {sorted(missing)}")
  unknown = record.keys() - _TRIPLE_KEYS
  if unknown:
    raise TripleFormatError(f"unknown key(s) {sorted(unknown)}; expected {sorted(_TRIPLE_KEYS)}")
  prov = record.get("provenance") or {}
  if not isinstance(prov, dict):
    raise TripleFormatError(f"provenance must be an object, got {type(prov).__name__}")
  unknown = prov.keys() - _PROVENANCE_KEYS
  if unknown:
    raise TripleFormatError(
        f"unknown provenance key(s) {sorted(unknown)}; expected {sorted(_PROVENANCE_KEYS)}")
  for name in ("region", "span"):
    if prov.get(name) is not None and not isinstance(prov[name], list):
      raise TripleFormatError(f"provenance.{name} must be a list, got {prov[name]!r}")
  region, span = prov.get("region"), prov.get("span")
  return Triple(
      subject=record["subject"], relation=record["relation"], object=record["object"],
      confidence=record.get("confidence", 1.0), source=record.get("source", "scene"),
      provenance=Provenance(instance=prov.get("instance", ""),
                            region=tuple(region) if region is not None else None,
                            span=tuple(span) if span is not None else None,
                            ref=prov.get("ref")))


@dataclasses.dataclass
class ReadReport:
  """What a lenient read kept and skipped; `errors` holds one message per skipped record."""
  path: str
  read: int = 0
  skipped: int = 0
  errors: list[str] = dataclasses.field(default_factory=list)

  def reject(self, message: str, strict: bool):
    """A bad record: raises `TripleFormatError(message)` when strict, else counts it."""
    if strict:
      raise TripleFormatError(message) from None
    self.skipped += 1
    self.errors.append(message)


# What reading a damaged .gz raises: a bad header, a stream cut short, corrupt deflate data.
GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


def _open_bytes(path: pathlib.Path):
  return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _decode_json(raw: bytes, path, what: str, lineno: int | None = None):
  """One JSON value from raw bytes (a whole file, or line `lineno` of one); TripleFormatError
  naming the file and line on any bad byte."""
  def where(line_in_raw: int) -> str:
    return f"{path}:{lineno if lineno is not None else line_in_raw}"

  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    raise TripleFormatError(f"{where(line)}: not valid UTF-8 (byte {raw[e.start:e.start + 1]!r} "
                            f"at offset {e.start}); expected UTF-8 text") from None
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise TripleFormatError(f"{where(e.lineno)}: not a valid JSON {what}: {e.msg} (column "
                            f"{e.colno})") from None
  except RecursionError:
    raise TripleFormatError(f"{path}{'' if lineno is None else f':{lineno}'}: the JSON {what} "
                            "is nested too deeply to read") from None


def iter_jsonl(path, strict: bool = True, report: ReadReport | None = None,
               what: str = "record") -> Iterator[tuple[int, dict]]:
  """Yields (line number, decoded object) from a JSONL(.gz) file; blank lines are ignored.

  A line that is not UTF-8 or not valid JSON, and damaged gzip data (which ends the read),
  raise (strict) or are counted in `report` (lenient)."""
  path = pathlib.Path(path)
  report = report if report is not None else ReadReport(str(path))
  lineno = 0
  with _open_bytes(path) as f:
    lines = iter(f)
    while True:
      try:
        raw = next(lines)
      except StopIteration:
        return
      except GZIP_ERRORS as e:
        report.reject(f"{path}:{lineno + 1}: truncated or corrupt gzip data ({e}); nothing "
                      f"after line {lineno} can be read", strict)
        return
      lineno += 1
      if not raw.strip():
        continue
      try:
        record = _decode_json(raw, path, what, lineno)
      except TripleFormatError as e:
        report.reject(str(e), strict)
        continue
      yield lineno, record


def read_triples_jsonl(path, strict: bool = True) -> tuple[list[Triple], ReadReport]:
  """Reads a JSONL(.gz) file of triples. Returns (triples, report)."""
  report = ReadReport(str(path))
  records = ((f"{path}:{lineno}", record)
             for lineno, record in iter_jsonl(path, strict, report, what="triple"))
  return _parse_records(records, report, strict), report


def _parse_records(records, report: "ReadReport", strict: bool) -> list[Triple]:
  """Triples from (where, record) pairs; a bad record is rejected (raised when strict, else
  counted in `report` under `where`) and every good one kept."""
  triples = []
  for where, record in records:
    try:
      triples.append(triple_from_json(record))
    except TripleFormatError as e:
      report.reject(f"{where}: {e}", strict)
    else:
      report.read += 1
  return triples


def read_triples_json(path, strict: bool = True) -> tuple[list[Triple], ReadReport]:
  """Reads a JSON file holding a list of triples (or {"triples": [...]})."""
  path = pathlib.Path(path)
  report = ReadReport(str(path))
  try:
    with _open_bytes(path) as f:
      raw = f.read()
  except GZIP_ERRORS as e:
    raise TripleFormatError(f"{path}: truncated or corrupt gzip data ({e})") from None
  data = _decode_json(raw, path, "triple file")
  if isinstance(data, dict) and "triples" in data:
    data = data["triples"]
  if not isinstance(data, list):
    raise TripleFormatError(f"{path}: expected a list of triples or {{\"triples\": [...]}}, "
                            f"got {type(data).__name__}")
  records = ((f"{path}: triples[{i}]", record) for i, record in enumerate(data))
  return _parse_records(records, report, strict), report


def read_triples(path, strict: bool = True) -> tuple[list[Triple], ReadReport]:
  """Reads triples from `.jsonl`, `.jsonl.gz` or `.json` (chosen by the file name)."""
  name = pathlib.Path(path).name
  if name.endswith(".jsonl") or name.endswith(".jsonl.gz"):
    return read_triples_jsonl(path, strict)
  if name.endswith(".json") or name.endswith(".json.gz"):
    return read_triples_json(path, strict)
  raise TripleFormatError(f"{path}: unknown triple file type; expected .jsonl, .jsonl.gz or .json")


def dumps(record) -> str:
  """Compact, key-ordered JSON: equal records give equal bytes."""
  return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def write_triples(path, triples: Iterable[Triple]) -> int:
  """Writes triples as JSONL (`.jsonl`) or a JSON list (`.json`), atomically (a failed write
  keeps the previous file); returns how many were written."""
  path = pathlib.Path(path)
  triples = list(triples)
  for i, t in enumerate(triples):
    if not isinstance(t, Triple):
      raise TypeError(f"write_triples({path}): item {i} is a {type(t).__name__}, not a Triple")
  if path.name.endswith(".json"):
    text = "[" + ",\n".join(dumps(t.to_json()) for t in triples) + "]\n"
  elif path.name.endswith(".jsonl"):
    text = "".join(dumps(t.to_json()) + "\n" for t in triples)
  else:
    raise TripleFormatError(f"{path}: unknown triple file type; expected .jsonl or .json")
  atomic.atomic_write_text(path, text)
  return len(triples)
