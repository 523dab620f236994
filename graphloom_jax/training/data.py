"""Training and validation data for GraphLoom: fixed-shape numpy features per question, served
through grain.

Shapes (per example; a batch adds B in front): S sequence length (`train.seq_len`), M slot-bank
size, E text-embedding width, R scene objects, Q evidence triples (= M / 2), J options.

Featurisation is GraphLoom's own pipeline (`pipeline.GraphLoom.prepare`): for every question
(the embedded SceneKB benchmark, or any MMQA-layout question whose `extra` carries
`instance_id`, `options`, `answer_index` and `gold_triples`) the instance graph, bounded
retrieval with its second round, corrective retrieval and the evidence arrays (slot bank,
prefix inputs; `pipeline.evidence`) are exactly what `GraphLoom.answer` builds, with the slot
utility labels taken from the gold supporting triples. On top of them come the token rows
(`pipeline.prompts.token_row`): [prompt ; answer ; EOS] right-padded to S with `targets`,
`loss_mask` (the answer steps), `output_mask` (the generated part, for the router's
output-mention feature); and per option [prompt ; option_j ; EOS] with the option mask on
option_j + EOS (the EOS says the answer ends there, so an option that is a prefix of another is
not favoured).

Data order: `batches(arrays, batch_size, seed)` is a grain MapDataset (shuffle per epoch, repeat
forever, batch), indexed by the micro-step number, so the data position of a run is one integer
that the checkpoint stores.
"""

import hashlib
import json
import os
import pathlib
import time
from typing import Sequence

import grain
import numpy as np

from graphloom_jax import atomic
from graphloom_jax.pipeline import prompts
from graphloom_jax.pipeline.prompts import ByteTokenizer, TextFormat  # noqa: F401 (re-export)

FEATURES_VERSION = 3  # bump when featurize's output changes: it keys the on-disk cache
# Config sections whose values change the features (the cache key includes them).
FEATURE_SECTIONS = ("graph", "retrieval", "memory", "fusion", "eval", "embedder")
_EXTRA = ("instance_id", "options", "answer_index", "gold_triples")
PREPARE_CHUNK = 64  # questions per pipeline call (bounds the batched query writer's work)


def featurize(system, kb, questions: Sequence, seq_len: int, log=lambda *_: None
              ) -> dict[str, np.ndarray]:
  """Stacked features [N, ...] for the questions (see the module docstring).

  system: a `pipeline.GraphLoom` (heads not needed) whose kb_sources hold the benchmark's
  knowledge source; kb: the benchmark (scene graphs by instance id)."""
  if not questions:
    raise ValueError("featurize: no questions given")
  for q in questions:
    for key in _EXTRA:
      if key not in q.extra:
        raise KeyError(f"question {q.qid!r}: record has no {key!r} (expected the SceneKB extra "
                       "fields)")
  num_options = len(questions[0].extra["options"])
  graphs = {}
  for inst in sorted({q.extra["instance_id"] for q in questions}):
    graphs[inst] = system.instance_graph(kb.scene_graph(inst), instance_id=inst)
  gold = [[dict(subject=s, relation=r, object=o) for s, r, o in q.extra["gold_triples"]]
          for q in questions]
  items = []
  for s in range(0, len(questions), PREPARE_CHUNK):
    chunk = questions[s:s + PREPARE_CHUNK]
    items += system.prepare([q.question for q in chunk],
                            [graphs[q.extra["instance_id"]] for q in chunk],
                            gold=gold[s:s + PREPARE_CHUNK])
    log(f"featurised {s + len(chunk)} / {len(questions)} questions")
  fmt = system.fmt
  target = system.config.train.target
  rows = []
  for q, it in zip(questions, items):
    where = f"question {q.qid!r}"
    # The prompt of the mode being trained (GraphLoom's, or a text baseline's with the same
    # retrieved subgraph as evidence lines).
    lines = [f"{t.verbalize()}." for t in it.evidence.triples] if target == "flat_rag_tuned" \
        else []
    prompt = prompts.mode_prompt_ids(fmt, target, q.question, lines)
    answer = q.answer_texts[0] if q.answers else q.extra["options"][q.extra["answer_index"]]
    row = prompts.token_row(prompt + fmt.answer_ids(answer), len(prompt), seq_len, fmt.pad,
                            where)
    options = list(q.extra["options"])
    if len(options) != num_options:
      raise ValueError(f"{where}: {len(options)} options, the first question has {num_options}")
    mc = [prompts.token_row(prompt + fmt.answer_ids(o), len(prompt), seq_len, fmt.pad,
                            f"{where} option {j}") for j, o in enumerate(options)]
    rows.append(dict(
        **row, **it.evidence.arrays,
        mc_tokens=np.stack([m["tokens"] for m in mc]),
        mc_valid=np.stack([m["valid"] for m in mc]),
        mc_option_mask=np.stack([m["output_mask"] for m in mc]),
        answer_index=np.int32(q.extra["answer_index"])))
  return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def cache_key(system, questions, seq_len: int) -> str:
  """What the features depend on: this module's version, the featurisation config sections,
  the embedder, the prompts and tokenizer, and the questions (ids and texts: two benchmarks drawn
  with different seeds share ids)."""
  cfg = system.config
  sections = {k: json.loads(cfg[k].to_json_best_effort()) for k in FEATURE_SECTIONS}
  return hashlib.sha256(json.dumps(
      [FEATURES_VERSION, sections, seq_len, system.embedder.model_id, prompts.PROMPT,
       prompts.PLAIN_PROMPT, type(system.fmt.tok).__name__, system.fmt.prompt_ids("probe"),
       [(q.qid, q.question, q.answer_texts) for q in questions]]
      # a text baseline's prompts differ (GraphLoom's key stays what it was)
      + ([cfg.train.target] if cfg.train.target != "graphloom" else []),
      sort_keys=True).encode()).hexdigest()[:16]


