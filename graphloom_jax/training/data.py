"""Training and validation data for GraphLoom: fixed-shape numpy features per question, served
through grain.

Shapes (per example; a batch adds B in front): S sequence length, M slot-bank size,
E text-embedding width, R scene objects, Q evidence triples (= M / 2), J options, F features.

For every question (the embedded SceneKB benchmark, or any MMQA-layout question whose `extra`
carries `instance_id`, `options`, `answer_index` and `gold_triples`):
  1. Candidate triples: the instance's scene triples plus its WordNet facts within 2 hops,
     kept iff confidence >= tau_edge, duplicates merged keeping the highest confidence.
  2. Retrieval: cosine between Emb(question) and Emb(verbalised triple), exact top Q; the slot
     feature "retrieval score" is (1 + cos) / 2. Centrality of a triple: the mean degree of its
     two endpoints inside the retrieved subgraph divided by the subgraph's largest degree.
  3. Slots: `models.slots.build_bank` (utility = gold-support membership).
  4. Prefix inputs: image = embeddings of the scene's object names (R at most, sorted), the
     question embedding, evidence = embeddings of the retrieved verbalised triples.
  5. Tokens: [prompt ; answer ; EOS] right-padded to S; `targets` is the row shifted by one and
     `loss_mask` marks the positions whose target is an answer token or the EOS (these are also
     the "answer steps" of the router losses); `output_mask` marks the generated tokens of the
     row (answer and EOS), from which the router's output-mention feature is computed against
     `slot_key_tokens` [M, W]. Multiple-choice rows [prompt ; option_j ; EOS]
     with the option mask on option_j + EOS: the EOS says the answer ends there, so an option
     that is a prefix of another is not favoured.

Prompts go through the decoder tokenizer's chat template when it has one; a decoder without a
tokenizer (random weights) uses `ByteTokenizer` (UTF-8 bytes offset by 3).

Data order: `batches(arrays, batch_size, seed)` is a grain MapDataset (shuffle per epoch, repeat
forever, batch), indexed by the micro-step number, so the data position of a run is one integer
that the checkpoint stores.
"""

import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Callable, Sequence

import grain
import numpy as np

from graphloom_jax.models import slots

FEATURES_VERSION = 2  # bump when featurize's output changes: it keys the on-disk cache
PROMPT = "Answer the question about the scene in a few words.\nQuestion: {question}"
PLAIN_PROMPT = "Question: {question}\nAnswer:"  # without a chat template (byte-level decoders)
# Flat-RAG: the retrieved triples as text before the question.
EVIDENCE_PROMPT = ("Answer the question about the scene in a few words.\nEvidence:\n{evidence}\n"
                   "Question: {question}")


class ByteTokenizer:
  """UTF-8 bytes offset by 3 (0 pad, 1 begin, 2 end): tokenizer-less (random) decoders."""
  pad_id, bos_id, eos_id = 0, 1, 2
  eos_ids = (2,)
  has_chat_template = False

  def __init__(self, vocab_size: int):
    if vocab_size < 259:
      raise ValueError(f"ByteTokenizer needs a vocabulary of at least 259 ids, the decoder has "
                       f"{vocab_size}")

  def encode(self, text: str) -> list[int]:
    return [b + 3 for b in text.encode("utf-8")]

  def decode(self, ids: Sequence[int]) -> str:
    return bytes(i - 3 for i in ids if i >= 3).decode("utf-8", errors="replace")


class TextFormat:
  """Prompt / answer token ids for one tokenizer."""

  def __init__(self, tokenizer):
    self.tok = tokenizer
    self.eos = int(tokenizer.eos_ids[0])
    self.pad = int(getattr(tokenizer, "pad_id", 0))

  def prompt_ids(self, question: str) -> list[int]:
    if self.tok.has_chat_template:
      return list(self.tok.chat_ids(PROMPT.format(question=question)))
    return [ByteTokenizer.bos_id] * isinstance(self.tok, ByteTokenizer) + self.tok.encode(
        PLAIN_PROMPT.format(question=question))

  def evidence_prompt_ids(self, question: str, evidence: Sequence[str]) -> list[int]:
    """Prompt with evidence sentences in the text (the Flat-RAG baseline)."""
    text = EVIDENCE_PROMPT.format(evidence="\n".join(evidence), question=question)
    if self.tok.has_chat_template:
      return list(self.tok.chat_ids(text))
    return [ByteTokenizer.bos_id] * isinstance(self.tok, ByteTokenizer) + self.tok.encode(
        text + "\nAnswer:")

  def answer_ids(self, answer: str) -> list[int]:
    text = answer if self.tok.has_chat_template else " " + answer
    return self.tok.encode(text) + [self.eos]

  def decode(self, ids: Sequence[int]) -> str:
    return self.tok.decode([i for i in ids if i != self.eos]).strip()


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
  seq_len: int
  bank_size: int
  max_objects: int = 16
  num_options: int = 4
  tau_edge: float = 0.5

  @classmethod
  def from_config(cls, config) -> "FeatureSpec":
    return cls(seq_len=config.train.seq_len, bank_size=config.memory.bank_size,
               tau_edge=config.graph.tau_edge)


