"""Evidence given to the decoder as text (Flat-RAG): triples verbalised one per line, or a
user's evidence file (plain text, or triples JSONL read with the strict triple reader)."""

import os
import pathlib
from typing import Iterable

from graphloom_jax.graph.triples import Triple, read_triples_jsonl


def verbalize_lines(triples: Iterable[Triple]) -> str:
  """One '- subject relation object' line per triple, in the given order."""
  return "\n".join(f"- {t.subject} {t.relation} {t.object}" for t in triples)


def read_evidence(path: str | os.PathLike) -> str:
  """A `.jsonl` file of triples (verbalised) or any other text file (used as it is)."""
  path = pathlib.Path(path)
  if not path.exists():
    raise FileNotFoundError(f"evidence file not found: {path}")
  if path.suffix == ".jsonl":
    triples, _ = read_triples_jsonl(path)
    if not triples:
      raise ValueError(f"evidence file {path} holds no triples")
    return verbalize_lines(triples)
  text = path.read_text().strip()
  if not text:
    raise ValueError(f"evidence file {path} is empty")
  return text
