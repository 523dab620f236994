"""Reader for the official MultiModalQA (MMQA) JSONL files, and for the embedded benchmark,
which uses the same layout.

Files (plain `.jsonl` or `.jsonl.gz`, one JSON object per line):
  MMQA_<split>.jsonl   questions: qid, question, answers (absent in the test split), metadata
                       (type such as "Compose(TableQ,ImageListQ)", modalities, image_doc_ids,
                       text_doc_ids, table_id, intermediate_answers, ...), supporting_context.
  MMQA_texts.jsonl     {title, url, id, text}
  MMQA_tables.jsonl    {title, url, id, table: {table_name, header: [{column_name, metadata}],
                        table_rows: [[{text, links}]]}}
  MMQA_images.jsonl    {title, url, id, path}
Fields beyond these are kept in each record's `extra` (the embedded benchmark stores its
multiple-choice options, gold triples and scene graphs there).

Quirks of the real dev file (2,441 questions; a sample of its records is committed under
tests/data/mmqa_dev): 315 questions list the same supporting document more than once
(`Question.supporting_doc_ids` deduplicates, keeping order); one gold document is missing from
its question's candidate list (`Question.gold_outside_candidates`).

Records that would be read as wrong data are refused (strict) or skipped and reported (lenient):
a qid or document id seen earlier in the same file, answers that are NaN, inf or booleans, doc
ids that are null or empty, and tables whose rows do not match the header.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re

from graphloom_jax.graph.triples import (Provenance, ReadReport, Triple, TripleFormatError,
                                         iter_jsonl)


class MMQAFormatError(TripleFormatError):
  """An MMQA record that does not match the format; the message names file, line and qid."""


@dataclasses.dataclass(frozen=True)
class Answer:
  answer: str
  type: str = "string"
  modality: str = ""
  text_instances: tuple = ()
  table_indices: tuple[tuple[int, int], ...] = ()
  image_instances: tuple = ()


@dataclasses.dataclass
class Question:
  qid: str
  question: str
  answers: list[Answer]
  type: str
  modalities: list[str]
  image_doc_ids: list[str]
  text_doc_ids: list[str]
  table_id: str | None
  intermediate_answers: list[list[Answer]]
  supporting_context: list[tuple[str, str]]
  metadata: dict
  extra: dict

  @property
  def family(self) -> str:
    """'Compose', 'Compare', 'Intersect', or the single-modality type ('TextQ', 'ImageQ', ...)."""
    return self.type.split("(", 1)[0]

  @property
  def answer_texts(self) -> list[str]:
    return [a.answer for a in self.answers]

  @property
  def supporting_doc_ids(self) -> list[str]:
    """Supporting document ids, duplicates removed, in first-seen order."""
    return list(dict.fromkeys(doc for doc, _ in self.supporting_context))

  @property
  def candidate_doc_ids(self) -> list[str]:
    ids = self.image_doc_ids + self.text_doc_ids + ([self.table_id] if self.table_id else [])
    return list(dict.fromkeys(ids))

  @property
  def gold_outside_candidates(self) -> list[str]:
    cands = set(self.candidate_doc_ids)
    return [d for d in self.supporting_doc_ids if d not in cands]


@dataclasses.dataclass(frozen=True)
class TextDoc:
  id: str
  title: str
  url: str
  text: str
  extra: dict = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass(frozen=True)
class TableDoc:
  id: str
  title: str
  url: str
  name: str
  header: tuple[str, ...]
  rows: tuple[tuple[str, ...], ...]
  raw: dict = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass(frozen=True)
class ImageDoc:
  id: str
  title: str
  url: str
  path: str
  extra: dict = dataclasses.field(default_factory=dict, compare=False)


def _require(record: dict, key: str, kind, where: str):
  if key not in record:
    raise MMQAFormatError(f"{where}: missing key {key!r}")
  value = record[key]
  if not isinstance(value, kind):
    names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
    raise MMQAFormatError(f"{where}: {key!r} must be {names}, got {type(value).__name__}")
  return value


def _doc_id(value, where: str) -> str:
  if not isinstance(value, str) or not value:
    raise MMQAFormatError(f"{where} must be a non-empty string, got {value!r}")
  return value


def _answer(record, where: str) -> Answer:
  if not isinstance(record, dict):
    raise MMQAFormatError(f"{where}: an answer must be an object, got {type(record).__name__}")
  text = _require(record, "answer", (str, int, float), where)
  if isinstance(text, bool) or (isinstance(text, float) and not math.isfinite(text)):
    raise MMQAFormatError(f"{where}: answer must be a string or a finite number, got {text!r}")
  indices = record.get("table_indices") or []
  try:
    indices = tuple((int(r), int(c)) for r, c in indices)
  except (TypeError, ValueError):
    raise MMQAFormatError(f"{where}: table_indices must be [[row, col], ...], got "
                          f"{record.get('table_indices')!r}") from None
  return Answer(str(text), record.get("type", "string"), record.get("modality", ""),
                tuple(record.get("text_instances") or ()), indices,
                tuple(record.get("image_instances") or ()))


_QUESTION_KEYS = {"qid", "question", "answers", "metadata", "supporting_context"}


def question_from_json(record, where: str) -> Question:
  if not isinstance(record, dict):
    raise MMQAFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
  qid = _require(record, "qid", str, where)
  where = f"{where} (qid {qid})"
  text = _require(record, "question", str, where)
  meta = _require(record, "metadata", dict, where)
  answers = [_answer(a, f"{where} answers[{i}]")
             for i, a in enumerate(record.get("answers") or [])]
  inter = []
  for i, group in enumerate(meta.get("intermediate_answers") or []):
    group = group if isinstance(group, list) else [group]
    inter.append([_answer(a, f"{where} intermediate_answers[{i}]") for a in group])
  support = []
  for i, s in enumerate(record.get("supporting_context") or []):
    if not isinstance(s, dict) or "doc_id" not in s:
      raise MMQAFormatError(f"{where}: supporting_context[{i}] must be {{doc_id, doc_part}}, "
                            f"got {s!r}")
    support.append((_doc_id(s["doc_id"], f"{where}: supporting_context[{i}].doc_id"),
                    s.get("doc_part", "")))
  qtype = _require(meta, "type", str, f"{where} metadata")
  for key in ("image_doc_ids", "text_doc_ids", "modalities"):
    if not isinstance(meta.get(key, []), list):
      raise MMQAFormatError(f"{where}: metadata.{key} must be a list")
  for key in ("image_doc_ids", "text_doc_ids"):
    for i, doc in enumerate(meta.get(key, [])):
      _doc_id(doc, f"{where}: metadata.{key}[{i}]")
  if meta.get("table_id") is not None and not isinstance(meta["table_id"], str):
    raise MMQAFormatError(f"{where}: metadata.table_id must be a string or null, got "
                          f"{meta['table_id']!r}")
  return Question(qid=qid, question=text, answers=answers, type=qtype,
                  modalities=list(meta.get("modalities", [])),
                  image_doc_ids=list(meta.get("image_doc_ids", [])),
                  text_doc_ids=list(meta.get("text_doc_ids", [])),
                  table_id=meta.get("table_id") or None, intermediate_answers=inter,
                  supporting_context=support, metadata=meta,
                  extra={k: v for k, v in record.items() if k not in _QUESTION_KEYS})


def text_from_json(record, where: str) -> TextDoc:
  if not isinstance(record, dict):
    raise MMQAFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
  doc_id = _require(record, "id", str, where)
  where = f"{where} (id {doc_id})"
  return TextDoc(doc_id, record.get("title", ""), record.get("url", ""),
                 _require(record, "text", str, where),
                 {k: v for k, v in record.items() if k not in ("id", "title", "url", "text")})


def image_from_json(record, where: str) -> ImageDoc:
  if not isinstance(record, dict):
    raise MMQAFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
  doc_id = _require(record, "id", str, where)
  where = f"{where} (id {doc_id})"
  return ImageDoc(doc_id, record.get("title", ""), record.get("url", ""),
                  _require(record, "path", str, where),
                  {k: v for k, v in record.items() if k not in ("id", "title", "url", "path")})


def table_from_json(record, where: str) -> TableDoc:
  if not isinstance(record, dict):
    raise MMQAFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
  doc_id = _require(record, "id", str, where)
  where = f"{where} (id {doc_id})"
  table = _require(record, "table", dict, where)
  header = _require(table, "header", list, f"{where} table")
  rows = _require(table, "table_rows", list, f"{where} table")
  try:
    names = tuple(h["column_name"] for h in header)
    cells = tuple(tuple(c["text"] for c in row) for row in rows)
  except (TypeError, KeyError):
    raise MMQAFormatError(f"{where}: header entries need 'column_name' and cells need "
                          f"'text'") from None
  for i, row in enumerate(cells):
    if len(row) != len(names):
      raise MMQAFormatError(f"{where}: table_rows[{i}] has {len(row)} cell(s), the header has "
                            f"{len(names)} columns")
    for j, cell in enumerate(row):
      if not isinstance(cell, str):
        raise MMQAFormatError(f"{where}: table_rows[{i}][{j}].text must be a string, got "
                              f"{cell!r}")
  return TableDoc(doc_id, record.get("title", ""), record.get("url", ""),
                  table.get("table_name", ""), names, cells, record)


def _read(path, parse, strict: bool, key: str):
  """Parsed records of a JSONL file; a record whose `key` (qid or id) appeared on an earlier
  line is rejected like any bad record (the earlier one is kept)."""
  report = ReadReport(str(path))
  out, first_line = [], {}
  for lineno, record in iter_jsonl(path, strict, report, what="MMQA record"):
    try:
      item = parse(record, f"{path}:{lineno}")
      value = getattr(item, "qid" if key == "qid" else "id")
      if value in first_line:
        raise MMQAFormatError(f"{path}:{lineno}: duplicate {key} {value!r} (first on line "
                              f"{first_line[value]})")
    except MMQAFormatError as e:
      if strict:
        raise
      report.skipped += 1
      report.errors.append(str(e))
    else:
      first_line[value] = lineno
      out.append(item)
      report.read += 1
  return out, report


def read_questions(path, strict: bool = True) -> tuple[list[Question], ReadReport]:
  return _read(path, question_from_json, strict, "qid")


def read_texts(path, strict: bool = True) -> tuple[list[TextDoc], ReadReport]:
  return _read(path, text_from_json, strict, "id")


def read_tables(path, strict: bool = True) -> tuple[list[TableDoc], ReadReport]:
  return _read(path, table_from_json, strict, "id")


def read_images(path, strict: bool = True) -> tuple[list[ImageDoc], ReadReport]:
  return _read(path, image_from_json, strict, "id")


def find_file(folder, stem: str) -> pathlib.Path | None:
  """`folder/stem.jsonl.gz` or `folder/stem.jsonl`, whichever exists."""
  for suffix in (".jsonl.gz", ".jsonl"):
    path = pathlib.Path(folder) / (stem + suffix)
    if path.exists():
      return path
  return None


@dataclasses.dataclass
class MMQA:
  """Questions of one split with whichever context files the folder holds (id -> document)."""
  questions: list[Question]
  texts: dict[str, TextDoc]
  tables: dict[str, TableDoc]
  images: dict[str, ImageDoc]
  reports: list[ReadReport]

  @classmethod
  def load(cls, folder, split: str = "dev", strict: bool = True) -> "MMQA":
    qpath = find_file(folder, f"MMQA_{split}")
    if qpath is None:
      raise FileNotFoundError(f"MMQA.load: no MMQA_{split}.jsonl(.gz) in {folder}")
    questions, qrep = read_questions(qpath, strict)
    reports = [qrep]
    docs = {}
    for name, reader in (("texts", read_texts), ("tables", read_tables),
                         ("images", read_images)):
      path = find_file(folder, f"MMQA_{name}")
      items, rep = reader(path, strict) if path is not None else ([], None)
      if rep is not None:
        reports.append(rep)
      docs[name] = {d.id: d for d in items}
    return cls(questions, docs["texts"], docs["tables"], docs["images"], reports)


# ------------------------------------------------------------------ instance graphs

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _clean(text: str) -> str:
  return " ".join(str(text).split())


def question_triples(q: Question, data: MMQA, text_sentences: int = 8,
                     table_rows: int = 30) -> list[Triple]:
  """The instance graph of an MMQA question: triples from the candidate documents q lists that
  `data` holds (one graph per question: MMQA's candidates are per question).

    images  "image k depicts TITLE" for the k-th candidate image (its Wikipedia title; the
            release's files hold no pixels)
    texts   "TITLE says SENTENCE" for the first `text_sentences` sentences of each text
    tables  "ROW KEY COLUMN CELL" for every cell of the first `table_rows` rows (the row key is
            the key column's cell, else the first cell), and "TITLE has table NAME"

  Nothing from the answers (text_instances, table indices, intermediate answers or answer
  entities) enters a graph."""
  out = []
  for k, doc in enumerate(q.image_doc_ids):
    image = data.images.get(doc)
    if image is not None and _clean(image.title):
      out.append(Triple(f"image {k + 1}", "depicts", _clean(image.title), source="scene",
                        provenance=Provenance(instance=q.qid, ref=f"MMQA_images:{doc}")))
  for doc in q.text_doc_ids:
    text = data.texts.get(doc)
    if text is None or not _clean(text.title):
      continue
    sentences = [s for s in (_clean(x) for x in _SENTENCE_END.split(text.text)) if s]
    for s in sentences[:text_sentences]:
      out.append(Triple(_clean(text.title), "says", s, source="text",
                        provenance=Provenance(instance=q.qid, ref=f"MMQA_texts:{doc}")))
  table = data.tables.get(q.table_id) if q.table_id else None
  if table is not None:
    title = _clean(table.title) or "the table"
    if _clean(table.name):
      out.append(Triple(title, "has table", _clean(table.name), source="table",
                        provenance=Provenance(instance=q.qid, ref=f"MMQA_tables:{table.id}")))
    key = _key_column(table)
    for r, row in enumerate(table.rows[:table_rows]):
      subject = _clean(row[key]) if key < len(row) else ""
      subject = subject or f"row {r + 1} of {title}"
      for c, cell in enumerate(row):
        cell = _clean(cell)
        if c == key or not cell or c >= len(table.header) or not _clean(table.header[c]):
          continue
        out.append(Triple(subject, _clean(table.header[c]), cell, source="table",
                          provenance=Provenance(instance=q.qid,
                                                ref=f"MMQA_tables:{table.id}:{r},{c}")))
  return out


def _key_column(table: TableDoc) -> int:
  for c, col in enumerate(table.raw.get("table", {}).get("header", [])):
    if isinstance(col, dict) and col.get("metadata", {}).get("is_key_column"):
      return c
  return 0
