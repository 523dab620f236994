"""Evidence sets for GRAIL: a pool of evidence items and questions with gold evidence subsets.

Shapes: P pool items, Q questions, D embedding width.

  EvidenceSet(name, pool: EvidencePool, questions: list[EvidenceQuestion], notes)
  EvidenceSet.embed(embedder, cache_dir=None) -> EmbeddedSet (pool [P,D], questions [Q,D])
  EvidenceSet.select(splits, families, min_gold) / .subset(question_indices)
  completion_instances(es, question_indices, E) Evidence Set Completion instances (N of them)

The datasets' evidence sets (MMQA, the embedded benchmark) are built in
`graphloom_jax.data.grail_sets`.

Every evidence item has a text (what the embedder sees), a modality (an index into
`MODALITIES`, so each modality gets its own alignment adapter) and a key. A question lists its
gold items (pool indices, deduplicated, in the order the data gives them), its family and split,
and `distractors`: pool items that are topically close but not gold (hard negatives).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from graphloom_jax.models import embedding_cache

# Adapter order: questions are their own modality so queries get an adapter too.
MODALITIES = ("query", "text", "table", "image")
MULTI_HOP_FAMILIES = ("Compare", "Compose", "Intersect")


class EvidenceDataError(ValueError):
  """A data record that cannot be turned into evidence; the message names file and line."""


@dataclasses.dataclass
class EvidencePool:
  keys: list[str]
  texts: list[str]
  modality: np.ndarray  # int32 [P], indices into MODALITIES

  def __len__(self):
    return len(self.keys)


@dataclasses.dataclass(frozen=True)
class EvidenceQuestion:
  qid: str
  question: str
  family: str
  split: str
  gold: tuple[int, ...]
  distractors: tuple[int, ...] = ()


@dataclasses.dataclass
class EmbeddedSet:
  pool: np.ndarray  # float32 [P,D] unit rows
  questions: np.ndarray  # float32 [Q,D] unit rows


# Which gold items Evidence Set Completion hides (EvidenceSet.hide): "each" hides every gold item
# once (leave-one-out, the others are the context); "last" hides only the last one, the earlier
# ones are the context (on an answer path: the first hops are covered, the last hop is missing).
HIDE = ("each", "last")


@dataclasses.dataclass
class EvidenceSet:
  name: str
  pool: EvidencePool
  questions: list[EvidenceQuestion]
  notes: list[str] = dataclasses.field(default_factory=list)
  hide: str = "each"
  # The families the macro-averaged recall is taken over (those present); None = the multi-hop
  # families of MultimodalQA (MULTI_HOP_FAMILIES).
  macro_families: tuple[str, ...] | None = None

  def __post_init__(self):
    if self.hide not in HIDE:
      raise ValueError(f"{self.name}: hide must be one of {HIDE}, got {self.hide!r}")

  @property
  def macro_over(self) -> tuple[str, ...]:
    return MULTI_HOP_FAMILIES if self.macro_families is None else tuple(self.macro_families)

  def select(self, splits=None, families=None, min_gold: int = 1) -> list[int]:
    """Indices of the questions in `splits` and `families` with >= min_gold gold items."""
    out = []
    for i, q in enumerate(self.questions):
      if splits is not None and q.split not in splits:
        continue
      if families is not None and q.family not in families:
        continue
      if len(q.gold) >= min_gold:
        out.append(i)
    return out

  def subset(self, question_indices) -> "EvidenceSet":
    """These questions over a pool cut down to their gold items and distractors (re-indexed):
    a small, real slice of the data for quick runs and tests."""
    question_indices = list(question_indices)
    keep = sorted({i for qi in question_indices for i in self.questions[qi].gold
                   + self.questions[qi].distractors})
    new = {old: n for n, old in enumerate(keep)}
    pool = EvidencePool([self.pool.keys[i] for i in keep], [self.pool.texts[i] for i in keep],
                        self.pool.modality[keep])
    questions = [dataclasses.replace(q, gold=tuple(new[i] for i in q.gold),
                                     distractors=tuple(new[i] for i in q.distractors))
                 for q in (self.questions[qi] for qi in question_indices)]
    return dataclasses.replace(
        self, name=f"{self.name}-subset", pool=pool, questions=questions,
        notes=self.notes + [f"subset: {len(questions)} questions, {len(keep)} pool items"])

  def embed(self, embedder, cache_dir: str | None = None) -> EmbeddedSet:
    return EmbeddedSet(
        pool=cached_embed(embedder, self.pool.texts, cache_dir),
        questions=cached_embed(embedder, [q.question for q in self.questions], cache_dir))


def cached_embed(embedder, texts: list[str], cache_dir: str | None) -> np.ndarray:
  """embedder.embed(texts), through the on-disk embedding cache (`models.embedding_cache`)
  when cache_dir is given."""
  if not cache_dir:
    return _checked(embedder, texts, embedder.embed(texts))
  model_id = getattr(embedder, "model_id", None) or type(embedder).__name__
  return _checked(embedder, texts, embedding_cache.cached_embed(embedder, texts, cache_dir,
                                                                model_id=model_id))


def _checked(embedder, texts, y):
  y = np.asarray(y)
  if y.shape != (len(texts), embedder.dim) or y.dtype != np.float32:
    raise ValueError(f"{type(embedder).__name__}.embed gave {y.dtype} {y.shape}, expected float32 "
                     f"({len(texts)}, {embedder.dim})")
  return y


def hash_split(qid: str) -> str:
  """train / validation / test (40 / 10 / 50 %) from the qid's hash: stable across runs."""
  bucket = int(hashlib.md5(qid.encode()).hexdigest(), 16) % 10
  return "train" if bucket < 4 else ("validation" if bucket == 4 else "test")


@dataclasses.dataclass
class CompletionInstances:
  """Evidence Set Completion instances: hide one gold item, give the rest as context.

  question [N] (index into EvidenceSet.questions), context [N,E] pool ids padded with -1,
  missing [N] pool ids. Which gold items are hidden: `EvidenceSet.hide`."""
  question: np.ndarray
  context: np.ndarray
  missing: np.ndarray

  def __len__(self):
    return len(self.missing)


def completion_instances(es: EvidenceSet, question_indices, max_evidence: int) -> CompletionInstances:
  """Instances of the questions with >= 2 gold items, as `es.hide` says: leave-one-out ("each")
  or the last gold item hidden behind the others ("last"); a context longer than max_evidence
  keeps its first max_evidence items."""
  qs, ctx, miss = [], [], []
  for qi in question_indices:
    gold = es.questions[qi].gold
    if len(gold) < 2:
      continue
    for hidden in (gold if es.hide == "each" else gold[-1:]):
      rest = [g for g in gold if g != hidden][:max_evidence]
      qs.append(qi)
      ctx.append(rest + [-1] * (max_evidence - len(rest)))
      miss.append(hidden)
  return CompletionInstances(np.asarray(qs, np.int32),
                             np.asarray(ctx, np.int32).reshape(len(qs), max_evidence),
                             np.asarray(miss, np.int32))


def triple_modality(source: str) -> str:
  """The adapter modality of a triple source: scene graphs are image evidence, tables table
  evidence, everything else (text, REBEL, knowledge bases) text evidence."""
  if source == "scene":
    return "image"
  if source == "table":
    return "table"
  return "text"
