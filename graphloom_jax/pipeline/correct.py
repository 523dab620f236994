"""Corrective retrieval (paper section 3.7): score the retrieved subgraph, and when the score is
below tau_eval take ONE corrective action, chosen by expected utility minus cost.

Evaluator (`RetrievalEvaluator`), for a question Q with embedding q and a subgraph of edges E
from a pool with entity names V; top = the top_k edges of E by cos(q, e), with cosines from the
pool's stored embeddings (so every subgraph of a pool is measured alike):
  relevance  = clip((m - floor) / (ceiling - floor), 0, 1),  m = mean cosine of `top`
               (0 when E is empty)
  mentions   = names in V found in lower-cased Q at word boundaries, longest name first, a
               match never overlapping an earlier one ("dining table" beats "table")
  coverage   = |mentions & nodes(E)| / |mentions|            (1 when Q mentions no name in V)
  reach      = 1 when bounded expansion expanded every endpoint n of `top`, i.e. E holds n's
               best min(d_max, deg(n)) pool edges by cos(q, .), else 0 (1 when E is empty).
               An unexpanded endpoint means the budget ran out before the evidence next to the
               best edges was taken (the alphabetical frontier order decides which nodes lose).
               Binary on purpose: on SceneKB validation a share-valued reach (mostly 0.75-0.85
               when it is not 1) never pulls a weighted mean below tau_eval
  score      = (w_rel * relevance + w_cov * coverage + w_reach * reach) / (w_rel + w_cov + w_reach)
  saturation = min(1, |E| / N_max)   (not in the score; the selector reads it)

Actions (each returns a new `Subgraph`; the input subgraph is never changed):
  expansion_boost       N_max' = ceil(boost_ratio * N_max); seeds and bounded expansion again
                        with the question embedding (the same K seeds, so round 1's edges come
                        back first), united with the subgraph's edges, cut to the top N_max' by
                        question score.
  query_reformulation   the configured query writer (any `QueryWriter`: decoder, template or
                        GRAIL) is called once on a `RoundOneContext` whose bridge_nodes are the
                        question's uncovered mentions followed by the subgraph's bridge nodes
                        (<= retrieval.bridge_nodes) and whose evidence is the subgraph's edges at
                        those nodes (else its best edges), best first, <= bridge_evidence; seeds
                        and expansion with the rewritten query, united with the subgraph's edges
                        and cut to the top N_max by the ORIGINAL question score (round 2's rule).
  verbalization_repair  every pool triple (in a pool of more than repair_max_rows: the
                        repair_max_rows nearest the question and those at the subgraph's
                        nodes, `repair_rows`) gets alternative verbalisations (`verbalisations`),
                        embedded in one call; the repaired score of a triple is the max cosine to
                        q over its original and alternative verbalisations; seeds and expansion
                        are run again on those scores, united with the subgraph's edges and cut
                        to the top N_max by repaired score. The result's `scores` are the
                        repaired scores (the evaluator still reads the original cosines).

Selector (`CorrectionSelector`), from the evaluator's components:
  gap_rel = 1 - relevance, gap_cov = 1 - coverage, gap_reach = 1 - reach, sat = saturation
  U(expansion_boost)      = sat * (gap_rel + gap_reach)   the budget was binding and the edges
                                                 are weak or their neighbours unexpanded: more
                                                 budget reaches further
  U(query_reformulation)  = gap_cov              the question names entities the subgraph
                                                 lacks: a query aimed at them
  U(verbalization_repair) = (1 - sat) * gap_rel + repair_coverage_share * gap_cov
                                                 weak edges although the budget was not
                                                 binding: the wording, not the reach, is wrong
  net(a) = U(a) - cost_weight * seconds(a),  seconds(a) = (prior_seconds[a] + sum of a's measured
  wall times) / (1 + runs of a); the action with the largest net utility is taken (ties: the
  order of ACTIONS).

`correct` never loops: it runs at most one action, and marks the subgraph it returns with
timings["correction"]; a subgraph that carries the mark is returned as it is.

Calibration (SceneKB validation, 296 questions, instance graphs of pipeline.instance, MiniLM,
K = 15, d_max = 5, N_max = 50; gold recall = share of q.extra["gold_triples"] in the subgraph):
  - relevance does not predict recall (correlation 0.08; recall 0.970 for the 31% of questions
    with relevance < 0.6 against 0.974) and coverage is 1 for all but 2 questions, so relevance
    + coverage alone flags 0-0.3% of questions. reach carries the signal: with equal weights,
    template second round: 48 questions (16.2%) fall below tau_eval, recall 0.938 against 0.980
    above; SmolLM2 decoder second round: 55 (18.6%), 0.921 against 0.980; no second round:
    2 (0.7%), 0.583 against 0.992.
  - every flagged subgraph had hit N_max, so the selector chose expansion_boost each time:
    recall of the flagged 0.938 -> 1.000 (template), 0.921 -> 1.000 (decoder), 0.583 -> 1.000
    (none), 0.5 ms each; all questions 0.973 -> 0.983, 0.969 -> 0.984, 0.990 -> 0.992.
  - forced on the same 48 flagged questions instead: query_reformulation (template writer)
    0.938 -> 0.931 (24 ms), verbalization_repair 0.938 -> 0.938 (1.7 s on 2 CPU cores).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import time
from typing import Mapping, Sequence

import numpy as np

from graphloom_jax.graph import canonical, kb
from graphloom_jax.graph.triples import Triple
from graphloom_jax.pipeline.types import Correction
from graphloom_jax.retrieval.subgraph import (BoundedRetriever, RoundOneContext, Subgraph,
                                              SubgraphConfig, TriplePool, bridge_nodes)

ACTIONS = ("expansion_boost", "query_reformulation", "verbalization_repair")
MARK = "correction"  # the timings key of a subgraph `correct` has returned


# --------------------------------------------------------------------------------------------
# Evaluator
# --------------------------------------------------------------------------------------------


def _unit(v) -> np.ndarray:
  v = np.asarray(v, np.float32)
  return v / max(float(np.linalg.norm(v)), 1e-12)


def _at_boundaries(text: str, by_lower: Mapping[str, list[str]]) -> set[str]:
  """The names of `by_lower` whose lower-cased form is a substring of `text` that starts and
  ends at word boundaries: O(len(text)^2) lookups instead of one scan per name."""
  word = [c.isalnum() or c == "_" for c in text]
  starts = [i for i in range(len(text)) if i == 0 or not word[i - 1]]
  ends = [j for j in range(1, len(text) + 1) if j == len(text) or not word[j]]
  found: set[str] = set()
  for i in starts:
    for j in ends:
      if j > i and text[i:j] in by_lower:
        found.update(by_lower[text[i:j]])
  return found


def entity_mentions(question: str, names, by_lower: Mapping[str, list[str]] | None = None
                    ) -> list[str]:
  """Names (as given) found in the lower-cased question at word boundaries, compared
  lower-cased, longest first, no two matches overlapping; in the order they occur.

  by_lower: `retrieval.subgraph.name_spellings(names)` (a pool's `spellings`), built once for
  many questions: only the names found at word boundaries are then tried, with the same
  result; a pool of a million facts is not scanned name by name for every question."""
  text = question.lower()
  if by_lower is not None:
    names = _at_boundaries(text, by_lower)
  taken: list[tuple[int, int]] = []
  found = []
  for name in sorted(set(names), key=lambda n: (-len(n), n)):
    low = name.lower()
    if low not in text:
      continue
    for m in re.finditer(r"(?<!\w)" + re.escape(low) + r"(?!\w)", text):
      if all(m.end() <= a or m.start() >= b for a, b in taken):
        taken.append((m.start(), m.end()))
        found.append((m.start(), name))
        break
  return [n for _, n in sorted(found)]


@dataclasses.dataclass(frozen=True)
class Evaluation:
  score: float
  relevance: float
  coverage: float
  reach: float
  saturation: float  # min(1, |E| / N_max)
  mentions: tuple[str, ...]  # pool entity names the question mentions
  missing: tuple[str, ...]  # mentions that are not subgraph nodes
  unexpanded: tuple[str, ...]  # endpoints of the top edges that expansion did not expand

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


class RetrievalEvaluator:
  """Scores a subgraph for a question in [0, 1] (formulas in the module docstring)."""

  def __init__(self, top_k: int, floor: float, ceiling: float, relevance_weight: float,
               coverage_weight: float, reach_weight: float):
    weights = (relevance_weight, coverage_weight, reach_weight)
    if top_k < 1 or ceiling <= floor or min(weights) < 0 or sum(weights) <= 0:
      raise ValueError(f"RetrievalEvaluator: need top_k >= 1, floor < ceiling and non-negative "
                       f"weights with a positive sum; got top_k={top_k}, floor={floor}, "
                       f"ceiling={ceiling}, weights={weights}")
    self.top_k = top_k
    self.floor = floor
    self.ceiling = ceiling
    self.weights = weights

  @classmethod
  def from_config(cls, config) -> "RetrievalEvaluator":
    e = config.correct
    return cls(e.relevance_top_k, e.relevance_floor, e.relevance_ceiling, e.relevance_weight,
               e.coverage_weight, e.reach_weight)

  def __call__(self, question: str, question_embedding: np.ndarray, subgraph: Subgraph,
               pool: TriplePool, retrieval: SubgraphConfig) -> Evaluation:
    """retrieval: the retriever's config (reads n_max and d_max)."""
    q = _unit(question_embedding)
    ids = list(subgraph.ids)
    top = pool.order(ids, pool.scores(q, ids))[:self.top_k] if ids else []
    relevance = float(np.clip((np.mean(pool.scores(q, top)) - self.floor) / (
        self.ceiling - self.floor), 0.0, 1.0)) if top else 0.0
    mentions = entity_mentions(question, pool.by_entity.keys(), pool.spellings)
    nodes = set(subgraph.nodes)
    missing = tuple(n for n in mentions if n not in nodes)
    coverage = 1.0 - len(missing) / len(mentions) if mentions else 1.0
    have = set(ids)
    ends = sorted({x for i in top for x in (pool.triples[i].subject, pool.triples[i].object)})
    unexpanded = []
    for n in ends:
      cand = pool.by_entity[n]
      if not have.issuperset(pool.order(cand, pool.scores(q, cand))[:retrieval.d_max]):
        unexpanded.append(n)
    reach = 0.0 if unexpanded else 1.0
    w = self.weights
    score = (w[0] * relevance + w[1] * coverage + w[2] * reach) / sum(w)
    return Evaluation(score, relevance, coverage, reach,
                      min(1.0, len(ids) / retrieval.n_max), tuple(mentions), missing,
                      tuple(unexpanded))


# --------------------------------------------------------------------------------------------
# Actions
# --------------------------------------------------------------------------------------------


def _merged(pool: TriplePool, subgraph: Subgraph, new_ids, rank_scores: np.ndarray, n_max: int,
            new_round: int, seconds: float, name: str, **fields) -> Subgraph:
  """The subgraph's edges united with `new_ids` (tagged `new_round`), the top `n_max` by
  `rank_scores` (one score per pool row); scores are those rank scores."""
  rounds = dict(zip(subgraph.ids, subgraph.rounds))
  for i in new_ids:
    rounds.setdefault(i, new_round)
  ids = list(rounds)
  ids = pool.order(ids, rank_scores[ids])[:n_max]
  timings = {**subgraph.timings, name: seconds}
  return dataclasses.replace(
      subgraph, edges=[pool.triples[i] for i in ids],
      scores=rank_scores[ids].astype(np.float32), rounds=[rounds[i] for i in ids], ids=ids,
      timings=timings, **fields)


def boosted_n_max(config: SubgraphConfig, boost_ratio: float) -> int:
  return math.ceil(boost_ratio * config.n_max)


def expansion_boost(question_embedding: np.ndarray, subgraph: Subgraph,
                    retriever: BoundedRetriever, boost_ratio: float) -> Subgraph:
  """Raises N_max to ceil(boost_ratio * N_max) and expands again from the same seeds."""
  t0 = time.perf_counter()
  c = retriever.config
  n_max = boosted_n_max(c, boost_ratio)
  boosted = BoundedRetriever(retriever.pool, retriever.embedder,
                             dataclasses.replace(c, n_max=n_max),
                             query_writer=retriever.query_writer)
  q = _unit(question_embedding)
  pool = retriever.pool
  new = boosted.expand(q, pool.top(q, c.seeds))
  return _merged(pool, subgraph, new, pool.scores(q), n_max, 1, time.perf_counter() - t0,
                 "expansion_boost")


def reformulation_context(question: str, question_embedding: np.ndarray, subgraph: Subgraph,
                          evaluation: Evaluation, retriever: BoundedRetriever) -> RoundOneContext:
  """What the writer sees: the uncovered mentions, then the subgraph's bridge nodes, and the
  subgraph's edges at them (else its best edges), best question score first."""
  c, pool = retriever.config, retriever.pool
  bridges = [n for n, _ in bridge_nodes(subgraph.edges) if n not in evaluation.missing]
  nodes = list(evaluation.missing) + bridges[:c.bridge_nodes]
  q = _unit(question_embedding)
  at = [i for i in subgraph.ids if pool.triples[i].subject in nodes
        or pool.triples[i].object in nodes] or list(subgraph.ids)
  at = pool.order(at, pool.scores(q, at))[:c.bridge_evidence] if at else []
  return RoundOneContext(question, q, nodes, [pool.triples[i] for i in at],
                         pool.embeddings[at], list(subgraph.edges))


def query_reformulation(question: str, question_embedding: np.ndarray, subgraph: Subgraph,
                        evaluation: Evaluation, retriever: BoundedRetriever, embedder,
                        writer) -> Subgraph:
  """One rewritten query from `writer` (text or a vector [D]), seeds + expansion with it, merged
  with the subgraph by the original question score."""
  t0 = time.perf_counter()
  c, pool = retriever.config, retriever.pool
  q = _unit(question_embedding)
  written = writer(reformulation_context(question, q, subgraph, evaluation, retriever))
  if isinstance(written, str):
    q2 = _unit(np.asarray(embedder.embed([written]), np.float32)[0])
  else:
    q2 = _unit(written)
    if q2.shape != q.shape:
      raise ValueError(f"query writer returned a vector of shape {q2.shape}; expected "
                       f"{q.shape} like the question embedding")
  new = retriever.expand(q2, pool.top(q2, c.seeds))
  return _merged(pool, subgraph, new, pool.scores(q), c.n_max, 2, time.perf_counter() - t0,
                 "query_reformulation",
                 intermediate_query=written if isinstance(written, str) else None)


# WordNet pointer pairs (kb.WORDNET_RELATIONS symbols): a relation and its inverse.
_INVERSE_SYMBOLS = (("@", "~"), ("@i", "~i"), ("#m", "%m"), ("#s", "%s"), ("#p", "%p"))
INVERSES = {kb.WORDNET_RELATIONS[a]: kb.WORDNET_RELATIONS[b] for p in _INVERSE_SYMBOLS
            for a, b in (p, p[::-1])}
# WordNet's own wording of its pointers ("a car is a kind of motor vehicle").
GLOSSES = {"is a": "is a kind of", "instance of": "is an instance of", "part of": "is a part of",
           "member of": "is a member of", "substance of": "is a substance of",
           "has kind": "has the kind", "has part": "has the part", "has member": "has the member"}
_AUXILIARIES = ("is", "are", "was", "were", "has", "have", "had")


@functools.lru_cache(maxsize=1)
def default_wordnet() -> kb.WordNet:
  """The committed WordNet excerpt (graphloom_jax/data/resources/wordnet), nouns."""
  return kb.WordNet.load(canonical.WORDNET_RESOURCES, "n")


def synonyms(name: str, wordnet: kb.WordNet, n: int) -> list[str]:
  """Up to n other words of the name's first WordNet sense ("pant" -> ["trouser"])."""
  senses = wordnet.senses(name)
  if not senses or n <= 0:
    return []
  own = name.lower().replace(" ", "_")
  return [w.replace("_", " ").lower() for w in senses[0].words if w.lower() != own][:n]


def verbalisations(t: Triple, wordnet: kb.WordNet, n_synonyms: int) -> list[str]:
  """Alternative verbalisations of t = (s, r, o), without the original "s r o":
    spaced     "_" and "-" to spaces in s, r, o
    gloss      "s <gloss(r)> o"               (WordNet relations: "is a" -> "is a kind of")
    inverse    "o <inverse(r)> s"             (WordNet relations: "is a" <-> "has kind")
               else "o that s [is] r"         (scene relations: "pant that skier is wearing";
                                               no "is" when r starts with is/are/has/...)
    synonyms   "y r o" and "s r y" for up to n_synonyms words y of the first WordNet sense
               of s, respectively o"""
  sp = lambda x: re.sub(r"\s+", " ", x.replace("_", " ").replace("-", " ")).strip()
  s, r, o = sp(t.subject), sp(t.relation), sp(t.object)
  out = [f"{s} {r} {o}"]
  if r in GLOSSES:
    out.append(f"{s} {GLOSSES[r]} {o}")
  if r in INVERSES:
    out.append(f"{o} {INVERSES[r]} {s}")
  else:
    aux = "" if r.split(" ")[0] in _AUXILIARIES else "is "
    out.append(f"{o} that {s} {aux}{r}")
  out += [f"{y} {r} {o}" for y in synonyms(s, wordnet, n_synonyms)]
  out += [f"{s} {r} {y}" for y in synonyms(o, wordnet, n_synonyms)]
  original = t.verbalize()
  return [v for v in dict.fromkeys(out) if v != original]


def repaired_embeddings(question_embedding: np.ndarray, pool: TriplePool, embedder,
                        wordnet: kb.WordNet, n_synonyms: int, rows: Sequence[int] | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
  """Per pool row, the verbalisation with the largest cosine to q: (its embedding [E, D], that
  cosine [E]). Alternatives are embedded in one call. rows: the rows given alternatives (the
  others keep their own verbalisation); None: every row."""
  q = _unit(question_embedding)
  rows = range(len(pool)) if rows is None else rows
  alts = {i: verbalisations(pool.triples[i], wordnet, n_synonyms) for i in rows}
  texts = list(dict.fromkeys(v for a in alts.values() for v in a))
  where = {v: j for j, v in enumerate(texts)}
  emb = np.asarray(embedder.embed(texts), np.float32) if texts else np.zeros(
      (0, pool.embeddings.shape[1]), np.float32)
  best = pool.embeddings.copy()
  score = pool.embeddings @ q
  alt_score = emb @ q
  for i, a in alts.items():
    for v in a:
      j = where[v]
      if alt_score[j] > score[i]:
        score[i], best[i] = alt_score[j], emb[j]
  return best, score.astype(np.float32)


def repair_rows(q: np.ndarray, subgraph: Subgraph, pool: TriplePool, max_rows: int
                ) -> list[int] | None:
  """The rows verbalisation repair re-verbalises: every row (None) in a pool of at most
  `max_rows`; in a larger one the `max_rows` rows nearest q (the pool's index) and every row at
  a node of the subgraph, so that repair costs the same in a pool of a million facts."""
  if len(pool) <= max_rows:
    return None
  near = pool.top(q, max_rows)
  nodes = {x for i in subgraph.ids for x in (pool.triples[i].subject, pool.triples[i].object)}
  at = {i for n in nodes for i in pool.by_entity.get(n, ())}
  return sorted(set(near) | at | set(subgraph.ids))


def verbalization_repair(question: str, question_embedding: np.ndarray, subgraph: Subgraph,
                         retriever: BoundedRetriever, embedder, wordnet: kb.WordNet,
                         n_synonyms: int, max_rows: int = 20_000) -> Subgraph:
  """Seeds and expansion again on the repaired scores (max cosine over verbalisations) of
  `repair_rows`."""
  t0 = time.perf_counter()
  c, pool = retriever.config, retriever.pool
  q = _unit(question_embedding)
  best, score = repaired_embeddings(q, pool, embedder, wordnet, n_synonyms,
                                    repair_rows(q, subgraph, pool, max_rows))
  repaired = BoundedRetriever(TriplePool(pool.triples, best), embedder,
                              dataclasses.replace(c, second_round=False),
                              query_writer=retriever.query_writer)
  new = repaired.expand(q, repaired.pool.top(q, c.seeds))
  return _merged(pool, subgraph, new, score, c.n_max, 1, time.perf_counter() - t0,
                 "verbalization_repair")


# --------------------------------------------------------------------------------------------
# Selection and the entry point
# --------------------------------------------------------------------------------------------


def check_settings(correct_cfg) -> None:
  """The actions' settings of the `correct` section: boost_ratio >= 1, repair_synonyms >= 0."""
  if correct_cfg.boost_ratio < 1 or correct_cfg.repair_synonyms < 0:
    raise ValueError(f"config.correct.boost_ratio={correct_cfg.boost_ratio} must be >= 1 and "
                     f"correct.repair_synonyms={correct_cfg.repair_synonyms} >= 0")


class CorrectionSelector:
  """Picks one action by expected utility minus cost (rule in the module docstring) and keeps
  each action's running mean wall time, starting from a prior observation."""

  def __init__(self, cost_weight: float, prior_seconds: dict[str, float],
               repair_coverage_share: float):
    if set(prior_seconds) != set(ACTIONS):
      raise ValueError(f"CorrectionSelector: prior_seconds needs exactly {ACTIONS}, got "
                       f"{sorted(prior_seconds)}")
    self.cost_weight = cost_weight
    self.repair_coverage_share = repair_coverage_share
    self.total = {a: float(prior_seconds[a]) for a in ACTIONS}
    self.count = {a: 1 for a in ACTIONS}

  @classmethod
  def from_config(cls, config) -> "CorrectionSelector":
    """The selector of the config's `correct` section, every action's setting checked now
    rather than when the action first fires."""
    e = config.correct
    check_settings(e)
    return cls(e.cost_weight, dict(e.prior_seconds), e.repair_coverage_share)

  def seconds(self, action: str) -> float:
    return self.total[action] / self.count[action]

  def record(self, action: str, seconds: float) -> None:
    self.total[action] += seconds
    self.count[action] += 1

  def expected(self, ev: Evaluation) -> dict[str, float]:
    gap_rel, gap_cov, sat = 1.0 - ev.relevance, 1.0 - ev.coverage, ev.saturation
    return {"expansion_boost": sat * (gap_rel + 1.0 - ev.reach), "query_reformulation": gap_cov,
            "verbalization_repair": (1.0 - sat) * gap_rel + self.repair_coverage_share * gap_cov}

  def utilities(self, ev: Evaluation) -> dict[str, float]:
    """Net utility per action: expected utility - cost_weight * mean seconds."""
    return {a: u - self.cost_weight * self.seconds(a) for a, u in self.expected(ev).items()}

  def select(self, ev: Evaluation) -> tuple[str, dict[str, float]]:
    u = self.utilities(ev)
    return max(ACTIONS, key=lambda a: (u[a], -ACTIONS.index(a))), u


def correct(question: str, question_embedding: np.ndarray, subgraph: Subgraph,
            retriever: BoundedRetriever, embedder, writer, evaluator: RetrievalEvaluator,
            selector: CorrectionSelector, config, wordnet: kb.WordNet | None = None
            ) -> tuple[Subgraph, Correction]:
  """Corrective retrieval of one question's subgraph (at most one action, never repeated).

  score >= correct.tau_eval: the subgraph is returned (marked) with Correction(action=None).
  Else the selector's action runs once, its result is scored (score_after), and the subgraph
  with the higher evaluator score is returned (the action's on ties); details["kept"] says
  which ("corrected" or "original"). A subgraph already marked by `correct`
  (timings["correction"]) is returned unchanged with details["already_corrected"] = True.

  writer: the query writer for query_reformulation (e.g. retrieval.factory.query_writer(config);
  None: retriever.query_writer, the retriever's template writer when it has no other).
  config: reads correct.tau_eval, correct.boost_ratio, correct.repair_synonyms,
  correct.repair_max_rows.
  wordnet: synonyms for verbalization_repair (None: the committed excerpt)."""
  t0 = time.perf_counter()
  pool, rc = retriever.pool, retriever.config
  tau = config.correct.tau_eval
  repair = (config.correct.repair_synonyms, config.correct.repair_max_rows)
  ev = evaluator(question, question_embedding, subgraph, pool, rc)
  if MARK in subgraph.timings:
    return subgraph, Correction(ev.score, tau, None, details={
        "already_corrected": True, "evaluation": ev.to_json()})
  if ev.score >= tau:
    out = dataclasses.replace(subgraph, timings={**subgraph.timings,
                                                 MARK: time.perf_counter() - t0})
    return out, Correction(ev.score, tau, None, details={"evaluation": ev.to_json()})
  action, utilities = selector.select(ev)
  t1 = time.perf_counter()
  if action == "expansion_boost":
    new = expansion_boost(question_embedding, subgraph, retriever, config.correct.boost_ratio)
  elif action == "query_reformulation":
    new = query_reformulation(question, question_embedding, subgraph, ev, retriever, embedder,
                              writer if writer is not None else retriever.query_writer)
  else:
    new = verbalization_repair(question, question_embedding, subgraph, retriever, embedder,
                               wordnet or default_wordnet(), *repair)
  seconds = time.perf_counter() - t1
  selector.record(action, seconds)
  if action == "expansion_boost":
    rc = dataclasses.replace(rc, n_max=boosted_n_max(rc, config.correct.boost_ratio))
  after = evaluator(question, question_embedding, new, pool, rc)
  kept = "corrected" if after.score >= ev.score else "original"
  out = new if kept == "corrected" else subgraph
  out = dataclasses.replace(out, timings={**out.timings, MARK: time.perf_counter() - t0})
  return out, Correction(ev.score, tau, action, after.score, utilities, details={
      "kept": kept, "seconds": seconds, "evaluation": ev.to_json(),
      "evaluation_after": after.to_json(), "edges_before": len(subgraph.ids),
      "edges_after": len(new.ids)})
