"""Symbolic readers for path-annotated KG-QA (PathQuestion, WorldCup2014): no neural network, only
counting and following KB facts. They are the simplest baselines a learned result on these
benchmarks has to beat, and their oracle variant is the ceiling of path following over the KB.

Every reader starts from the question's topic entity (the path's first entity, written in the
question; every published system on these benchmarks is given it too) and follows one relation
per hop through the KB. Where a hop leads to several entities all are kept; the answer is the
first entity reached (KB file order), and the whole reached set is returned for inspection.

  oracle     follows the gold relation sequence: the ceiling of path following (it fails only
             where the gold relations from the topic reach several entities and the first is not
             an answer)
  lexicon    chooses the relation sequence by a relation lexicon counted on the train split:
             multinomial naive Bayes over the question's words w (lower-cased, the topic
             entity's mention removed). First the hop count,
               N = argmax_n log P(n) + sum_w log P(w | n),
             then, among the relation sequences of that length the KB allows from the topic
             (beam `beam` per hop), the one of highest
               sum_h [log P(r_h | h) + sum_w log P(w | r_h, h)],
             with P(w | y) = (c(w, y) + alpha) / (c(y) + alpha (|V| + 1)) counted on train. Hop
             counts range over those the train split holds.
  prior      answers, without reading the KB, the train split's most frequent answer among
             questions whose final gold relation is the question's (an oracle-informed prior:
             how much an answer-type prior alone explains)
  topic      answers the topic entity itself, reading nothing: right exactly where a path
             leads back to the entity the question names ("what is the tracks of recording of
             Believe 's tracks ?" -> Believe), a shortcut a model can learn by copying a name
             from the question
  one_hop    follows a single relation from the topic: the one that, on the train split's
             questions with the same final gold relation, most often reaches only gold answers
             (ties: the smallest relation name). Oracle-informed like the prior (it is told the
             final relation); it measures how many multi-hop questions a one-hop lookup answers,
             i.e. where the KB holds a direct fact equal to the path's composition

Conjunctive questions (WC-C: two paths that meet at the answer) are read per path, and the
answer is the first entity both paths reach (the first of the first path's when none is shared).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from typing import Sequence

_WORD = re.compile(r"[a-z0-9]+")
READERS = ("oracle", "lexicon", "prior", "topic", "one_hop")


def question_words(raw_question: str, topic: str) -> list[str]:
  """Lower-cased word tokens of a question with its topic entity's mention taken out."""
  text = raw_question.lower().replace(topic.lower(), " ")
  return _WORD.findall(text.replace("_", " "))


class KBIndex:
  """Outgoing facts per entity, in KB file order."""

  def __init__(self, facts: Sequence[tuple[str, str, str]]):
    self.out: dict[str, dict[str, list[str]]] = collections.defaultdict(dict)
    for s, r, o in facts:
      self.out[s].setdefault(r, [])
      if o not in self.out[s][r]:
        self.out[s][r].append(o)

  def follow(self, entities: Sequence[str], relation: str) -> list[str]:
    """Every entity reached from `entities` along `relation`, in order, once."""
    out: dict[str, None] = {}
    for e in entities:
      for o in self.out.get(e, {}).get(relation, ()):
        out.setdefault(o, None)
    return list(out)

  def relations(self, entities: Sequence[str]) -> list[str]:
    out: dict[str, None] = {}
    for e in entities:
      for r in self.out.get(e, {}):
        out.setdefault(r, None)
    return list(out)


def relation_sequence(path: Sequence[str]) -> tuple[str, ...]:
  return tuple(path[1::2])


@dataclasses.dataclass
class Lexicon:
  """Counts for the naive Bayes relation chooser (see the module docstring)."""
  alpha: float = 0.1
  hops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  hop_word: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  hop_words: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  relation: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  word: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  words_of: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  vocabulary: set = dataclasses.field(default_factory=set)

  @classmethod
  def fit(cls, questions, alpha: float = 0.1) -> "Lexicon":
    """Counts from questions with `raw_question` and `paths` (pathqa.Question)."""
    lex = cls(alpha=alpha)
    for q in questions:
      for path in q.paths:
        words = question_words(q.raw_question, path[0])
        rels = relation_sequence(path)
        lex.hops[len(rels)] += 1
        lex.hop_words[len(rels)] += len(words)
        for w in words:
          lex.hop_word[(w, len(rels))] += 1
        for h, r in enumerate(rels):
          lex.relation[(r, h)] += 1
          lex.words_of[(r, h)] += len(words)
          for w in words:
            lex.word[(w, r, h)] += 1
          lex.vocabulary.update(words)
    if not lex.hops:
      raise ValueError("Lexicon.fit: no questions given")
    return lex

  def _likelihood(self, counts, key, total: int, words: Sequence[str]) -> float:
    denominator = total + self.alpha * (len(self.vocabulary) + 1)
    return sum(math.log((counts[(w,) + key] + self.alpha) / denominator) for w in words)

  def hop_score(self, relation: str, h: int, words: Sequence[str]) -> float:
    n = sum(self.hops.values())
    prior = math.log((self.relation[(relation, h)] + self.alpha) / (n + self.alpha))
    return prior + self._likelihood(self.word, (relation, h), self.words_of[(relation, h)], words)

  def hop_count(self, words: Sequence[str]) -> int:
    total = sum(self.hops.values())
    return max(sorted(self.hops), key=lambda n: math.log(self.hops[n] / total) + self._likelihood(
        self.hop_word, (n,), self.hop_words[n], words))