def cached_featurize(cache_dir: str | os.PathLike | None, name: str, system, kb, questions,
                     seq_len: int, log=print) -> dict[str, np.ndarray]:
  """featurize with a checksummed .npz cache keyed by `cache_key`; a corrupt cache file is
  reported and rebuilt."""
  if cache_dir is None:
    return featurize(system, kb, questions, seq_len, log)
  path = pathlib.Path(cache_dir) / f"{name}-{cache_key(system, questions, seq_len)}.npz"
  if path.exists():
    try:
      return atomic.load_npz_checked(path)
    except ValueError as e:
      log(f"features cache {path} is unusable ({e}); rebuilding it")
  arrays = featurize(system, kb, questions, seq_len, log)
  path.parent.mkdir(parents=True, exist_ok=True)
  atomic.save_npz_checked(path, arrays)
  return arrays


def load_scenekb(config, decoder, cache_dir=None, embedder=None, log=print):
  """Training and validation features of SceneKB through GraphLoom's pipeline
  (config.train.data, data_root, max_train_examples, eval_examples, seq_len), cached in
  `cache_dir`."""
  from graphloom_jax.data import scenekb
  from graphloom_jax.models import load_embedder
  from graphloom_jax.pipeline import GraphLoom
  from graphloom_jax.pipeline import ablation
  if not ablation.Ablation.from_config(config).is_default:
    raise ValueError(f"config.ablation={config.ablation.to_dict()}: the ablation switches act "
                     "at answering time on heads trained with the full system; train with the "
                     "defaults")
  if config.train.data != "scenekb":
    raise ValueError(f"config.train.data={config.train.data!r}: only 'scenekb' (the embedded "
                     "benchmark) is wired into training")
  root = config.train.data_root or None
  splits = {s: scenekb.load(s, root=root) for s in ("train", "validation")}
  embedder = embedder if embedder is not None else load_embedder(config.embedder.path or None)
  system = GraphLoom(config, decoder, embedder, kb_sources=[splits["train"].kb_source()])
  out = {}
  for split, limit in (("train", config.train.max_train_examples),
                       ("validation", config.train.eval_examples)):
    kb = splits[split]
    questions = kb.questions[:limit] if limit else kb.questions
    start = time.time()
    out[split] = cached_featurize(cache_dir, split, system, kb, questions, config.train.seq_len,
                                  log)
    log(f"{split}: {len(questions)} questions featurised in {time.time() - start:.1f}s")
  return out["train"], out["validation"]


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
