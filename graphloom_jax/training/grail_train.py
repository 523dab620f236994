"""InfoNCE training of GRAIL's modality adapters and gap gate, and the hybrid selector fit.

Shapes: N training instances, B batch, E evidence slots, H hard negatives, P pool items,
D width.

Two phases, as in GRAIL's two-stage design (unified alignment, then gap-aware search):
  align  the modality adapters: InfoNCE of the adapted question against each of its gold
         items (every modality) with in-batch and distractor negatives
         (`build_alignment_examples`);
  gate   the gap gate, adapters frozen (unless gate_adapters): InfoNCE of the steered query
         q_gap against the missing item of an Evidence Set Completion instance, with in-batch
         negatives and hard negatives: the already-covered evidence (the context itself) and
         topically close non-gold items (the question's `distractors`: same-entity triples in
         the embedded benchmark, candidate documents in MMQA) (`build_examples`).
Freezing the aligned space in the gate phase keeps the four methods comparable: they all search
the same space and differ only in how the query is steered.

`train` returns the parameters with the best validation InfoNCE of each phase (orbax
CheckpointManager per phase; a rerun resumes from the latest step) and the history;
`fit_hybrid_selector` then labels training instances by which specialist ranks the missing item
higher and fits the selector.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import tqdm
from absl import logging

from graphloom_jax.ops import steering
from graphloom_jax.retrieval import grail
from graphloom_jax.data import grail_sets
from graphloom_jax.retrieval import grail_data
from graphloom_jax.training import metric_writers


@dataclasses.dataclass
class Examples:
  question: np.ndarray  # int32 [N]
  context: np.ndarray  # int32 [N,E], -1 pad
  missing: np.ndarray  # int32 [N]
  negatives: np.ndarray  # int32 [N,H], -1 pad

  def __len__(self):
    return len(self.missing)

  def take(self, rows) -> "Examples":
    return Examples(self.question[rows], self.context[rows], self.missing[rows],
                    self.negatives[rows])


def build_examples(es: grail_data.EvidenceSet, question_indices, max_evidence: int,
                   num_negatives: int, seed: int = 0) -> Examples:
  inst = grail_data.completion_instances(es, question_indices, max_evidence)
  rng = np.random.default_rng(seed)
  negs = np.full((len(inst), num_negatives), -1, np.int32)
  for n in range(len(inst)):
    q = es.questions[inst.question[n]]
    covered = [c for c in inst.context[n] if c >= 0]
    gold = set(q.gold)
    others = [d for d in q.distractors if d not in gold]
    room = max(num_negatives - len(covered), 0)
    if len(others) > room:
      others = list(rng.choice(others, room, replace=False))
    row = (covered + others)[:num_negatives]
    negs[n, :len(row)] = row
  return Examples(inst.question, inst.context, inst.missing, negs)


def build_alignment_examples(es: grail_data.EvidenceSet, question_indices,
                             num_negatives: int, seed: int = 0) -> Examples:
  """One (question, gold item) instance per gold item of every question, empty context, the
  question's distractors as hard negatives."""
  rng = np.random.default_rng(seed)
  qs, pos, negs = [], [], []
  for qi in question_indices:
    q = es.questions[qi]
    others = [d for d in q.distractors if d not in set(q.gold)]
    for g in q.gold:
      pick = list(rng.choice(others, num_negatives, replace=False)) if len(others) > \
          num_negatives else others
      qs.append(qi)
      pos.append(g)
      negs.append(pick + [-1] * (num_negatives - len(pick)))
  n = len(qs)
  return Examples(np.asarray(qs, np.int32), np.full((n, 1), -1, np.int32),
                  np.asarray(pos, np.int32),
                  np.asarray(negs, np.int32).reshape(n, num_negatives))


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """Optimisation settings (configs/grail.py, section grail.train)."""
  align_steps: int = 300
  align_learning_rate: float = 1e-3
  gate_steps: int = 300
  gate_learning_rate: float = 1e-2
  gate_adapters: bool = False  # also fine-tune the adapters in the gate phase
  batch_size: int = 64
  warmup_steps: int = 20
  weight_decay: float = 1e-4
  clip_norm: float = 1.0
  temperature: float = 0.05
  align_weight: float = 0.5  # alignment term kept in the gate phase when gate_adapters
  eval_every: int = 25
  max_evidence: int = 8
  num_negatives: int = 16
  seed: int = 0

  @classmethod
  def from_config(cls, c) -> "TrainSettings":
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(c.keys()) - fields)
    if unknown:
      raise ValueError(f"grail.train has unknown keys {unknown}; expected a subset of "
                       f"{sorted(fields)}")
    return cls(**{k: c[k] for k in c.keys()})


