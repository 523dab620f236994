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
import tqdm
from absl import logging

from graphloom_jax import atomic
from graphloom_jax.pipeline import prompts

FEATURES_VERSION = 3  # bump when featurize's output changes: it keys the on-disk cache
# Config sections whose values change the features (the cache key includes them).
FEATURE_SECTIONS = ("graph", "retrieval", "memory", "fusion", "correct", "verify", "decode",
                    "embedder")
_EXTRA = ("instance_id", "options", "answer_index", "gold_triples")
PREPARE_CHUNK = 64  # questions per pipeline call (bounds the batched query writer's work)


def featurize(system, kb, questions: Sequence, seq_len: int, progress: bool = False
              ) -> dict[str, np.ndarray]:
  """Stacked features [N, ...] for SceneKB questions (see the module docstring).

  system: a `pipeline.GraphLoom` (heads not needed) whose kb_sources hold the benchmark's
  knowledge source; kb: the benchmark (scene graphs by instance id)."""
  if not questions:
    raise ValueError("featurize: no questions given")
  for q in questions:
    for key in _EXTRA:
      if key not in q.extra:
        raise KeyError(f"question {q.qid!r}: record has no {key!r} (expected the SceneKB extra "
                       "fields)")
  graphs = {}
  for inst in sorted({q.extra["instance_id"] for q in questions}):
    graphs[inst] = system.instance_graph(kb.scene_graph(inst), instance_id=inst)
  return featurize_rows(
      system, questions, [graphs[q.extra["instance_id"]] for q in questions],
      [[dict(subject=s, relation=r, object=o) for s, r, o in q.extra["gold_triples"]]
       for q in questions],
      [q.answer_texts[0] if q.answers else q.extra["options"][q.extra["answer_index"]]
       for q in questions],
      [(list(q.extra["options"]), q.extra["answer_index"]) for q in questions], seq_len,
      progress)


def featurize_paths(system, ds, questions: Sequence, seq_len: int, progress: bool = False
                    ) -> dict[str, np.ndarray]:
  """Stacked features [N, ...] for open-answer PathQuestion / WorldCup2014 questions
  (`graphloom_jax.data.pathqa`): each question's instance graph (`ds.instance_triples`), its
  answer path as the gold triples of the slot utility, its first gold answer as the target. No
  option rows: validation scores the greedy answer (`trainer.eval_step`)."""
  if not questions:
    raise ValueError("featurize_paths: no questions given")
  graphs = {}
  for q in questions:  # paraphrases of one path share their instance graph
    key = (q.topic, q.hops, q.facts)
    if key not in graphs:
      graphs[key] = system.instance_graph(ds.instance_triples(q), instance_id=q.qid)
  return featurize_rows(
      system, questions, [graphs[(q.topic, q.hops, q.facts)] for q in questions],
      [[dict(subject=t.subject, relation=t.relation, object=t.object)
        for t in ds.gold_triples(q)] for q in questions],
      [q.answers[0] for q in questions], None, seq_len, progress)


