"""Bounded subgraph retrieval (docs/method.md §2).

Shapes: E triples in the pool, D embedding width, K seeds.

  score(Q, t) = cos(Emb(Q), Emb(verbalize(t)))          verbalize(t) = "s r o"
  round 1:  seeds = top-K triples by score (K = 15); expansion from the seeds' entities, hop by
            hop up to `hops` (2): each frontier node adds at most d_max (5) of its not yet
            chosen edges, best score first; stop at N_max (50) edges in all.
  round 2 (at most one): bridge nodes = round-1 nodes with >= 2 distinct neighbours, ranked by
            betweenness centrality in the round-1 subgraph (networkx, exact, undirected); a
            query writer turns Q and the bridge evidence into an intermediate query (<= 15
            tokens) or directly into a query vector; seeds + expansion again with that query;
            the union of both rounds is cut to the top N_max by the ORIGINAL question score.

Query writers are pluggable: any callable `writer(ctx: RoundOneContext) -> str | np.ndarray`.
`DecoderQueryWriter` asks the decoder (any object with `generate(prompts, max_new_tokens,
chat)`), `TemplateQueryWriter` fills a configured template (used only when no decoder is given);
a steering strategy (e.g. GRAIL) may return a query vector [D] instead of text.

Determinism: scores are computed with numpy on the stored embeddings; every ranking breaks ties
by the triple's sort key and nodes are visited in sorted order, so results do not depend on the
run, the insertion order of sets or PYTHONHASHSEED.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import time
from typing import Callable, Protocol, Sequence

import networkx as nx
import numpy as np

from graphloom_jax.graph.triples import Triple


class TextEmbedder(Protocol):
  def embed(self, texts: list[str]) -> np.ndarray:
    ...


@dataclasses.dataclass(frozen=True)
class SubgraphConfig:
  seeds: int = 15  # K
  hops: int = 2
  d_max: int = 5
  n_max: int = 50  # N_max
  second_round: bool = True
  bridge_nodes: int = 2  # bridges whose evidence the query writer sees
  bridge_evidence: int = 6  # round-1 edges at the bridges shown to the writer
  query_tokens: int = 15
  template: str = "{bridges} {question}"

  def __post_init__(self):
    for name in ("seeds", "d_max", "n_max", "query_tokens"):
      if getattr(self, name) < 1:
        raise ValueError(f"SubgraphConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.hops < 0:
      raise ValueError(f"SubgraphConfig.hops must be >= 0, got {self.hops}")

  @classmethod
  def from_config(cls, retrieval) -> "SubgraphConfig":
    """From the `retrieval` section of the config (graphloom_jax/defaults.py)."""
    return cls(seeds=retrieval.seeds, hops=retrieval.hops, d_max=retrieval.d_max,
               n_max=retrieval.n_max, second_round=retrieval.second_round != "none",
               bridge_nodes=retrieval.bridge_nodes, bridge_evidence=retrieval.bridge_evidence,
               query_tokens=retrieval.intermediate_query_tokens,
               template=retrieval.query_template)


def name_spellings(names) -> dict[str, list[str]]:
  """Each lower-cased name -> the names spelled that way, in the order given."""
  out: dict[str, list[str]] = {}
  for n in names:
    out.setdefault(n.lower(), []).append(n)
  return out


class TriplePool:
  """Triples with their verbalisation embeddings [E, D] and entity adjacency."""

  def __init__(self, triples: Sequence[Triple], embeddings: np.ndarray | None = None,
               embedder: TextEmbedder | None = None, index=None):
    self.triples = list(triples)
    if embeddings is None:
      if embedder is None:
        raise ValueError("TriplePool needs `embeddings` or an `embedder`")
      embeddings = embedder.embed([t.verbalize() for t in self.triples])
    embeddings = np.asarray(embeddings, np.float32)
    if embeddings.shape[0] != len(self.triples) or embeddings.ndim != 2:
      raise ValueError(f"TriplePool: embeddings shape {embeddings.shape} does not match "
                       f"{len(self.triples)} triples")
    self.embeddings = embeddings
    self.index = index  # optional ExactIndex / ScannIndex over `embeddings`, ids = row numbers
    self.by_entity: dict[str, list[int]] = collections.defaultdict(list)
    for i, t in enumerate(self.triples):
      self.by_entity[t.subject].append(i)
      if t.object != t.subject:
        self.by_entity[t.object].append(i)
    self._rank = {i: r for r, i in enumerate(
        sorted(range(len(self.triples)), key=lambda i: self.triples[i].sort_key()))}

  def __len__(self):
    return len(self.triples)

  @functools.cached_property
  def spellings(self) -> dict[str, list[str]]:
    """The entity names by their lower-cased form (`name_spellings`), built on first use."""
    return name_spellings(self.by_entity)

  def scores(self, query: np.ndarray, ids=None) -> np.ndarray:
    e = self.embeddings if ids is None else self.embeddings[np.asarray(ids, np.int64)]
    return e @ np.asarray(query, np.float32)

  def order(self, ids, scores) -> list[int]:
    """`ids` best first: score descending, ties by the triples' sort keys."""
    return [i for _, _, i in sorted(zip((-float(s) for s in scores),
                                        (self._rank[i] for i in ids), ids))]

  def top(self, query: np.ndarray, k: int) -> list[int]:
    """The k best triples for `query`: an index shortlists 2k candidates in big pools."""
    if self.index is not None and len(self) > 4 * k:
      ids, _ = self.index.search(np.asarray(query, np.float32)[None], min(2 * k, len(self)))
      cand = [int(i) for i in ids[0] if i >= 0]
    else:
      cand = list(range(len(self)))
    return self.order(cand, self.scores(query, cand))[:k]


