"""Training and validation data for GraphLoom: fixed-shape numpy features per question, served
through grain.

Shapes (per example; a batch adds B in front): S sequence length (`train.seq_len`), M slot-bank
size, E text-embedding width, R scene objects, Q evidence triples (= M / 2), J options.

The data are the train and validation splits of a trainable entry of the dataset registry
(`graphloom_jax.data.registry`; config.train.data): SceneKB, PathQuestion or WorldCup2014, each
question a `registry.Example` with its target answer, gold triples and instance graph.
Featurisation is GraphLoom's own pipeline (`pipeline.GraphLoom.prepare`): for every question
the instance graph, bounded
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

import collections.abc
import hashlib
import json
import os
import pathlib
import sys
import time
from typing import Callable, Sequence

import grain
import numpy as np
import tqdm
from absl import logging

from graphloom_jax import atomic
from graphloom_jax.data import registry
from graphloom_jax.pipeline import prompts

FEATURES_VERSION = 4  # bump when featurize's output changes: it keys the on-disk cache
# Config sections whose values change the features (the cache key includes them).
FEATURE_SECTIONS = ("graph", "retrieval", "memory", "fusion", "correct", "verify", "decode",
                    "embedder")
# Keys of those sections that act only in the heads or the decoder, never in featurisation
# (`GraphLoom.prepare` and the prompts): runs that differ only in them share one feature cache.
# A test featurises with each of them changed and compares the arrays.
HEADS_ONLY_KEYS = ("memory.first_layer", "fusion.dim", "fusion.per_layer", "fusion.slot_rank",
                   "fusion.token_values")
PREPARE_CHUNK = 64  # questions per pipeline call (bounds the batched query writer's work)


def featurize(system, kb, questions: Sequence, seq_len: int, progress: bool = False
              ) -> dict[str, np.ndarray]:
  """Stacked features [N, ...] for SceneKB questions (`mmqa.Question`s with the SceneKB extra
  fields; see the module docstring). system: a `pipeline.GraphLoom` (heads not needed) whose
  kb_sources hold the benchmark's knowledge source; kb: the benchmark (scene graphs by
  instance id)."""
  examples = [registry.scenekb_example(q) for q in questions]
  return featurize_examples(system, examples, lambda ex: kb.scene_graph(ex.instance_id),
                            seq_len, progress)


def featurize_paths(system, ds, questions: Sequence, seq_len: int, progress: bool = False
                    ) -> dict[str, np.ndarray]:
  """Stacked features [N, ...] for open-answer PathQuestion / WorldCup2014 questions
  (`graphloom_jax.data.pathqa`): each question's instance graph (`ds.instance_triples`), its
  answer path as the gold triples of the slot utility, its first gold answer as the target. No
  option rows: validation scores the greedy answer (`trainer.eval_step`)."""
  split = registry.PathQAData.of_questions(ds, questions)
  return featurize_examples(system, split.examples(0, len(split)), split.instance_triples,
                            seq_len, progress)


def featurize_examples(system, examples: Sequence[registry.Example],
                       instance_triples: Callable, seq_len: int, progress: bool = False
                       ) -> dict[str, np.ndarray]:
  """Stacked features [N, ...] for registry Examples (each with a target, gold triples and an
  instance_id): the instance graph `instance_triples(example)` built once per instance_id, the
  gold triples as the slot utility labels, `example.target` as the answer; multiple-choice rows
  when every example has options (all the same number), none otherwise."""
  if not examples:
    raise ValueError("featurize: no questions given")
  for ex in examples:
    if ex.target is None or ex.instance_id is None:
      raise ValueError(f"question {ex.qid!r}: no training target or instance graph (a "
                       f"dataset whose registry entry is trainable expected)")
  with_options = all(ex.options is not None for ex in examples)
  return featurize_rows(
      system, examples, LazyGraphs(system, examples, instance_triples),
      [[dict(subject=s, relation=r, object=o) for s, r, o in ex.gold_triples]
       for ex in examples], [ex.target for ex in examples],
      [(ex.options, ex.answer_index) for ex in examples] if with_options else None, seq_len,
      progress)


class LazyGraphs(collections.abc.Sequence):
  """The instance graph of each example, built when first asked for and forgotten after the
  example that uses it last, so that featurising holds the graphs of one chunk of questions,
  not of the whole split (WorldCup2014's 2,600-fact graphs take ~18 MB each with their
  embeddings and index)."""

  def __init__(self, system, examples: Sequence[registry.Example], instance_triples: Callable):
    self._system, self._examples, self._triples = system, examples, instance_triples
    self._last = {ex.instance_id: j for j, ex in enumerate(examples)}
    self._built = {}
    self.builds = 0  # graphs built so far (each instance_id once)

  def __len__(self):
    return len(self._examples)

  def __getitem__(self, j):
    if isinstance(j, slice):
      return [self[i] for i in range(*j.indices(len(self)))]
    ex = self._examples[j]
    graph = self._built.get(ex.instance_id)
    if graph is None:
      graph = self._system.instance_graph(self._triples(ex), instance_id=ex.instance_id)
      self.builds += 1
      self._built[ex.instance_id] = graph
    if self._last[ex.instance_id] <= j:
      del self._built[ex.instance_id]
    return graph


def featurize_rows(system, questions: Sequence, graphs: Sequence, gold: Sequence,
                   answers: Sequence[str], options: Sequence | None, seq_len: int,
                   progress: bool = False) -> dict[str, np.ndarray]:
  """The features of questions (with `qid` and `question`) given their instance graphs, gold
  triples and target answers; `options`, per question (option texts, gold index), adds the
  multiple-choice rows (all questions the same number of options), None leaves them out.
  progress: a progress bar over the questions (stderr)."""
  evidence = []
  with tqdm.tqdm(total=len(questions), desc="featurising", unit="question",
                 disable=not progress) as bar:
    for s in range(0, len(questions), PREPARE_CHUNK):
      chunk = questions[s:s + PREPARE_CHUNK]
      # Only the evidence is kept: a prepared item also holds its instance graph and index.
      evidence += [it.evidence for it in system.prepare(
          [q.question for q in chunk], graphs[s:s + PREPARE_CHUNK],
          gold=gold[s:s + PREPARE_CHUNK])]
      bar.update(len(chunk))
  fmt = system.fmt
  target = system.config.train.target
  num_options = len(options[0][0]) if options is not None else 0
  rows = []
  for j, (q, ev) in enumerate(zip(questions, evidence)):
    where = f"question {q.qid!r}"
    # The prompt of the mode being trained (GraphLoom's, or a text baseline's with the same
    # retrieved subgraph as evidence lines).
    lines = [f"{t.verbalize()}." for t in ev.triples] if target == "flat_rag_tuned" else []
    prompt = prompts.mode_prompt_ids(fmt, target, q.question, lines)
    row = prompts.token_row(prompt + fmt.answer_ids(answers[j]), len(prompt), seq_len, fmt.pad,
                            where)
    rows.append(dict(**row, **ev.arrays))
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


def cache_key(system, examples: Sequence[registry.Example], seq_len: int) -> str:
  """What the features depend on: this module's version, the featurisation config sections
  (less `HEADS_ONLY_KEYS`), the embedder, the prompts and tokenizer, and the questions (ids,
  texts and gold answers: two benchmarks drawn with different seeds share ids)."""
  cfg = system.config
  sections = {k: json.loads(cfg[k].to_json_best_effort()) for k in FEATURE_SECTIONS}
  for key in HEADS_ONLY_KEYS:
    section, name = key.split(".")
    sections[section].pop(name)
  return hashlib.sha256(json.dumps(
      [FEATURES_VERSION, sections, seq_len, system.embedder.model_id, prompts.PROMPT,
       prompts.PLAIN_PROMPT, type(system.fmt.tok).__name__, system.fmt.prompt_ids("probe"),
       [(ex.qid, ex.question, ex.gold["answers"]) for ex in examples]]
      # a text baseline's prompts differ (GraphLoom's key stays what it was)
      + ([cfg.train.target] if cfg.train.target != "graphloom" else []),
      sort_keys=True).encode()).hexdigest()[:16]


def cached_featurize(cache_dir: str | os.PathLike | None, name: str, system,
                     dataset: registry.Dataset, examples: Sequence[registry.Example],
                     seq_len: int, log=logging.info) -> dict[str, np.ndarray]:
  """`featurize_examples` of a registry dataset's examples with a checksummed .npz cache keyed
  by `cache_key`; a corrupt cache file is reported and rebuilt."""
  def build():
    return featurize_examples(system, examples, dataset.instance_triples, seq_len,
                              progress=True)
  if cache_dir is None:
    return build()
  path = pathlib.Path(cache_dir) / f"{name}-{cache_key(system, examples, seq_len)}.npz"
  if path.exists():
    try:
      return atomic.load_npz_checked(path)
    except ValueError as e:
      log(f"features cache {path} is unusable ({e}); rebuilding it")
  arrays = build()
  path.parent.mkdir(parents=True, exist_ok=True)
  atomic.save_npz_checked(path, arrays)
  return arrays


def open_training_split(config, split: str) -> registry.Dataset:
  """The split of the dataset config.train names (data, data_root, data_config,
  split_protocol), through the registry; a bad setting is an error naming the config key."""
  t = config.train
  trainable = tuple(k for k, e in registry.REGISTRY.items() if e.trainable)
  if t.data not in trainable:
    raise ValueError(f"config.train.data={t.data!r}: expected one of {trainable} (the "
                     "trainable entries of graphloom_jax.data.registry)")
  where = registry.Location(root=t.data_root or None, config=t.data_config or None,
                            protocol=t.split_protocol)
  try:
    registry.entry(t.data).check_config(config)
    return registry.open_dataset(t.data, split, where)
  except (ValueError, FileNotFoundError) as e:
    root = f"data_root={t.data_root!r}" if t.data_root else "data_root is empty"
    raise type(e)(f"config.train.data={t.data!r} (data_config={t.data_config!r}, {root}, "
                  f"split_protocol={t.split_protocol!r}): {e}") from None


def load_training_data(config, decoder, cache_dir=None, embedder=None, log=logging.info):
  """Training and validation features of the dataset `config.train.data` names (a trainable
  entry of the registry; data_root, data_config, split_protocol, max_train_examples,
  eval_examples, seq_len) through GraphLoom's pipeline, cached in `cache_dir`. The knowledge
  sources are the training split's (SceneKB's WordNet facts; none for the path datasets,
  whose instance graph is already the KB neighbourhood)."""
  from graphloom_jax.models import embedder_from_config
  from graphloom_jax.pipeline import GraphLoom
  from graphloom_jax.pipeline import ablation
  if not ablation.Ablation.from_config(config).is_default:
    raise ValueError(f"config.ablation={config.ablation.to_dict()}: the ablation switches act "
                     "at answering time on heads trained with the full system; train with the "
                     "defaults")
  t = config.train
  splits = {s: open_training_split(config, s) for s in ("train", "validation")}
  embedder = embedder if embedder is not None else embedder_from_config(config.embedder)
  system = GraphLoom(config, decoder, embedder, kb_sources=list(splits["train"].kb_sources))
  out = {}
  for split, limit in (("train", t.max_train_examples), ("validation", t.eval_examples)):
    ds = splits[split]
    examples = ds.examples(0, min(limit, len(ds)) if limit else len(ds))
    start = time.time()
    name = f"{t.data_config}-{split}" if t.data_config else split
    out[split] = cached_featurize(cache_dir, name, system, ds, examples, t.seq_len, log)
    log(f"{split}: {len(examples)} questions featurised in {time.time() - start:.1f}s")
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


def batches(arrays: dict[str, np.ndarray], batch_size: int, seed: int,
            group_by_length: int = 0) -> grain.MapDataset:
  """Infinite shuffled batches; element i is micro-batch i (a new order every epoch).
  group_by_length=G > 0: each epoch's shuffled order is cut into chunks of G batches, each chunk
  sorted by row length (`row_lengths`) and cut into batches, and the batches shuffled, so a
  batch holds rows of similar length and `trim_batch` cuts little padding (the
  length-grouped sampling of variable-length training)."""
  source = ArraySource(arrays)
  if len(source) < batch_size:
    raise ValueError(f"{len(source)} examples cannot fill one batch of {batch_size}")
  if group_by_length < 0:
    raise ValueError(f"group_by_length must be >= 0, got {group_by_length}")
  if group_by_length:
    return grain.MapDataset.source(_GroupedBatches(source, batch_size, seed, group_by_length))
  return (grain.MapDataset.source(source).shuffle(seed=seed).repeat(None)
          .batch(batch_size, drop_remainder=True))


class _GroupedBatches:
  """Random access to the length-grouped batches of `batches` (element i: micro-batch i)."""

  def __init__(self, source: ArraySource, batch_size: int, seed: int, group: int):
    self.source, self.batch_size, self.seed, self.group = source, batch_size, seed, group
    self.lengths = row_lengths(source.arrays)
    self.per_epoch = len(source) // batch_size
    self._cached = (None, None)

  def __len__(self):
    return sys.maxsize

  def epoch_order(self, epoch: int) -> np.ndarray:
    """[per_epoch, batch_size] example indices of one epoch's batches, in order."""
    if self._cached[0] != epoch:
      rng = np.random.default_rng([self.seed, epoch])
      perm = rng.permutation(len(self.source))[:self.per_epoch * self.batch_size]
      chunk = self.group * self.batch_size
      order = np.concatenate([c[np.argsort(-self.lengths[c], kind="stable")]
                              for c in np.split(perm, range(chunk, len(perm), chunk))])
      self._cached = (epoch, order.reshape(self.per_epoch, self.batch_size)[
          rng.permutation(self.per_epoch)])
    return self._cached[1]

  def __getitem__(self, i):
    epoch, k = divmod(int(i), self.per_epoch)
    idx = self.epoch_order(epoch)[k]
    return {key: v[idx] for key, v in self.source.arrays.items()}