def featurize_rows(system, questions: Sequence, graphs: Sequence, gold: Sequence,
                   answers: Sequence[str], options: Sequence | None, seq_len: int,
                   progress: bool = False) -> dict[str, np.ndarray]:
  """The features of questions (with `qid` and `question`) given their instance graphs, gold
  triples and target answers; `options`, per question (option texts, gold index), adds the
  multiple-choice rows (all questions the same number of options), None leaves them out.
  progress: a progress bar over the questions (stderr)."""
  items = []
  with tqdm.tqdm(total=len(questions), desc="featurising", unit="question",
                 disable=not progress) as bar:
    for s in range(0, len(questions), PREPARE_CHUNK):
      chunk = questions[s:s + PREPARE_CHUNK]
      items += system.prepare([q.question for q in chunk], graphs[s:s + PREPARE_CHUNK],
                              gold=gold[s:s + PREPARE_CHUNK])
      bar.update(len(chunk))
  fmt = system.fmt
  target = system.config.train.target
  num_options = len(options[0][0]) if options is not None else 0
  rows = []
  for j, (q, it) in enumerate(zip(questions, items)):
    where = f"question {q.qid!r}"
    # The prompt of the mode being trained (GraphLoom's, or a text baseline's with the same
    # retrieved subgraph as evidence lines).
    lines = [f"{t.verbalize()}." for t in it.evidence.triples] if target == "flat_rag_tuned" \
        else []
    prompt = prompts.mode_prompt_ids(fmt, target, q.question, lines)
    row = prompts.token_row(prompt + fmt.answer_ids(answers[j]), len(prompt), seq_len, fmt.pad,
                            where)
    rows.append(dict(**row, **it.evidence.arrays))
    if options is None:
      continue
    texts, gold_index = options[j]
    if len(texts) != num_options:
      raise ValueError(f"{where}: {len(texts)} options, the first question has {num_options}")
    mc = [prompts.token_row(prompt + fmt.answer_ids(o), len(prompt), seq_len, fmt.pad,
                            f"{where} option {k}") for k, o in enumerate(texts)]
    rows[-1].update(mc_tokens=np.stack([m["tokens"] for m in mc]),
                    mc_valid=np.stack([m["valid"] for m in mc]),
                    mc_option_mask=np.stack([m["output_mask"] for m in mc]),
                    answer_index=np.int32(gold_index))
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
                     seq_len: int, log=logging.info, featurizer=None) -> dict[str, np.ndarray]:
  """`featurizer(system, kb, questions, seq_len, progress=True)` (default: SceneKB's
  `featurize`) with a checksummed .npz cache keyed by `cache_key`; a corrupt cache file is
  reported and rebuilt."""
  featurizer = featurizer or featurize
  if cache_dir is None:
    return featurizer(system, kb, questions, seq_len, progress=True)
  path = pathlib.Path(cache_dir) / f"{name}-{cache_key(system, questions, seq_len)}.npz"
  if path.exists():
    try:
      return atomic.load_npz_checked(path)
    except ValueError as e:
      log(f"features cache {path} is unusable ({e}); rebuilding it")
  arrays = featurizer(system, kb, questions, seq_len, progress=True)
  path.parent.mkdir(parents=True, exist_ok=True)
  atomic.save_npz_checked(path, arrays)
  return arrays


def load_scenekb(config, decoder, cache_dir=None, embedder=None, log=logging.info):
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
    raise ValueError(f"config.train.data={config.train.data!r}: load_scenekb reads 'scenekb'; "
                     "load_training_data picks the reader")
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


PATH_DATASETS = ("pathquestion", "wc2014")
DATASETS = ("scenekb",) + PATH_DATASETS


def load_pathqa(config, decoder, cache_dir=None, embedder=None, log=logging.info):
  """Training and validation features of a PathQuestion / WorldCup2014 dataset
  (config.train.data, data_config, data_root, split_protocol, max_train_examples,
  eval_examples, seq_len), open answers, no knowledge-base enrichment (the instance graph is
  already the KB neighbourhood), cached in `cache_dir`."""
  from graphloom_jax.data import pathquestion, wc2014
  from graphloom_jax.models import load_embedder
  from graphloom_jax.pipeline import GraphLoom
  t = config.train
  reader = {"pathquestion": pathquestion, "wc2014": wc2014}.get(t.data)
  if reader is None:
    raise ValueError(f"config.train.data={t.data!r}: load_pathqa reads {PATH_DATASETS}")
  if t.data_config not in reader.NAMES:
    raise ValueError(f"config.train.data_config={t.data_config!r}: expected one of "
                     f"{reader.NAMES} for {t.data}")
  if not t.data_root:
    raise ValueError(f"config.train.data_root is empty: give the folder with the {t.data} "
                     "release files")
  if config.graph.singularize:
    raise ValueError("config.graph.singularize=True would rename KB entities to singular forms "
                     "('Hard Times' -> 'hard time') that are not their answers; set it to False "
                     "(configs/pathquestion.py does)")
  ds = reader.load(t.data_config, root=t.data_root)
  embedder = embedder if embedder is not None else load_embedder(config.embedder.path or None)
  system = GraphLoom(config, decoder, embedder, kb_sources=[])
  out = {}
  for split, limit in (("train", t.max_train_examples), ("validation", t.eval_examples)):
    questions = ds.split(split, t.split_protocol)
    questions = questions[:limit] if limit else questions
    start = time.time()
    out[split] = cached_featurize(cache_dir, f"{t.data_config}-{split}", system, ds, questions,
                                  t.seq_len, log, featurizer=featurize_paths)
    log(f"{split}: {len(questions)} questions featurised in {time.time() - start:.1f}s")
  return out["train"], out["validation"]


def load_training_data(config, decoder, cache_dir=None, embedder=None, log=logging.info):
  """The training and validation features `config.train.data` names (`DATASETS`)."""
  if config.train.data == "scenekb":
    return load_scenekb(config, decoder, cache_dir, embedder, log)
  if config.train.data in PATH_DATASETS:
    return load_pathqa(config, decoder, cache_dir, embedder, log)
  raise ValueError(f"config.train.data={config.train.data!r}: expected one of {DATASETS}")


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