@dataclasses.dataclass
class RoundOneContext:
  """What a second-round query writer sees."""
  question: str
  question_embedding: np.ndarray  # [D]
  bridge_nodes: list[str]
  evidence: list[Triple]  # round-1 edges at the bridge nodes, best question score first
  evidence_embeddings: np.ndarray  # [len(evidence), D]
  round_one: list[Triple]


QueryWriter = Callable[[RoundOneContext], "str | np.ndarray"]


def _truncate_words(text: str, n: int) -> str:
  return " ".join(text.split()[:n])


class TemplateQueryWriter:
  """Fills `template` ({question}, {bridges}, {evidence}) and keeps the first `max_tokens`
  words (the default puts the bridges first so truncation cuts the question, which round 1
  already covered). The fallback when no decoder is configured."""

  def __init__(self, template: str = SubgraphConfig.template, max_tokens: int = 15):
    self.template = template
    self.max_tokens = max_tokens

  def __call__(self, ctx: RoundOneContext) -> str:
    text = self.template.format(question=ctx.question, bridges=" ".join(ctx.bridge_nodes),
                                evidence="; ".join(t.verbalize() for t in ctx.evidence))
    return _truncate_words(text, self.max_tokens)


PROMPT = ("Question: {question}\nFacts found so far: {evidence}\nWrite one short search query "
          "(at most {n} words) for the missing fact needed to answer the question. Reply with "
          "the query only.")


class DecoderQueryWriter:
  """The decoder writes the intermediate query: at most `max_tokens` new tokens."""

  def __init__(self, decoder, max_tokens: int = 15, prompt: str = PROMPT, batch_size: int = 16):
    if not callable(getattr(decoder, "generate", None)):
      raise TypeError(f"DecoderQueryWriter needs an object with generate(prompts, "
                      f"max_new_tokens, chat), got {type(decoder).__name__}")
    self.decoder = decoder
    self.max_tokens = max_tokens
    self.prompt = prompt
    self.batch_size = batch_size  # prompts per generation call (bounds the KV cache)

  def __call__(self, ctx: RoundOneContext) -> str:
    return self.write_batch([ctx])[0]

  def write_batch(self, contexts: Sequence[RoundOneContext]) -> list[str]:
    """One batched generation for many questions' intermediate queries."""
    if not contexts:
      return []
    prompts = [self.prompt.format(question=c.question, n=self.max_tokens,
                                  evidence="; ".join(t.verbalize() for t in c.evidence))
               for c in contexts]
    texts = []
    for s in range(0, len(prompts), self.batch_size):
      texts += self.decoder.generate(prompts[s:s + self.batch_size],
                                     max_new_tokens=self.max_tokens, chat=True)
    tok = getattr(self.decoder, "tokenizer", None)
    out = []
    for ctx, text in zip(contexts, texts):
      if tok is not None and hasattr(tok, "encode") and hasattr(tok, "decode"):
        ids = tok.encode(text)
        if len(ids) > self.max_tokens:
          text = tok.decode(ids[:self.max_tokens])
      out.append(text.strip().splitlines()[0].strip() if text.strip() else ctx.question)
    return out