def _encode(params, batch, data, cfg: grail.GrailConfig):
  """Adapted question [B,D], context [B,E,D] + mask, positive [B,D], negatives [B,H,D] + mask."""
  pool, pool_mod, questions = data
  ad = params["adapters"]

  def items(ids):
    flat = ids.reshape(-1)
    safe = jnp.where(flat >= 0, flat, 0)
    v = grail.adapt(ad, pool[safe], pool_mod[safe])
    return v.reshape(ids.shape + (v.shape[-1],)), ids >= 0

  q = grail.adapt(ad, questions[jnp.maximum(batch["question"], 0)],
                  jnp.full(batch["question"].shape, cfg.query_modality))
  ev, mask = items(batch["context"])
  pos, _ = items(batch["missing"])
  neg, neg_mask = items(batch["negatives"])
  return q, ev, mask, pos, neg, neg_mask


def alignment_loss(params, batch, data, cfg: grail.GrailConfig, s: TrainSettings):
  """Unified alignment: InfoNCE of the adapted question against each gold item (any modality)
  with in-batch and distractor negatives. Returns (loss, loss)."""
  q, _, _, pos, neg, neg_mask = _encode(params, batch, data, cfg)
  loss = steering.info_nce(q, pos, neg, neg_mask, s.temperature, batch["missing"],
                           batch["question"] >= 0)
  return loss, loss


def gate_loss(params, batch, data, cfg: grail.GrailConfig, s: TrainSettings):
  """Steering InfoNCE of q_gap against the missing item (hard negatives: covered evidence and
  distractors), plus the alignment term when the adapters train too. Returns (total,
  steering InfoNCE)."""
  valid = batch["question"] >= 0
  q, ev, mask, pos, neg, neg_mask = _encode(params, batch, data, cfg)
  h = steering.context_vector(q, ev, mask, cfg.tau)
  q_gap = steering.subtractive_steer(q, h, steering.gap_gate(params["gate"], q, h))
  loss = steering.info_nce(q_gap, pos, neg, neg_mask, s.temperature, batch["missing"], valid)
  total = loss
  if s.gate_adapters:
    total = total + s.align_weight * steering.info_nce(q, pos, None, None, s.temperature,
                                                       batch["missing"], valid)
  return total, loss


def _pad_batch(ex: Examples, rows: np.ndarray, size: int) -> dict:
  pad = size - len(rows)
  b = ex.take(rows)
  return {"question": np.pad(b.question, (0, pad), constant_values=-1),
          "context": np.pad(b.context, ((0, pad), (0, 0)), constant_values=-1),
          "missing": np.pad(b.missing, (0, pad), constant_values=-1),
          "negatives": np.pad(b.negatives, ((0, pad), (0, 0)), constant_values=-1)}


def make_optimizer(learning_rate: float, num_steps: int, s: TrainSettings, frozen=()):
  """AdamW with warm-up + cosine decay and clipping; top-level parameter groups named in
  `frozen` get no updates."""
  schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, s.warmup_steps,
                                                max(num_steps, s.warmup_steps + 1),
                                                learning_rate * 1e-2)
  tx = optax.chain(optax.clip_by_global_norm(s.clip_norm),
                   optax.adamw(schedule, weight_decay=s.weight_decay))
  if not frozen:
    return tx
  return optax.multi_transform(
      {"train": tx, "frozen": optax.set_to_zero()},
      lambda p: {k: jax.tree.map(lambda _: "frozen" if k in frozen else "train", v)
                 for k, v in p.items()})