def _candidates(kb, instance_id: str, tau_edge: float):
  best = {}
  for t in kb.instance_triples(instance_id):
    if t.confidence >= tau_edge and (t.key() not in best or t.confidence > best[t.key()].confidence):
      best[t.key()] = t
  return sorted(best.values(), key=lambda t: t.sort_key())


def _objects(kb, instance_id: str) -> list[str]:
  graph = kb.images[instance_id].extra["scene_graph"]
  names = set()
  for obj in graph.get("objects", []):
    name = obj.get("names", [obj.get("name", "")])[0] if obj.get("names") else obj.get("name", "")
    if name:
      names.add(name.strip())
  return sorted(names)


def _centrality(triples) -> list[float]:
  deg = {}
  for t in triples:
    for x in (t.subject, t.object):
      deg[x] = deg.get(x, 0) + 1
  top = max(deg.values(), default=1)
  return [(deg[t.subject] + deg[t.object]) / (2 * top) for t in triples]


class _Table:
  """Embeds texts once and serves them by value."""

  def __init__(self, embed: Callable[[list[str]], np.ndarray]):
    self.embed, self.vecs = embed, {}

  def add(self, texts):
    new = sorted({t for t in texts if t not in self.vecs})
    if new:
      out = np.asarray(self.embed(new), np.float32)
      if out.shape[0] != len(new):
        raise ValueError(f"embed returned {out.shape[0]} rows for {len(new)} texts")
      self.vecs.update(zip(new, out))

  def __call__(self, texts):
    self.add(texts)
    return np.stack([self.vecs[t] for t in texts])


def _tokens_row(ids: list[int], answer_start: int, seq_len: int, pad: int, where: str):
  if len(ids) > seq_len:
    raise ValueError(f"{where}: {len(ids)} tokens exceed train.seq_len={seq_len}")
  tokens = np.full((seq_len,), pad, np.int32)
  tokens[:len(ids)] = ids
  valid = np.arange(seq_len) < len(ids)
  targets = np.concatenate([tokens[1:], [pad]]).astype(np.int32)
  pos = np.arange(seq_len)
  mask = (pos >= answer_start - 1) & (pos < len(ids) - 1)
  return tokens, valid, targets, mask


def _retrieve(kb, questions: Sequence, table: "_Table", spec: FeatureSpec):
  """Exact top-Q retrieval per question: [(question, Emb(question), triples, cosines)]."""
  n_ev = spec.bank_size // 2
  instances = sorted({q.extra["instance_id"] for q in questions if "instance_id" in q.extra})
  cands = {i: _candidates(kb, i, spec.tau_edge) for i in instances}
  table.add([q.question for q in questions] + [t.verbalize() for c in cands.values() for t in c])
  retrieved = []
  for q in questions:
    for key in ("instance_id", "options", "answer_index", "gold_triples"):
      if key not in q.extra:
        raise KeyError(f"question {q.qid!r}: record has no {key!r} (expected the SceneKB extra "
                       "fields)")
    cand = cands[q.extra["instance_id"]]
    qv = table([q.question])[0]
    order, sims = [], np.zeros((0,))
    if cand:
      sims = table([t.verbalize() for t in cand]) @ qv
      order = sorted(range(len(cand)), key=lambda j: (-sims[j], j))[:n_ev]
    retrieved.append((q, qv, [cand[j] for j in order], [float(sims[j]) for j in order]))
  return retrieved


def retrieve(kb, questions: Sequence, embed: Callable[[list[str]], np.ndarray],
             spec: FeatureSpec) -> list[list]:
  """The evidence triples `featurize` retrieves for each question (for text baselines)."""
  return [top for _, _, top, _ in _retrieve(kb, questions, _Table(embed), spec)]