@dataclasses.dataclass
class Subgraph:
  edges: list[Triple]
  scores: np.ndarray  # float32 [len(edges)], cosine to the original question
  rounds: list[int]  # 1 or 2: the round that first retrieved each edge
  ids: list[int]  # rows in the pool
  timings: dict[str, float]  # seconds per stage
  bridge_nodes: list[str] = dataclasses.field(default_factory=list)
  intermediate_query: str | None = None

  @property
  def nodes(self) -> list[str]:
    return sorted({x for t in self.edges for x in (t.subject, t.object)})

  def graph(self) -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    for t, s, r in zip(self.edges, self.scores, self.rounds):
      g.add_edge(t.subject, t.object, key=t.relation, triple=t, score=float(s), round=r)
    return g


def bridge_nodes(edges: Sequence[Triple]) -> list[tuple[str, float]]:
  """Nodes with >= 2 distinct neighbours, by betweenness centrality (then name)."""
  g = nx.Graph()
  for t in sorted(edges, key=Triple.sort_key):
    if t.subject != t.object:
      g.add_edge(t.subject, t.object)
  if g.number_of_nodes() == 0:
    return []
  bc = nx.betweenness_centrality(g, normalized=True)
  return sorted(((n, bc[n]) for n in g.nodes if g.degree(n) >= 2), key=lambda x: (-x[1], x[0]))