def evaluate_loss(loss_fn, params, ex: Examples, data, batch_size: int) -> float:
  """Mean of loss_fn's metric over fixed, consecutive validation batches."""
  total, count = 0.0, 0
  for start in range(0, len(ex), batch_size):
    rows = np.arange(start, min(start + batch_size, len(ex)))
    total += float(loss_fn(params, _pad_batch(ex, rows, batch_size), data)) * len(rows)
    count += len(rows)
  return total / max(count, 1)


@dataclasses.dataclass(frozen=True)
class _Phase:
  """One training phase: `loss_fn(params, batch, data) -> (loss, metric)` over its examples,
  with the parameter groups in `frozen` held fixed."""
  name: str
  loss_fn: Callable
  frozen: tuple
  train_ex: Examples
  val_ex: Examples
  num_steps: int
  learning_rate: float


def _checkpoints(workdir, name: str):
  """orbax's manager for a phase (None without a workdir): workdir/checkpoints/<name>, the two
  best steps by validation loss kept."""
  if workdir is None:
    return None
  return ocp.CheckpointManager(
      pathlib.Path(workdir).absolute() / "checkpoints" / name,
      options=ocp.CheckpointManagerOptions(max_to_keep=2, best_fn=lambda m: m["val_loss"],
                                           best_mode="min"))


def _resume(mngr, params, opt_state, name: str, log):
  """(params, opt_state, step) of the latest checkpoint kept, else the given ones at step 0."""
  if mngr is None or mngr.latest_step() is None:
    return params, opt_state, 0
  start = mngr.latest_step()
  state = mngr.restore(start, args=ocp.args.StandardRestore(
      {"params": params, "opt_state": opt_state}))
  log(f"{name}: resumed from step {start}")
  return state["params"], state["opt_state"], start


def _record(mngr, writer, step: int, scalars: dict, params, opt_state, val_loss: float):
  """An evaluation's scalars to the writer and its state to a checkpoint (either may be None)."""
  if writer is not None:
    writer.write_scalars(step, scalars)
  if mngr is not None:
    mngr.save(step, args=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
              metrics={"val_loss": val_loss})


def _best_kept(mngr, best, params, opt_state):
  """(val, step, params) of the manager's best step: after a resume the in-memory best covers
  only this run, the manager knows every step."""
  mngr.wait_until_finished()
  best_step = mngr.best_step()
  if best_step is not None and best_step != best[1]:
    restored = mngr.restore(best_step, args=ocp.args.StandardRestore(
        {"params": params, "opt_state": opt_state}))
    best = (float(mngr.metrics(best_step)["val_loss"]), best_step, restored["params"])
  mngr.close()
  return best