def featurize(kb, questions: Sequence, fmt: TextFormat, embed: Callable[[list[str]], np.ndarray],
              spec: FeatureSpec) -> dict[str, np.ndarray]:
  """Stacked features [N, ...] for the questions (see the module docstring)."""
  table = _Table(embed)
  n_ev = spec.bank_size // 2
  retrieved = _retrieve(kb, questions, table, spec)
  instances = sorted({q.extra["instance_id"] for q in questions})
  objects = {i: _objects(kb, i)[:spec.max_objects] for i in instances}
  table.add([o for objs in objects.values() for o in objs])
  table.add([x for _, _, top, _ in retrieved for t in top
             for x in (t.subject, f"{t.relation} {t.object}", t.relation, f"{t.subject} {t.object}")])

  rows, banks = [], []
  for q, qv, top, sims in retrieved:
    where = f"question {q.qid!r}"
    cent = _centrality(top)
    triples = [dict(subject=t.subject, relation=t.relation, object=t.object,
                    score=float(np.clip((1 + s) / 2, 0, 1)), conf_ext=float(t.confidence),
                    centrality=c) for t, s, c in zip(top, sims, cent)]
    gold = [dict(subject=s, relation=r, object=o) for s, r, o in q.extra["gold_triples"]]
    bank = slots.build_bank(triples, table, spec.bank_size, question=q.question, gold=gold,
                            tokenize=fmt.tok.encode)
    banks.append(bank)
    e = qv.shape[0]
    evidence = np.zeros((n_ev, e), np.float32)
    ev_mask = np.zeros((n_ev,), bool)
    if top:
      evidence[:len(top)] = table([t.verbalize() for t in top])
      ev_mask[:len(top)] = True
    image = np.zeros((spec.max_objects, e), np.float32)
    image_mask = np.zeros((spec.max_objects,), bool)
    objs = objects[q.extra["instance_id"]]
    if objs:
      image[:len(objs)] = table(objs)
      image_mask[:len(objs)] = True

    prompt = fmt.prompt_ids(q.question)
    answer = q.answer_texts[0] if q.answers else q.extra["options"][q.extra["answer_index"]]
    tokens, valid, targets, loss_mask = _tokens_row(
        prompt + fmt.answer_ids(answer), len(prompt), spec.seq_len, fmt.pad, where)
    options = list(q.extra["options"])
    if len(options) != spec.num_options:
      raise ValueError(f"{where}: {len(options)} options, expected {spec.num_options}")
    mc = [_tokens_row(prompt + fmt.answer_ids(o), len(prompt), spec.seq_len, fmt.pad,
                      f"{where} option {j}") for j, o in enumerate(options)]
    rows.append(dict(
        tokens=tokens, valid=valid, targets=targets, loss_mask=loss_mask,
        # the generated part of the row (answer tokens and EOS): loss_mask shifted right by one
        output_mask=np.concatenate([[False], loss_mask[:-1]]),
        mc_tokens=np.stack([m[0] for m in mc]), mc_valid=np.stack([m[1] for m in mc]),
        # option_logprob wants the mask on the predicted tokens: shift loss_mask right by one
        mc_option_mask=np.stack([np.concatenate([[False], m[3][:-1]]) for m in mc]),
        answer_index=np.int32(q.extra["answer_index"]),
        question_emb=qv, evidence=evidence, evidence_mask=ev_mask, image=image,
        image_mask=image_mask))
  out = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
  stacked = slots.stack_banks(banks)
  for name, key in (("keys", "slot_keys"), ("values", "slot_values"), ("valid", "slot_valid"),
                    ("is_entity", "slot_is_entity"), ("features", "slot_features"),
                    ("reliability", "slot_reliability"), ("utility", "slot_utility"),
                    ("key_tokens", "slot_key_tokens")):
    out[key] = stacked[name]
  return out


def cached_featurize(cache_dir: str | os.PathLike | None, name: str, kb, questions, fmt, embed,
                     spec: FeatureSpec, embedder_id: str) -> dict[str, np.ndarray]:
  """featurize with an .npz cache keyed by the spec, embedder, tokenizer and question ids."""
  if cache_dir is None:
    return featurize(kb, questions, fmt, embed, spec)
  key = hashlib.sha256(json.dumps(
      [FEATURES_VERSION, dataclasses.asdict(spec), embedder_id, PROMPT, PLAIN_PROMPT,
       type(fmt.tok).__name__,
       fmt.prompt_ids("probe"), [q.qid for q in questions]]).encode()).hexdigest()[:16]
  path = pathlib.Path(cache_dir) / f"{name}-{key}.npz"
  if path.exists():
    with np.load(path) as f:
      return {k: f[k] for k in f.files}
  arrays = featurize(kb, questions, fmt, embed, spec)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(".tmp.npz")
  np.savez(tmp, **arrays)
  os.replace(tmp, path)
  return arrays


class ArraySource:
  """grain random-access source over a dict of [N, ...] arrays."""

  def __init__(self, arrays: dict[str, np.ndarray]):
    sizes = {k: v.shape[0] for k, v in arrays.items()}
    if len(set(sizes.values())) != 1:
      raise ValueError(f"arrays disagree on the number of examples: {sizes}")
    self.arrays = arrays
    self.n = next(iter(sizes.values()))

  def __len__(self):
    return self.n

  def __getitem__(self, i):
    return {k: v[i] for k, v in self.arrays.items()}


def batches(arrays: dict[str, np.ndarray], batch_size: int, seed: int) -> grain.MapDataset:
  """Infinite shuffled batches; element i is micro-batch i (a new order every epoch)."""
  source = ArraySource(arrays)
  if len(source) < batch_size:
    raise ValueError(f"{len(source)} examples cannot fill one batch of {batch_size}")
  return (grain.MapDataset.source(source).shuffle(seed=seed).repeat(None)
          .batch(batch_size, drop_remainder=True))


def eval_batches(arrays: dict[str, np.ndarray], batch_size: int):
  """Validation in order, the last batch padded by repeating its first row; yields
  (batch, number of real rows)."""
  n = len(ArraySource(arrays))
  for start in range(0, n, batch_size):
    idx = np.arange(start, min(start + batch_size, n))
    real = len(idx)
    idx = np.concatenate([idx, np.full(batch_size - real, idx[0])])
    yield {k: v[idx] for k, v in arrays.items()}, real