# The arrays whose axis `STEP_AXES[key]` runs over a row's steps (the rest: per slot or per row).
STEP_AXES = {"tokens": 1, "valid": 1, "targets": 1, "loss_mask": 1, "output_mask": 1,
             "mc_tokens": 2, "mc_valid": 2, "mc_option_mask": 2}


def row_lengths(arrays: dict[str, np.ndarray]) -> np.ndarray:
  """[N] the tokens of each example's longest row (its answer row or an option row)."""
  n = np.asarray(arrays["valid"]).sum(-1)
  if "mc_valid" in arrays:
    n = np.maximum(n, np.asarray(arrays["mc_valid"]).sum(-1).max(-1))
  return n


def trim_batch(batch: dict[str, np.ndarray], smallest: int = 64) -> dict[str, np.ndarray]:
  """The batch cut to the shortest power-of-two length (`prompts.power_bucket`, at least
  `smallest`, at most the featurised S) that holds every row: only right padding goes, which no
  loss, score or earlier step reads (causal attention), so the step computes the same values."""
  s = batch["tokens"].shape[1]
  length = min(s, prompts.power_bucket(int(row_lengths(batch).max()), smallest))
  if length == s:
    return batch
  return {k: np.take(v, np.arange(length), axis=STEP_AXES[k]) if k in STEP_AXES else v
          for k, v in batch.items()}


