"""Atomic claims of an answer (`claims_for`, `split_claims`): sentences cut at real sentence ends
(abbreviations, ellipses and quotes respected), then at connectors joining two clauses; the
claims verification scores (pipeline/verify.py)."""

from __future__ import annotations

import re

# Abbreviations whose trailing period never ends a sentence (compared lower-case, without the
# period). Handled apart: "etc." ends a sentence before a capitalised word, "No." unless a
# number follows ("No. 5").
ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof sr jr st mt ft vs e.g i.e cf al approx ca nos fig figs vol pp inc ltd co
    corp dept est jan feb mar apr jun jul aug sep sept oct nov dec
""".split())
# Verb cues for `_is_clause`: auxiliaries, copulas, modals and their contractions.
AUXILIARIES = frozenset("""
    is are was were am be been being has have had do does did can could will would shall should
    may might must isn't aren't wasn't weren't hasn't haven't hadn't doesn't don't didn't can't
    cannot couldn't won't wouldn't shouldn't it's there's that's he's she's they're we're i'm
    you're
""".split())
# Common -s words that are not verbs (the -s cue of `_is_clause` skips them).
NOT_VERBS = frozenset("this thus always perhaps towards sometimes whereas besides yes".split())
# Connectors that may join two coordinated clauses inside one sentence.
CONNECTORS = re.compile(r";\s+|,\s+(?:and|but)\s+", re.IGNORECASE)
# A sentence-ending candidate: terminal punctuation (or an ellipsis), any closing quotes or
# brackets, whitespace, then what may start a sentence (capital, digit, opening quote/bracket).
_END = re.compile(r"(\.\.\.|…|[.!?]+)([\"'”’)\]]*)\s+(?=[A-Z0-9\"'“‘(\[])")
_WORD_BEFORE = re.compile(r"(\S+)$")


def _inside_quote(text: str, pos: int) -> bool:
  """Whether `pos` is inside an open double quote (straight or curly) of `text`."""
  before = text[:pos]
  return before.count('"') % 2 == 1 or before.count("“") > before.count("”")


def _is_boundary(text: str, m: re.Match) -> bool:
  punct, closing = m.group(1), m.group(2)
  if _inside_quote(text, m.start()) and not closing:
    return False  # a full stop inside a quotation does not end the outer sentence
  if punct != ".":
    return True  # "!", "?", "?!", ellipses
  word = _WORD_BEFORE.search(text[:m.start()])
  word = word.group(1).lstrip("\"'“‘([") if word else ""
  nxt = text[m.end():m.end() + 1]
  if word.lower() == "etc":
    return nxt.isupper()
  if word.lower() == "no":
    return not nxt.isdigit()
  if word.lower() in ABBREVIATIONS:
    return False
  # initials and initialisms: "J. K. Rowling", "U.S. Army" (capitals, dotted), but not "I."
  return word == "I" or not re.fullmatch(r"(?:[A-Z]\.)*[A-Z]", word)


def _sentences(text: str) -> list[str]:
  out, start = [], 0
  for m in _END.finditer(text):
    if _is_boundary(text, m):
      out.append(text[start:m.end()].strip())
      start = m.end()
  out.append(text[start:].strip())
  return [s for s in out if s]


def _words(text: str) -> list[str]:
  return [w.strip(".,;:!?\"'“”‘’()[]").lower() for w in text.split()]


def _is_clause(text: str) -> bool:
  """A heuristic full clause: at least 3 words, no comma (a comma on a side is most often a list
  or a parenthesis: do not split there), and a verb cue: an auxiliary / copula / modal
  anywhere, or a word of 4+ letters ending in -s or -ed (not -ss, -us, -is, nor `NOT_VERBS`)
  that is neither the side's first nor its last word ("the woman wears a hat"; not "three small
  horses", whose -s word is last). Errs towards not splitting: "the dog runs" (verb last, no
  auxiliary) is not recognised, so it stays joined to its neighbour, which is safe."""
  words = _words(text)
  if len(words) < 3 or "," in text:
    return False
  if any(w in AUXILIARIES for w in words):
    return True
  return any(len(w) > 3 and w.endswith(("s", "ed")) and not w.endswith(("ss", "us", "is"))
             and w not in NOT_VERBS for w in words[1:-1])


def _clauses(sentence: str) -> list[str]:
  """Splits a sentence at "; ", ", and ", ", but " where the text on both sides of the connector
  (up to the neighbouring connectors) is a full clause (`_is_clause`); the connector is
  dropped. Left to right: a side that is not a clause stays joined to its neighbour."""
  parts, start = [], 0
  for m in CONNECTORS.finditer(sentence):
    left = sentence[start:m.start()]
    nxt = CONNECTORS.search(sentence, m.end())
    right = sentence[m.end():nxt.start() if nxt else len(sentence)]
    if _is_clause(left) and _is_clause(right):
      parts.append(left.strip())
      start = m.end()
  parts.append(sentence[start:].strip())
  return [p for p in parts if p]


def split_claims(text: str) -> list[str]:
  """Atomic claims of an answer: its sentences, each cut into coordinated full clauses.

  Sentences end at ".", "!", "?" or an ellipsis (with any closing quotes) followed by
  whitespace and a capital, digit or opening quote. A period does not end a sentence after an
  abbreviation (`ABBREVIATIONS`: "Dr.", "e.g.", "No. 5", ...), an initial or dotted initialism
  ("J. K.", "U.S."), inside a double-quoted passage, or inside a number ("3.5 m", "$1,200.50":
  no whitespace follows). "etc." ends a sentence only before a capitalised word. Clauses: see
  `_clauses` (noun lists such as "red and white" or "red, white, and blue" are never split).
  Empty or whitespace-only text gives [].
  """
  return [c for s in _sentences(text.strip()) for c in _clauses(s)]


def claims_for(question: str, answer: str) -> list[str]:
  """The claims of `answer` to verify.

  A sentence answer (more than one claim from `split_claims`, or one claim that is a full
  clause, `_is_clause`: "The horse is in front of a tree.") gives `split_claims(answer)`. A
  short answer without sentence structure ("tree", "two cats", "a wooden fence.") cannot be
  judged alone, so it becomes one self-contained claim
  "Question: {question} Answer: {answer}". An empty answer gives [].
  """
  answer = answer.strip()
  claims = split_claims(answer)
  if len(claims) > 1 or (claims and _is_clause(claims[0])):
    return claims
  return [f"Question: {question.strip()} Answer: {answer}"] if answer else []
