"""Canonical entity names: normalisation, singularisation with WordNet's morphy rules, an alias
table, and merging of duplicate triples.

canonical(mention):
  1. normalise: lowercase, "_" -> " ", whitespace folded, surrounding punctuation and a leading
     article (a / an / the) removed;
  2. alias table lookup (exact, after normalisation);
  3. singularise the head (last) word with WordNet's noun morphology (morphy): the exception
     list noun.exc first, then the detachment rules
       -s -> "", -ses -> -s, -xes -> -x, -zes -> -z, -ches -> -ch, -shes -> -sh, -men -> -man,
       -ies -> -y
     keeping only candidates that are noun lemmas; words ending in "ss" or of <= 2 letters are
     left alone, "-ful" compounds are singularised before the suffix ("boxesful" -> "boxful")
     as WordNet does. Unlike WordNet's morphy, which also returns the word itself when it is a
     lemma, a plural that is itself a lemma still maps to its singular ("glasses" -> "glass",
     "jeans" -> "jean"): the Visual Genome vocabulary is singularised the same way. Add an alias
     to keep a plural;
  4. alias table lookup again on the singular.
The exception list and the lemma set come from graphloom_jax/data/resources/wordnet/ (generated
from WordNet 3.0 by launch/build_wordnet_resources.py).
"""

from __future__ import annotations

import functools
import gzip
import json
import pathlib
import re
from typing import Iterable

from graphloom_jax.graph.triples import Triple, TripleFormatError

WORDNET_RESOURCES = pathlib.Path(__file__).resolve().parents[1] / "data" / "resources" / \
    "wordnet"
NOUN_RULES = (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"),
              ("shes", "sh"), ("men", "man"), ("ies", "y"))
ARTICLES = ("a", "an", "the")


def normalize(text: str) -> str:
  """Lowercase, underscores to spaces, whitespace folded, edge punctuation and article removed
  (a name that is only punctuation, such as the song title ".", keeps its punctuation)."""
  folded = re.sub(r"\s+", " ", text.replace("_", " ").lower()).strip()
  t = folded.strip(" .,;:!?\"'()[]{}") or folded
  words = t.split(" ")
  if len(words) > 1 and words[0] in ARTICLES:
    t = " ".join(words[1:])
  return t


class Morphy:
  """WordNet's noun morphology over an exception list and a lemma set."""

  def __init__(self, exceptions: dict[str, tuple[str, ...]], lemmas: set[str]):
    self.exceptions = exceptions
    self.lemmas = lemmas

  @classmethod
  def load(cls, folder=WORDNET_RESOURCES) -> "Morphy":
    folder = pathlib.Path(folder)
    exceptions = {}
    path = folder / "noun.exc"
    with open(path, encoding="utf-8") as f:
      for lineno, line in enumerate(f, start=1):
        words = line.split()
        if len(words) < 2:
          raise TripleFormatError(f"{path}:{lineno}: expected 'inflected base [base ...]'")
        exceptions[words[0]] = tuple(words[1:])
    lemma_path = folder / "noun_lemmas.txt.gz"
    if lemma_path.exists():
      with gzip.open(lemma_path, "rt", encoding="utf-8") as f:
        lemmas = {line.strip() for line in f if line.strip()}
    else:
      with open(folder / "index.noun", encoding="utf-8") as f:
        lemmas = {line.split(" ", 1)[0] for line in f if not line.startswith("  ")}
    return cls(exceptions, lemmas)

  def base_forms(self, word: str) -> list[str]:
    """Base forms of a noun (underscored lemma form), as WordNet's morphstr finds them."""
    w = word.replace(" ", "_")
    if w in self.exceptions:
      return list(self.exceptions[w])
    if w.endswith("ful") and len(w) > 3:
      return [b + "ful" for b in self.base_forms(w[:-3]) if b + "ful" in self.lemmas]
    if w.endswith("ss") or len(w) <= 2:
      return []
    out = []
    for suffix, ending in NOUN_RULES:
      if w.endswith(suffix):
        cand = w[: len(w) - len(suffix)] + ending
        if cand and cand in self.lemmas and cand not in out:
          out.append(cand)
    return out

  def singular(self, word: str) -> str:
    """The singular of a (possibly multi-word) noun phrase: its head word is singularised."""
    key = word.replace(" ", "_")
    if key in self.exceptions:
      return self.exceptions[key][0].replace("_", " ")
    words = word.split(" ")
    bases = self.base_forms(words[-1])
    if bases:
      words[-1] = bases[0].replace("_", " ")
    return " ".join(words)


@functools.lru_cache(maxsize=1)
def default_morphy() -> Morphy:
  return Morphy.load()


def load_aliases(path) -> dict[str, str]:
  """Reads an alias table: JSON {"alias": "canonical"} or TSV lines `alias<TAB>canonical`."""
  path = pathlib.Path(path)
  if path.suffix == ".json":
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in data.items()):
      raise TripleFormatError(f"{path}: expected a JSON object of alias -> canonical strings")
    return data
  out = {}
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      if not line.strip() or line.startswith("#"):
        continue
      cols = line.rstrip("\n").split("\t")
      if len(cols) != 2 or not cols[0].strip() or not cols[1].strip():
        raise TripleFormatError(f"{path}:{lineno}: expected 'alias<TAB>canonical', got {line!r}")
      out[cols[0]] = cols[1]
  return out


class Canonicalizer:
  """Maps entity mentions to canonical names (see the module docstring)."""

  def __init__(self, aliases: dict[str, str] | None = None, morphy: Morphy | None = None,
               singularize: bool = True):
    self.aliases = {normalize(k): normalize(v) for k, v in (aliases or {}).items()}
    self.morphy = morphy if morphy is not None or not singularize else default_morphy()
    self.singularize = singularize
    self._cache: dict[str, str] = {}

  def __call__(self, mention: str) -> str:
    if mention not in self._cache:
      t = normalize(mention)
      if t in self.aliases:
        self._cache[mention] = self.aliases[t]
      else:
        if self.singularize and t:
          t = self.morphy.singular(t)
        self._cache[mention] = self.aliases.get(t, t)
    return self._cache[mention]

  def triple(self, t: Triple) -> Triple:
    return t.replace(subject=self(t.subject), object=self(t.object),
                     relation=re.sub(r"\s+", " ", t.relation.lower()).strip())


def merge_duplicates(triples: Iterable[Triple]) -> list[Triple]:
  """One triple per (subject, relation, object, instance): the most confident (ties: the smallest
  sort key), placed where the first duplicate was."""
  best: dict[tuple, Triple] = {}
  for t in triples:
    key = t.key() + (t.provenance.instance,)
    old = best.get(key)
    if old is None or (-t.confidence, t.sort_key()) < (-old.confidence, old.sort_key()):
      best[key] = t
  return list(best.values())


def canonicalize(triples: Iterable[Triple], canonicalizer: Canonicalizer | None = None
                 ) -> list[Triple]:
  """Canonical names for every triple, then duplicates merged."""
  c = canonicalizer or Canonicalizer()
  return merge_duplicates(c.triple(t) for t in triples)
