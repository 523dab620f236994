"""A non-learned symbolic reader: answers a structured query by following its relations through a
triple set (an instance graph). It is the ceiling that a perfect question parser over the same
evidence reaches, and the simplest baseline a graph-memory result has to beat.

A query is a list of claims; a claim is a list of alternatives; an alternative is a conjunction
of [subject, relation, object] atoms whose names may be variables ("?x" the answer, other "?"
names existential), e.g. "what is the thing the man holds made of?":
  [[[["man", "holding", "?y"], ["?y", "made of", "?x"]]]]
The relation "kind of" is the transitive closure of "is a". Names are compared after
`graph.canonical` normalisation; predicates in EQUIVALENT (wears = wearing, lying on = laying
on) count as one.

For multiple choice, `choose` returns the options that satisfy every claim (the candidates) and
each one's support, the best over its bindings of the weakest edge confidence it uses. Two
readers are scored from them (`expected_correct`):
  "lookup"      uniform among the candidates (among all options when there is none);
  "confidence"  the candidates of highest support, uniform among ties (the same fallback).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable, Iterator, Sequence

from graphloom_jax.graph.canonical import normalize
from graphloom_jax.graph.triples import Triple

ANSWER = "?x"
KIND_OF = "kind of"
IS_A = "is a"
EQUIVALENT = {"wears": "wearing", "lying on": "laying on"}
READERS = ("lookup", "confidence")


def is_a_closure(pairs) -> dict[str, frozenset]:
  """x -> every h with a chain x is a ... is a h, from (x, h) 'is a' pairs."""
  up = collections.defaultdict(set)
  for x, h in pairs:
    up[x].add(h)
  out = {}
  for x in list(up):
    seen, todo = set(), [x]
    while todo:
      for h in up.get(todo.pop(), ()):
        if h not in seen:
          seen.add(h)
          todo.append(h)
    out[x] = frozenset(seen)
  return out


def relation_key(relation: str) -> str:
  r = normalize(relation)
  return EQUIVALENT.get(r, r)


def _is_var(name: str) -> bool:
  return name.startswith("?")


class TripleIndex:
  """(subject, relation) -> {object: confidence} and its converse, over normalised names."""

  def __init__(self, triples: Iterable[Triple], name=normalize):
    self.name = name
    self.forward = collections.defaultdict(dict)  # (s, r) -> {o: conf}
    self.backward = collections.defaultdict(dict)  # (r, o) -> {s: conf}
    self.entities = set()
    for t in triples:
      s, r, o = name(t.subject), relation_key(t.relation), name(t.object)
      c = float(t.confidence)
      self.forward[(s, r)][o] = max(c, self.forward[(s, r)].get(o, 0.0))
      self.backward[(r, o)][s] = max(c, self.backward[(r, o)].get(s, 0.0))
      self.entities.update((s, o))
    self._kinds: dict[str, dict[str, float]] = {}

  def kinds(self, x: str) -> dict[str, float]:
    """Every h with a chain x is a ... is a h, and the chain's weakest confidence (best chain)."""
    if x not in self._kinds:
      best, todo = {}, [(x, 1.0)]
      while todo:
        y, c = todo.pop()
        for h, ch in self.forward.get((y, IS_A), {}).items():
          v = min(c, ch)
          if v > best.get(h, 0.0):
            best[h] = v
            todo.append((h, v))
      self._kinds[x] = best
    return self._kinds[x]

  def edges(self, s: str | None, r: str, o: str | None) -> Iterator[tuple[str, str, float]]:
    """(subject, object, confidence) of the edges matching an atom (None: a free name)."""
    if r == KIND_OF:
      subjects = [s] if s is not None else sorted(self.entities)
      for x in subjects:
        for h, c in self.kinds(x).items():
          if o is None or h == o:
            yield x, h, c
    elif s is not None:
      for obj, c in self.forward.get((s, r), {}).items():
        if o is None or obj == o:
          yield s, obj, c
    elif o is not None:
      for subj, c in self.backward.get((r, o), {}).items():
        yield subj, o, c
    else:
      for (subj, rel), objs in self.forward.items():
        if rel == r:
          for obj, c in objs.items():
            yield subj, obj, c


def _solve(index: TripleIndex, atoms: Sequence, binding: dict, support: float) -> Iterator[float]:
  if not atoms:
    yield support
    return
  s, r, o = atoms[0]
  fixed = lambda n: binding.get(n) if _is_var(n) else index.name(n)
  for subj, obj, c in index.edges(fixed(s), relation_key(r), fixed(o)):
    new = dict(binding)
    if _is_var(s):
      new[s] = subj
    if _is_var(o):
      if o in new and new[o] != obj:
        continue
      new[o] = obj
    yield from _solve(index, atoms[1:], new, min(support, c))


def claim_support(index: TripleIndex, claim: Sequence, answer: str) -> float:
  """The best support of `claim` with ?x bound to `answer` (0.0: it does not hold)."""
  best = 0.0
  for alternative in claim:
    for support in _solve(index, [tuple(a) for a in alternative], {ANSWER: index.name(answer)},
                          1.0):
      best = max(best, support)
  return best


@dataclasses.dataclass(frozen=True)
class Choice:
  candidates: tuple[int, ...]  # options that satisfy every claim
  support: tuple[float, ...]  # per option: min over claims of its support (0: not a candidate)

  def pool(self, reader: str = "lookup") -> list[int]:
    """The options the reader picks from uniformly (module docstring)."""
    if reader not in READERS:
      raise ValueError(f"reader={reader!r}; expected one of {READERS}")
    pool = list(self.candidates) or list(range(len(self.support)))
    if reader == "confidence" and self.candidates:
      top = max(self.support[i] for i in pool)
      pool = [i for i in pool if self.support[i] == top]
    return pool

  def expected_correct(self, gold: int, reader: str = "lookup") -> float:
    """The reader's expected multiple-choice accuracy on this question."""
    pool = self.pool(reader)
    return float(gold in pool) / len(pool)


def choose(claims: Sequence, options: Sequence[str], triples: Iterable[Triple] | TripleIndex
           ) -> Choice:
  """The options that satisfy every claim of the query over `triples` (module docstring)."""
  if not options:
    raise ValueError("lookup.choose: no options given")
  if not claims:
    raise ValueError("lookup.choose: the query has no claims")
  index = triples if isinstance(triples, TripleIndex) else TripleIndex(triples)
  support = tuple(min(claim_support(index, c, o) for c in claims) for o in options)
  return Choice(tuple(i for i, s in enumerate(support) if s > 0), support)


def answer(claims: Sequence, triples: Iterable[Triple] | TripleIndex) -> str | None:
  """Open answer: the ?x of highest support over every entity of the graph (None if none)."""
  index = triples if isinstance(triples, TripleIndex) else TripleIndex(triples)
  best, best_x = 0.0, None
  for x in sorted(index.entities):
    s = min(claim_support(index, c, x) for c in claims)
    if s > best:
      best, best_x = s, x
  return best_x