@dataclasses.dataclass(frozen=True)
class Reading:
  answer: str | None          # the first entity reached (KB id), None when nothing is reached
  reached: tuple[str, ...]    # every entity the chosen relations reach
  relations: tuple[tuple[str, ...], ...]   # the relation sequence followed, per path


def _combine(per_path: list[list[str]]) -> list[str]:
  if len(per_path) == 1:
    return per_path[0]
  shared = [e for e in per_path[0] if all(e in p for p in per_path[1:])]
  return shared or per_path[0]


def _most_frequent(counts: dict[str, collections.Counter]) -> dict[str, str]:
  """key -> its most frequent item; ties by the item, for determinism."""
  return {k: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for k, c in counts.items()}


class PathReader:
  """The readers over one KB (see the module docstring); `fit` counts the train split."""

  def __init__(self, facts: Sequence[tuple[str, str, str]], beam: int = 8):
    self.index = KBIndex(facts)
    self.beam = beam
    self.lexicon: Lexicon | None = None
    self.answer_prior: dict[str, str] = {}
    self.one_hop: dict[str, str] = {}

  def fit(self, train_questions, alpha: float = 0.1) -> "PathReader":
    self.lexicon = Lexicon.fit(train_questions, alpha)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for q in train_questions:
      counts[q.path[-2]][q.answer_ids[0]] += 1
    # most frequent answer per final relation; ties by the answer id, for determinism
    self.answer_prior = _most_frequent(counts)
    direct: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for q in train_questions:
      topic, gold = q.path[0], set(q.answer_ids)
      for r in self.index.relations([topic]):
        reached = self.index.follow([topic], r)
        if set(reached) <= gold:  # relations() lists only relations that reach something
          direct[q.path[-2]][r] += 1
    self.one_hop = _most_frequent(direct)
    return self

  def _choose(self, words: list[str], topic: str) -> tuple[str, ...]:
    lex = self.lexicon
    beams = [((), 0.0, [topic])]
    for h in range(lex.hop_count(words)):
      grown = [(rels + (r,), score + lex.hop_score(r, h, words), self.index.follow(reached, r))
               for rels, score, reached in beams for r in self.index.relations(reached)]
      grown.sort(key=lambda b: (-b[1], b[0]))
      if not grown:
        break
      beams = grown[:self.beam]
    return beams[0][0]

  def read(self, q, reader: str) -> Reading:
    if reader not in READERS:
      raise ValueError(f"PathReader: unknown reader {reader!r}; expected one of {READERS}")
    if reader == "prior":
      answer = self.answer_prior.get(q.path[-2])
      return Reading(answer, () if answer is None else (answer,), ())
    if reader == "topic":
      return Reading(q.path[0], (q.path[0],), ())
    if reader == "one_hop":
      relation = self.one_hop.get(q.path[-2])
      if relation is None:
        return Reading(None, (), ())
      reached = self.index.follow([q.path[0]], relation)
      return Reading(reached[0] if reached else None, tuple(reached), ((relation,),))
    if reader == "lexicon" and self.lexicon is None:
      raise ValueError("PathReader: the lexicon reader needs fit(train questions) first")
    per_path, sequences = [], []
    for path in q.paths:
      rels = relation_sequence(path) if reader == "oracle" else \
          self._choose(question_words(q.raw_question, path[0]), path[0])
      reached = [path[0]]
      for r in rels:
        reached = self.index.follow(reached, r)
      per_path.append(reached)
      sequences.append(rels)
    reached = _combine(per_path)
    return Reading(reached[0] if reached else None, tuple(reached), tuple(sequences))