def _run_phase(phase: _Phase, params, data, s: TrainSettings, workdir, log, writer=None):
  """Trains phase.loss_fn for phase.num_steps; returns the parameters with the best validation
  metric and the phase history. With a workdir, orbax keeps checkpoints under
  workdir/checkpoints/<name> and a rerun resumes from the latest step kept (the two best by
  validation loss are kept). writer: a `metric_writers.MetricWriter` receiving
  <name>/train_infonce and <name>/val_infonce at every evaluation."""
  name, loss_fn, num_steps = phase.name, phase.loss_fn, phase.num_steps
  train_ex, val_ex = phase.train_ex, phase.val_ex
  tx = make_optimizer(phase.learning_rate, num_steps, s, phase.frozen)
  opt_state = tx.init(params)

  @jax.jit
  def step(params, opt_state, batch, data):
    (_, metric), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, data)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, metric

  metric_fn = jax.jit(lambda p, b, d: loss_fn(p, b, d)[1])
  mngr = _checkpoints(workdir, name)
  params, opt_state, start = _resume(mngr, params, opt_state, name, log)
  val0 = evaluate_loss(metric_fn, params, val_ex, data, s.batch_size)
  best = (val0, start, params)
  history = {"step": [start], "train_loss": [None], "val_loss": [val0]}
  log(f"{name} step {start}: val InfoNCE {val0:.4f} ({len(train_ex)} train / {len(val_ex)} val "
      "instances)")
  if start == 0:
    # The starting point competes too: training may not beat it on validation.
    _record(mngr, writer, 0, {f"{name}/val_infonce": val0}, params, opt_state, val0)
  rng = np.random.default_rng(s.seed + start)
  order, cursor = rng.permutation(len(train_ex)), 0
  t0, losses = time.perf_counter(), []
  bar = tqdm.tqdm(total=num_steps, initial=start, desc=name, unit="step", dynamic_ncols=True)
  for it in range(start + 1, num_steps + 1):
    if cursor + s.batch_size > len(order):
      order, cursor = rng.permutation(len(train_ex)), 0
    rows = order[cursor:cursor + s.batch_size]
    cursor += s.batch_size
    params, opt_state, metric = step(params, opt_state,
                                     _pad_batch(train_ex, rows, s.batch_size), data)
    losses.append(float(metric))
    bar.update(1)
    if it % s.eval_every == 0 or it == num_steps:
      val = evaluate_loss(metric_fn, params, val_ex, data, s.batch_size)
      train_loss = float(np.mean(losses))
      history["step"].append(it)
      history["train_loss"].append(train_loss)
      history["val_loss"].append(val)
      log(f"{name} step {it}: train InfoNCE {train_loss:.4f} val InfoNCE {val:.4f} "
          f"({time.perf_counter() - t0:.1f}s)")
      bar.set_postfix(val_infonce=f"{val:.4f}")
      _record(mngr, writer, it, {f"{name}/train_infonce": train_loss,
                                 f"{name}/val_infonce": val}, params, opt_state, val)
      losses = []
      if val < best[0]:
        best = (val, it, params)
  bar.close()
  if mngr is not None:
    best = _best_kept(mngr, best, params, opt_state)
  history["best_step"] = best[1]
  history["best_val_loss"] = best[0]
  return best[2], history


def train(es: grail_data.EvidenceSet, emb: grail_data.EmbeddedSet, cfg: grail.GrailConfig,
          s: TrainSettings, workdir=None, log=logging.info):
  """Phase 1 (align): the adapters by alignment InfoNCE on every gold item of the train
  questions. Phase 2 (gate): the gap gate by steering InfoNCE on the train split's Evidence Set
  Completion instances, adapters frozen unless s.gate_adapters. Each phase keeps its best
  validation step. With a workdir, the InfoNCE curves go to workdir/metrics.jsonl and
  workdir/tensorboard (`metric_writers.MetricWriter`, hparams once). Returns
  (params, {'align': history, 'gate': history})."""
  train_q, val_q = es.select(["train"]), es.select(["validation"])
  align_train = build_alignment_examples(es, train_q, s.num_negatives, s.seed)
  align_val = build_alignment_examples(es, val_q, s.num_negatives, s.seed + 1)
  gate_train = build_examples(es, train_q, s.max_evidence, s.num_negatives, s.seed)
  gate_val = build_examples(es, val_q, s.max_evidence, s.num_negatives, s.seed + 1)
  if len(gate_train) == 0 or len(gate_val) == 0:
    raise ValueError(f"{es.name}: need train and validation questions with >= 2 gold items, got "
                     f"{len(gate_train)} train and {len(gate_val)} validation instances")
  data = (jnp.asarray(emb.pool), jnp.asarray(es.pool.modality), jnp.asarray(emb.questions))
  params = grail.init_params(jax.random.key(s.seed), cfg)
  history = {}
  writer = metric_writers.MetricWriter(workdir) if workdir is not None else None
  if writer is not None:
    writer.write_hparams({"data": es.name, "settings": dataclasses.asdict(s),
                          "model": dataclasses.asdict(cfg)})
  try:
    if s.align_steps > 0:
      align = _Phase("align", lambda p, b, d: alignment_loss(p, b, d, cfg, s), ("gate",),
                     align_train, align_val, s.align_steps, s.align_learning_rate)
      params, history["align"] = _run_phase(align, params, data, s, workdir, log, writer)
    gate = _Phase("gate", lambda p, b, d: gate_loss(p, b, d, cfg, s),
                  () if s.gate_adapters else ("adapters",), gate_train, gate_val, s.gate_steps,
                  s.gate_learning_rate)
    params, history["gate"] = _run_phase(gate, params, data, s, workdir, log, writer)
  finally:
    if writer is not None:
      writer.close()
  return params, history