class BoundedRetriever:
  """Seeds, bounded 2-hop expansion, and the optional interleaved second round."""

  def __init__(self, pool: TriplePool, embedder: TextEmbedder,
               config: SubgraphConfig = SubgraphConfig(), decoder=None,
               query_writer: QueryWriter | None = None):
    self.pool = pool
    self.embedder = embedder
    self.config = config
    if query_writer is None:
      query_writer = (DecoderQueryWriter(decoder, config.query_tokens) if decoder is not None
                      else TemplateQueryWriter(config.template, config.query_tokens))
    self.query_writer = query_writer

  def _embed(self, text: str) -> np.ndarray:
    return np.asarray(self.embedder.embed([text]), np.float32)[0]

  def expand(self, query: np.ndarray, seeds: list[int], n_max: int | None = None) -> list[int]:
    """Seeds plus bounded expansion from their entities; returns chosen rows in order added."""
    c = self.config
    n_max = c.n_max if n_max is None else n_max
    chosen = list(seeds[:n_max])
    have = set(chosen)
    visited: set[str] = set()
    frontier = sorted({x for i in chosen for x in (self.pool.triples[i].subject,
                                                   self.pool.triples[i].object)})
    for _ in range(c.hops):
      nxt = set()
      for node in frontier:
        if len(chosen) >= n_max:
          return chosen
        visited.add(node)
        cand = [i for i in self.pool.by_entity.get(node, ()) if i not in have]
        if not cand:
          continue
        for i in self.pool.order(cand, self.pool.scores(query, cand))[:c.d_max]:
          if len(chosen) >= n_max:
            return chosen
          chosen.append(i)
          have.add(i)
          t = self.pool.triples[i]
          nxt.update(x for x in (t.subject, t.object) if x not in visited)
      frontier = sorted(nxt - visited)
    return chosen

  def first_round(self, question: str, question_embedding: np.ndarray | None = None
                  ) -> "RoundOne":
    """Round 1 (seeds + bounded expansion) and, when a second round is configured and the
    subgraph has bridge nodes, the context its query writer needs."""
    c = self.config
    timings = {}
    t0 = time.perf_counter()
    q = self._embed(question) if question_embedding is None else np.asarray(
        question_embedding, np.float32)
    timings["embed_question"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    seeds = self.pool.top(q, c.seeds)
    timings["seeds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    first = self.expand(q, seeds)
    timings["expand"] = time.perf_counter() - t0
    bridges, ctx = [], None
    if c.second_round and first:
      t0 = time.perf_counter()
      round_one = [self.pool.triples[i] for i in first]
      bridges = [n for n, _ in bridge_nodes(round_one)][:c.bridge_nodes]
      if bridges:
        at = [i for i in first if self.pool.triples[i].subject in bridges
              or self.pool.triples[i].object in bridges]
        at = self.pool.order(at, self.pool.scores(q, at))[:c.bridge_evidence]
        ctx = RoundOneContext(question, q, bridges, [self.pool.triples[i] for i in at],
                              self.pool.embeddings[at], round_one)
      timings["bridges"] = time.perf_counter() - t0
    return RoundOne(question, q, first, bridges, ctx, timings)

  def second_round(self, r1: "RoundOne", written: "str | np.ndarray | None" = None,
                   write_seconds: float = 0.0) -> Subgraph:
    """Round 2 with the writer's output (when round 1 produced a context), then the merge: the
    union of both rounds cut to the top N_max by the original question score."""
    c = self.config
    q = r1.question_embedding
    timings = dict(r1.timings)
    rounds = {i: 1 for i in r1.first}
    inter = None
    if r1.context is not None:
      if written is None:
        raise ValueError(f"question {r1.question!r}: round 1 found bridge nodes but no "
                         "intermediate query was written for the second round")
      t0 = time.perf_counter()
      if isinstance(written, str):
        inter = written
        q2 = self._embed(written)
      else:
        q2 = np.asarray(written, np.float32)
        if q2.shape != q.shape:
          raise ValueError(f"query writer returned a vector of shape {q2.shape}; expected "
                           f"{q.shape} like the question embedding")
        q2 = q2 / max(float(np.linalg.norm(q2)), 1e-12)
      timings["intermediate_query"] = write_seconds + time.perf_counter() - t0
      t0 = time.perf_counter()
      for i in self.expand(q2, self.pool.top(q2, c.seeds)):
        rounds.setdefault(i, 2)
      timings["second_round"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids = self.pool.order(list(rounds), self.pool.scores(q, list(rounds)))[:c.n_max]
    scores = self.pool.scores(q, ids).astype(np.float32) if ids else np.zeros(0, np.float32)
    timings["merge"] = time.perf_counter() - t0
    timings["total"] = sum(timings.values())
    return Subgraph([self.pool.triples[i] for i in ids], scores, [rounds[i] for i in ids], ids,
                    timings, r1.bridges, inter)

  def retrieve(self, question: str, question_embedding: np.ndarray | None = None) -> Subgraph:
    r1 = self.first_round(question, question_embedding)
    written, seconds = None, 0.0
    if r1.context is not None:
      t0 = time.perf_counter()
      written = self.query_writer(r1.context)
      seconds = time.perf_counter() - t0
    return self.second_round(r1, written, seconds)


@dataclasses.dataclass
class RoundOne:
  """Round 1 of one question: the chosen pool rows and the writer's context (None: no second
  round for this question)."""
  question: str
  question_embedding: np.ndarray  # [D]
  first: list[int]
  bridges: list[str]
  context: RoundOneContext | None
  timings: dict[str, float]


def retrieve_batch(retrievers: Sequence[BoundedRetriever], questions: Sequence[str],
                   question_embeddings: Sequence[np.ndarray], writer: QueryWriter | None
                   ) -> list[Subgraph]:
  """`retrieve` for many questions (one retriever per question's pool) with one batched call to
  the query writer when it offers `write_batch` (the decoder writes all intermediate queries
  in one generation), else one call per question."""
  r1s = [r.first_round(q, e) for r, q, e in zip(retrievers, questions, question_embeddings)]
  todo = [j for j, r1 in enumerate(r1s) if r1.context is not None]
  written: dict[int, object] = {}
  seconds = 0.0
  if todo:
    if writer is None:
      raise ValueError("round 1 found bridge nodes but no query writer was given")
    t0 = time.perf_counter()
    contexts = [r1s[j].context for j in todo]
    batch = getattr(writer, "write_batch", None)
    outs = batch(contexts) if batch is not None else [writer(c) for c in contexts]
    if len(outs) != len(contexts):
      raise RuntimeError(f"query writer returned {len(outs)} queries for {len(contexts)} "
                         "questions")
    written = dict(zip(todo, outs))
    seconds = (time.perf_counter() - t0) / len(todo)
  return [r.second_round(r1, written.get(j), seconds if j in written else 0.0)
          for j, (r, r1) in enumerate(zip(retrievers, r1s))]