def answer_steps(arrays: dict[str, np.ndarray], smallest: int = 8) -> int:
  """The width of the answer window the jitted steps compute logits for: the most answer steps
  (`loss_mask`) of any row of `arrays`, rounded up to a power of two (at least `smallest`, at
  most S). A row's answer steps are contiguous (`prompts.token_row`), so a window of this width
  from its first answer step holds all of them."""
  most = int(np.asarray(arrays["loss_mask"]).sum(axis=1).max(initial=0))
  return min(arrays["loss_mask"].shape[1], prompts.power_bucket(max(most, 1), smallest))


def option_steps(arrays: dict[str, np.ndarray], smallest: int = 8) -> int:
  """The width of the window of option steps the jitted steps compute option logits for: the
  most tokens of any option (`mc_option_mask`, its EOS included) rounded up to a power of two
  (at least `smallest`); 0 for rows without options."""
  if "mc_option_mask" not in arrays:
    return 0
  most = int(np.asarray(arrays["mc_option_mask"]).sum(axis=-1).max(initial=0))
  return prompts.power_bucket(max(most, 1), smallest)


def eval_batches(arrays: dict[str, np.ndarray], batch_size: int):
  """Validation in order, the last batch padded by repeating its first row; yields
  (batch, number of real rows)."""
  n = len(ArraySource(arrays))
  for start in range(0, n, batch_size):
    idx = np.arange(start, min(start + batch_size, n))
    real = len(idx)
    idx = np.concatenate([idx, np.full(batch_size - real, idx[0])])
    yield {k: v[idx] for k, v in arrays.items()}, real