def fit_hybrid_selector(params: dict, cfg: grail.GrailConfig, es: grail_data.EvidenceSet,
                        emb: grail_data.EmbeddedSet, s: TrainSettings, index_factory=None,
                        log=logging.info) -> tuple[dict, dict]:
  """Labels train instances by which specialist ranks the missing item higher (ties dropped),
  fits the selector, and reports its accuracy on the validation split. Returns (params with
  'selector', report)."""
  retriever = grail.GrailRetriever(params, cfg, emb.pool, es.pool.modality, index_factory)
  report = {}
  sets = {}
  for split in ("train", "validation"):
    inst = grail_data.completion_instances(es, es.select([split], min_gold=2), s.max_evidence)
    q = retriever.encode_queries(emb.questions[inst.question])
    r_add = retriever.ranks(q, inst.context, inst.missing, "additive")
    r_sub = retriever.ranks(q, inst.context, inst.missing, "grail")
    keep = r_add != r_sub
    ev, mask, mod = retriever.context(inst.context)
    feats = np.asarray(grail.selector_features(params["gate"], q, ev, mask, mod, tau=cfg.tau,
                                               num_modalities=len(cfg.modalities)))
    sets[split] = (feats[keep], (r_sub < r_add)[keep].astype(np.float32))
    report[f"{split}_instances"] = int(len(inst))
    report[f"{split}_labelled"] = int(keep.sum())
    report[f"{split}_subtractive_wins"] = float(sets[split][1].mean()) if keep.any() else 0.0
  if len(sets["train"][1]) == 0:
    raise ValueError(f"{es.name}: additive and subtractive rank every train instance equally; "
                     "no selector labels")
  selector = grail.fit_selector(*sets["train"])
  for split, (x, y) in sets.items():
    pred = np.asarray(grail.selector_logit(selector, x)) >= 0
    report[f"{split}_accuracy"] = float((pred == (y > 0)).mean()) if len(y) else float("nan")
  log(f"selector: {report}")
  return {**params, "selector": selector}, report


def train_from_config(config, output_dir, log=logging.info):
  """Loads the configured data, trains, fits the selector, saves; returns (params, cfg,
  history)."""
  from graphloom_jax.models import embedder_from_config

  g = config.grail
  out = pathlib.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  es = grail_sets.from_config(g)
  emb = es.embed(embedder_from_config(config.embedder),
                 g.cache_dir or str(out / "embeddings"))
  settings = TrainSettings.from_config(g.train)
  cfg = grail.GrailConfig(dim=emb.pool.shape[1], tau=g.tau, gate=g.gate)
  params, history = train(es, emb, cfg, settings, workdir=out, log=log)
  params, history["selector"] = fit_hybrid_selector(params, cfg, es, emb, settings, log=log)
  grail.save(out / "grail", params, cfg)
  history["data"] = es.name
  history["notes"] = es.notes
  (out / "train_history.json").write_text(json.dumps(history, indent=1))
  return params, cfg, history
