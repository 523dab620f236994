"""GraphLoom training with a frozen backbone (docs/method.md §6).

Shapes: B micro-batch, T sequence length, V vocabulary, M slots, J options, L_m memory layers,
N heads.

What is trained: the heads of `models.heads.GraphLoomHeads` (slot projection, fusion prefix,
router), i.e. their `nnx.Param`s. The decoder's weights enter the jitted step as a separate,
non-differentiated argument: they get no gradient, no optimizer state, and are never written.
The router's calibration variables are fitted, not trained (they ride along in `rest`).

One micro-step = one forward/backward over a micro-batch of `train.batch_size` rows;
`optax.MultiSteps` applies an AdamW update every `train.grad_accum` micro-steps (an optimizer
step, the unit of `step`, logging, evaluation and checkpoints). Schedule: linear warm-up to
`learning_rate` over `warmup_steps`, cosine to `end_learning_rate` at `num_steps`; gradients
clipped to global norm `clip_norm` before AdamW (b1, b2, weight_decay from the config).

Data parallel: a 1-D mesh ("data") over the devices; batches are sharded along their first
axis, parameters and optimizer state replicated; `jax.jit` inserts the gradient all-reduce.

Checkpoints (orbax, WORKDIR/checkpoints latest two, WORKDIR/best the best S_val): params,
calibration state, optimizer state, and JSON metadata with the step, the data position (the
micro-step, which indexes the grain dataset directly) and the early-stopping state. Rerunning in
the same WORKDIR resumes from the latest checkpoint; metrics.jsonl lines written after that
checkpoint (by a run that was killed) are dropped so the log has each step once, a torn last line
(a kill mid-write) is dropped with a warning, and TensorBoard's event files are rewritten from the
kept lines, so they too hold each step once. Best checkpoints newer than the resumed step (a kill
between best/N and checkpoints/N) are deleted: the resumed run redoes them. Rerunning a finished
or early-stopped run trains no further and returns its last evaluation again. A trainer holds an
exclusive lock on WORKDIR (`WorkdirLock`) from construction to `close()`, so a second trainer on
the same WORKDIR fails at once instead of interleaving with the first.

Evaluation every `eval_every` steps on validation questions:
  S_ans   multiple-choice accuracy (length-normalised option log-likelihood, with the memory);
  S_faith fraction of routed (active) slots at the answer steps of the gold answer that hold a
          gold supporting triple: our stand-in for faithfulness during training, since the
          H-Rate verifier must stay independent of training;
  S_val = 0.7 S_ans + 0.3 S_faith drives the best checkpoint and early stopping (`patience`).
With `eval_shuffled_evidence` (GraphLoom's heads) each evaluation also logs s_ans_shuffled, S_ans
with every question reading the previous validation question's subgraph (`other_evidence`).
"""

import dataclasses
import fcntl
import functools
import json
import math
import os
import pathlib
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from graphloom_jax import atomic, optional, sharding
from graphloom_jax.evaluation import answers, calibration
from graphloom_jax.models import heads as heads_lib
from graphloom_jax.models import llama
from graphloom_jax.ops import routing
from graphloom_jax.pipeline import decode
from graphloom_jax.pipeline import evidence as evidence_lib
from graphloom_jax.training import data as data_lib
from graphloom_jax.training import losses, metric_writers

# --------------------------------------------------------------------------- hyper-parameters

@dataclasses.dataclass(frozen=True)
class Hyper:
  """The static (hashable) settings of the jitted steps."""
  learning_rate: float
  end_learning_rate: float
  warmup_steps: int
  num_steps: int
  grad_accum: int
  clip_norm: float
  b1: float
  b2: float
  weight_decay: float
  label_smoothing: float
  w_gen: float
  w_cal: float
  w_cf: float
  w_align: float
  routed: bool = True  # GraphLoom's heads; False for an adapter (L = w_gen L_gen + w_opt L_opt)
  w_opt: float = 0.0  # > 0: the options' contrastive loss (the batches need option rows)
  w_ev: float = 0.0  # > 0: the evidence loss (own against another question's subgraph)
  # The batch keys built from a question's subgraph (`other_evidence` swaps them)
  subgraph_keys: frozenset = evidence_lib.SUBGRAPH_KEYS

  @classmethod
  def from_config(cls, config) -> "Hyper":
    t = config.train
    w = t.loss_weights
    return cls(t.learning_rate, t.end_learning_rate, t.warmup_steps, t.num_steps, t.grad_accum,
               t.clip_norm, t.b1, t.b2, t.weight_decay, t.label_smoothing, w.gen, w.cal, w.cf,
               w.align, heads_lib.kind_of_target(t.target) == "graphloom", w_opt=w.opt,
               w_ev=w.ev, subgraph_keys=evidence_lib.subgraph_keys(config.fusion.objects))

  def weights(self) -> dict[str, float]:
    """The loss weights (`losses.total_loss`); an adapter routes nothing, so the slot losses
    do not apply to it."""
    slots = 1.0 if self.routed else 0.0
    return dict(gen=self.w_gen, cal=slots * self.w_cal, cf=slots * self.w_cf,
                align=slots * self.w_align, opt=self.w_opt, ev=slots * self.w_ev)


def schedule(h: Hyper) -> optax.Schedule:
  return optax.warmup_cosine_decay_schedule(
      0.0, h.learning_rate, h.warmup_steps, max(h.num_steps, h.warmup_steps + 1),
      h.end_learning_rate)


@functools.lru_cache(maxsize=None)
def optimizer(h: Hyper) -> optax.GradientTransformation:
  tx = optax.chain(optax.clip_by_global_norm(h.clip_norm),
                   optax.adamw(schedule(h), b1=h.b1, b2=h.b2, weight_decay=h.weight_decay))
  return optax.MultiSteps(tx, every_k_schedule=h.grad_accum)


# --------------------------------------------------------------------------- jitted steps

def answer_window(loss_mask: jax.Array, width: int) -> jax.Array:
  """[B, width] positions from each row's first answer step (clipped to the row; `loss_mask`
  [B, T] holds contiguous answer steps, `data.answer_steps` sizes the window to hold them)."""
  first = jnp.argmax(loss_mask, axis=1)
  return jnp.minimum(first[:, None] + jnp.arange(width), loss_mask.shape[1] - 1)


def _windowed(batch, width: int):
  """(positions [B, A] or None, targets [B, A], answer steps [B, A]): where the steps compute
  logits. width 0 = every position; a clipped position repeats the last, never an answer step."""
  if not width:
    return None, batch["targets"], batch["loss_mask"]
  at = answer_window(batch["loss_mask"], width)
  return (at, jnp.take_along_axis(batch["targets"], at, axis=1),
          jnp.take_along_axis(batch["loss_mask"], at, axis=1))


def _forward(heads_def, params, rest, backbone_def, backbone_state, batch, first_layer: int,
             logits_at=None, extra_slots: int = 0):
  """The decoder with the heads' memory: `pipeline.decode.heads_forward`, the forward that
  answering runs, with the attention mass on each slot that the alignment loss reads; logits at
  the positions `logits_at` only when given. With `extra_slots` the rows' KV cache (with that
  many free slots) comes back as a fourth output."""
  heads = nnx.merge(heads_def, params, rest)
  backbone = nnx.merge(backbone_def, backbone_state)
  return decode.heads_forward(heads, backbone, batch, first_layer, return_slot_attention=True,
                              logits_at=logits_at, extra_slots=extra_slots,
                              return_cache=bool(extra_slots))


def _option_rows(batch):
  """The option rows of a multiple-choice batch as a batch of B * J rows (each question's
  evidence repeated for its J options) and their option masks [B * J, T]."""
  b, j, t = batch["mc_tokens"].shape
  mc = dict(batch)
  for k in ("tokens", "valid"):
    mc[k] = batch[f"mc_{k}"].reshape(b * j, t)
  for k, v in batch.items():
    if not k.startswith("mc_") and k not in ("tokens", "valid", "output_mask") and v.ndim >= 1:
      mc[k] = jnp.repeat(v, j, axis=0)
  mask = batch["mc_option_mask"].reshape(b * j, t)
  if "output_mask" in batch:  # an option row's generated part is the option (and its EOS)
    mc["output_mask"] = mask
  return mc, mask


def _option_scores(heads_def, params, rest, backbone_def, backbone_state, batch,
                   first_layer: int, option_steps: int = 0, answer_logits=None, at=None,
                   cache=None):
  """[B, J] length-normalised log-likelihoods of each question's options with the memory.

  option_steps 0: a forward over every [prompt ; option_j ; EOS] row (`decode.option_logprob`;
  the reference). option_steps > 0 (`data.option_steps` of the rows): the options continue the
  prompt that the question's own row already read (`decode.continue_options`), from that
  forward's `cache` (made with option_steps extra slots) and its logits `answer_logits` at the
  positions `at` (None: every position). A row's prompt is everything before its first answer
  step's target, and the answer and option rows share it (`data.featurize_rows`)."""
  b, j, t = batch["mc_tokens"].shape
  if not option_steps:
    mc, mask = _option_rows(batch)
    logits, _, _ = _forward(heads_def, params, rest, backbone_def, backbone_state, mc,
                            first_layer)
    return decode.option_logprob(logits, mc["tokens"], mask).reshape(b, j)
  first = jnp.argmax(batch["loss_mask"], axis=1)  # the step that predicts the first answer token
  first_logits = (answer_logits[:, 0] if at is not None  # the window starts at that step
                  else jnp.take_along_axis(answer_logits, first[:, None, None], axis=1)[:, 0])
  pos = first[:, None] + 1 + jnp.arange(option_steps)  # [B, O] the options' positions
  clipped = jnp.minimum(pos, t - 1)[:, None, :]
  options = jnp.take_along_axis(batch["mc_tokens"], clipped, axis=2)
  valid = jnp.take_along_axis(batch["mc_option_mask"], clipped, axis=2) & (pos < t)[:, None, :]
  heads = nnx.merge(heads_def, params, rest)
  backbone = nnx.merge(backbone_def, backbone_state)
  return decode.continue_options(heads, backbone, batch, cache, first + 1, first_logits,
                                 options, valid, first_layer)


def other_evidence(batch, keys=evidence_lib.SUBGRAPH_KEYS):
  """The batch with each row's subgraph (`keys`, `pipeline.evidence.subgraph_keys`: its slot
  bank and evidence vectors, and the prefix objects where they name the subgraph's entities)
  replaced by the previous row's (the last row's for the first); prompt, question vector and
  slot utility labels stay the row's own. The negative of L_ev, and (over the validation arrays,
  numpy in and out) the `eval_shuffled_evidence` control."""
  return {k: (np.roll if isinstance(v, np.ndarray) else jnp.roll)(v, 1, axis=0)
          if k in keys else v for k, v in batch.items()}


def _losses(h: Hyper, batch, logits, slot_attention, r: routing.Routing, targets=None,
            answer=None, option_scores=None, other_logits=None) -> losses.Losses:
  """The training loss; `logits` [B, A, V] predict `targets` at the answer steps `answer` [B, A]
  (default: every position, the batch's targets and loss_mask); `option_scores` [B, J] (when
  w_opt > 0) the options' scores for L_opt; `other_logits` (when w_ev > 0) the same logits
  with another question's subgraph (`other_evidence`), for L_ev."""
  steps = batch["loss_mask"]
  targets = batch["targets"] if targets is None else targets
  answer = steps if answer is None else answer
  gen = losses.generation_loss(logits, targets, answer, h.label_smoothing)
  zero = jnp.zeros((), gen.dtype)
  opt = (losses.option_loss(option_scores, batch["answer_index"])
         if option_scores is not None else zero)
  if not h.routed:  # an adapter routes nothing: the slot losses do not apply
    return losses.total_loss(h.weights(), gen, zero, zero, zero, opt)
  cal = losses.calibration_loss(r.scores, batch["slot_utility"], batch["slot_valid"], steps)
  cf = losses.contrastive_loss(r.scores, batch["slot_utility"], batch["slot_valid"], steps)
  align = losses.alignment_loss(r.scores, r.active, slot_attention, steps)
  ev = (losses.evidence_loss(losses.answer_logprob(logits, targets, answer),
                             losses.answer_logprob(other_logits, targets, answer))
        if other_logits is not None else zero)
  return losses.total_loss(h.weights(), gen, cal, cf, align, opt, ev)


@functools.partial(jax.jit, static_argnames=("heads_def", "backbone_def", "h", "first_layer",
                                             "answer_steps", "option_steps"),
                   donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, rest, backbone_state, batch, *, heads_def, backbone_def,
               h: Hyper, first_layer: int, answer_steps: int = 0, option_steps: int = 0):
  """One micro-step: gradients of the trainable params only, MultiSteps update. With
  `answer_steps` (`data.answer_steps` of the rows) the logits are computed over that window of
  answer steps only: the same loss, without the other positions' vocabulary projection.
  When h.w_opt > 0 the options are scored for L_opt: with `option_steps` (`data.option_steps`)
  as continuations of the prompt the question's row has read (`_option_scores`), else as full
  option rows. When h.w_ev > 0 (GraphLoom's heads) the micro-batch runs a second time with
  each row reading the previous row's subgraph (`other_evidence`) for L_ev."""
  at, targets, answer = _windowed(batch, answer_steps)
  if h.w_opt and "mc_tokens" not in batch:
    raise ValueError("config.train.loss_weights.opt > 0 needs multiple-choice rows (options); "
                     "this batch has none")

  shared = option_steps if h.w_opt else 0  # the options continue the rows' own cache

  def loss_fn(p):
    logits, attn, r, *cache = _forward(heads_def, p, rest, backbone_def, backbone_state, batch,
                                       first_layer, at, shared)
    scores = (_option_scores(heads_def, p, rest, backbone_def, backbone_state, batch,
                             first_layer, option_steps, logits, at, *cache)
              if h.w_opt else None)
    other = (_forward(heads_def, p, rest, backbone_def, backbone_state,
                      other_evidence(batch, h.subgraph_keys),
                      first_layer, at)[0]
             if h.w_ev and h.routed else None)
    out = _losses(h, batch, logits, attn, r, targets, answer, scores, other)
    active_steps = r.active & batch["loss_mask"][:, :, None]
    return out.total, (out, jnp.sum(active_steps) / jnp.maximum(jnp.sum(batch["loss_mask"]), 1))

  (_, (out, active)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
  tx = optimizer(h)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  metrics = dict(loss=out.total, gen=out.gen, cal=out.cal, cf=out.cf, align=out.align,
                 opt=out.opt, ev=out.ev, grad_norm=optax.global_norm(grads),
                 active_slots=active)
  return params, opt_state, metrics


@functools.partial(jax.jit, static_argnames=("heads_def", "backbone_def", "first_layer",
                                             "answer_steps", "option_steps"))
def eval_step(params, rest, backbone_state, batch, *, heads_def, backbone_def, first_layer: int,
              answer_steps: int = 0, option_steps: int = 0):
  """Validation: option scores [B, J] (multiple choice) or, for open answers (no option rows),
  `greedy_match` [B] (`evaluation.answers.greedy_match`: greedy decoding would write the target
  answer); routed-slot faithfulness counts, first-step gates. `answer_steps` as in
  `train_step`; with `option_steps` the options continue the question row's prompt
  (`_option_scores`), else each option row is a forward of its own."""
  at, targets, answer = _windowed(batch, answer_steps)
  shared = option_steps if "mc_tokens" in batch else 0
  logits, _, r, *cache = _forward(heads_def, params, rest, backbone_def, backbone_state, batch,
                                  first_layer, at, shared)
  steps = batch["loss_mask"]
  useful = batch["slot_utility"] > 0.5
  act = r.active & steps[:, :, None]
  faith_hits = jnp.sum(act & useful[:, None, :], axis=(1, 2))
  faith_total = jnp.sum(act, axis=(1, 2))
  first = jnp.argmax(steps, axis=1)  # the step that predicts the first answer token
  gates = jnp.take_along_axis(r.gates, first[:, None, None], axis=1)[:, 0]
  scores_first = jnp.take_along_axis(r.scores, first[:, None, None], axis=1)[:, 0]
  out = dict(faith_hits=faith_hits, faith_total=faith_total, gates=gates,
             gate_logits=scores_first)
  if "mc_tokens" not in batch:
    return dict(out, greedy_match=answers.greedy_match(logits, targets, answer))

  return dict(out, option_scores=_option_scores(heads_def, params, rest, backbone_def,
                                                backbone_state, batch, first_layer,
                                                option_steps, logits, at, *cache))


# --------------------------------------------------------------------------- the trainer

def _jsonable(d):
  out = {}
  for k, v in d.items():
    if isinstance(v, (int, np.integer)):
      out[k] = int(v)
    elif isinstance(v, (float, np.floating, jax.Array, np.ndarray)):
      out[k] = float(v)
    else:
      out[k] = v
  return out


class WorkdirBusyError(RuntimeError):
  """Another trainer holds the workdir's lock."""


class WorkdirLock:
  """An exclusive lock on a training workdir (flock on WORKDIR/.lock), held until `release()`.

  flock locks belong to the open file, so a second lock on the same workdir fails even within
  one process, and the operating system drops the lock when its holder dies (kill -9 included).
  """

  FILE = ".lock"

  def __init__(self, workdir):
    self.workdir = pathlib.Path(workdir).resolve()  # orbax wants absolute paths
    self.workdir.mkdir(parents=True, exist_ok=True)
    self._file = open(self.workdir / self.FILE, "a+")
    try:
      fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      self._file.seek(0)
      holder = self._file.read().strip() or "an unknown process"
      self._file.close()
      raise WorkdirBusyError(f"{self.workdir} is in use by another trainer ({holder}); wait for "
                             "it to finish or choose another workdir") from None
    self._file.truncate(0)
    self._file.write(f"pid {os.getpid()}\n")
    self._file.flush()

  def release(self):
    if not self._file.closed:
      fcntl.flock(self._file, fcntl.LOCK_UN)
      self._file.close()


class Trainer:
  """Trains the GraphLoom heads of a frozen decoder.

  Args:
    config: the full ml_collections config.
    backbone: the frozen `llama.Llama` module (never modified).
    train_arrays / val_arrays: features from `data.featurize` ([N, ...] numpy; the pipeline's
      evidence arrays plus token rows).
    workdir: checkpoints, metrics.jsonl and TensorBoard summaries go here.
    devices: devices of the data-parallel mesh (default all).
    progress: show a tqdm bar.
    on_step: called with the step number after every optimizer step (hooks, tests).
    workdir_lock: a `WorkdirLock` the caller already holds on `workdir` (a launcher takes it
      before writing anything there); by default the trainer takes its own. Either way
      `close()` releases it.
  """

  def __init__(self, config, backbone: llama.Llama, train_arrays, val_arrays, workdir, *,
               devices=None, progress: bool = True,
               on_step: Callable[[int], None] | None = None, log=logging.info,
               workdir_lock: WorkdirLock | None = None):
    self.workdir = pathlib.Path(workdir).resolve()  # orbax wants absolute paths
    self._lock = workdir_lock or WorkdirLock(self.workdir)
    try:
      self._init(config, backbone, train_arrays, val_arrays, devices, progress, on_step, log)
    except BaseException:
      self._lock.release()
      raise

  def _init(self, config, backbone, train_arrays, val_arrays, devices, progress, on_step, log):
    self.config = config
    self.h = Hyper.from_config(config)
    self.first_layer = config.memory.first_layer  # the memory layers (static: one compile)
    self.progress = progress
    self.on_step = on_step
    self.log = log
    self.train_arrays, self.val_arrays = train_arrays, val_arrays
    self.answer_steps = data_lib.answer_steps(train_arrays)
    self.option_steps = data_lib.option_steps(train_arrays)
    if self.h.w_opt and "mc_tokens" not in train_arrays:
      raise ValueError(f"config.train.loss_weights.opt={self.h.w_opt}: the options' loss needs "
                       f"multiple-choice training data; config.train.data="
                       f"{config.train.data!r} has open answers (set it to 0)")
    if self.h.w_ev and not self.h.routed:
      raise ValueError(f"config.train.loss_weights.ev={self.h.w_ev}: the evidence loss swaps "
                       "the memory's subgraph, which GraphLoom's heads read; "
                       f"config.train.target={config.train.target!r} reads its evidence as "
                       "text or not at all (set it to 0)")
    if self.h.w_ev and config.train.batch_size < 2:
      raise ValueError(f"config.train.loss_weights.ev={self.h.w_ev}: the evidence loss pairs "
                       "each row with another row's subgraph; config.train.batch_size="
                       f"{config.train.batch_size} has no other row (use >= 2)")
    if config.train.eval_examples:
      self.val_arrays = {k: v[:config.train.eval_examples] for k, v in val_arrays.items()}

    self.mesh = sharding.data_parallel_mesh(config.train.batch_size, devices)
    self.replicated = NamedSharding(self.mesh, P())
    self.sharded = NamedSharding(self.mesh, P("data"))

    self.backbone_def, backbone_state = nnx.split(backbone)
    self.backbone_state = jax.device_put(backbone_state, self.replicated)
    self.dtype = backbone.dtype
    embed_dim = train_arrays["slot_keys"].shape[-1]
    image_dim = train_arrays["image"].shape[-1]
    num_memory_layers = (backbone.config.num_layers
                         - backbone.first_memory_layer(config.memory.first_layer))
    self.kind = heads_lib.kind_of_target(config.train.target)
    heads = heads_lib.build(config, self.kind, backbone.config.hidden_size, embed_dim,
                            image_dim, num_memory_layers, seed=config.seed)
    self.heads_def, params, rest = nnx.split(heads, nnx.Param, ...)
    self.num_params = heads_lib.count_params(heads)
    self.params = jax.device_put(params, self.replicated)
    self.rest = jax.device_put(rest, self.replicated)
    self.opt_state = jax.device_put(optimizer(self.h).init(self.params), self.replicated)
    self.dataset = data_lib.batches(train_arrays, config.train.batch_size,
                                    config.train.shuffle_seed, config.train.group_by_length)
    self.step = 0
    self.micro_step = 0
    self.best = -math.inf
    self.evals_without_improvement = 0
    self.history: list[dict[str, Any]] = []

    opts = lambda keep: ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
    self.latest = ocp.CheckpointManager(self.workdir / "checkpoints", options=opts(2),
                                        item_names=("state", "meta"))
    self.best_ckpt = ocp.CheckpointManager(self.workdir / "best", options=opts(1),
                                           item_names=("state", "meta"))

  # ---------------------------------------------------------------- state and checkpoints

  def _state(self):
    return {"params": self.params, "rest": self.rest, "opt_state": self.opt_state}

  def _meta(self):
    return {"step": self.step, "micro_step": self.micro_step, "best_s_val": self.best,
            "evals_without_improvement": self.evals_without_improvement}

  def _save(self, manager):
    manager.save(self.step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(self._state()), meta=ocp.args.JsonSave(self._meta())),
        force=True)
    manager.wait_until_finished()

  def restore(self, which: str = "latest") -> bool:
    """Restores the latest (or best) checkpoint if there is one; returns whether it did."""
    manager = self.latest if which == "latest" else self.best_ckpt
    step = manager.latest_step()
    if step is None:
      return False
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, self._state())
    out = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    state, meta = out["state"], out["meta"]
    self.params, self.rest, self.opt_state = state["params"], state["rest"], state["opt_state"]
    self.step, self.micro_step = int(meta["step"]), int(meta["micro_step"])
    self.best = float(meta["best_s_val"])
    self.evals_without_improvement = int(meta["evals_without_improvement"])
    return True

  def _drop_best_after_resume_point(self):
    """Best checkpoints newer than the current step come from the lost part of a killed run (a
    kill between best/N and checkpoints/N); the resumed run redoes them, and orbax refuses to
    write a step that exists."""
    for step in self.best_ckpt.all_steps():
      if step > self.step:
        self.best_ckpt.delete(step)

  def fit_reliability_calibration(self, arrays=None) -> None:
    """Fits the router's c_p calibration (conf_ext vs slot utility) on validation slots."""
    arrays = self.val_arrays if arrays is None else arrays
    heads = self.heads()
    heads.router.fit_calibration(jnp.asarray(arrays["slot_reliability"]),
                                 jnp.asarray(arrays["slot_utility"]),
                                 jnp.asarray(arrays["slot_valid"]))
    _, _, rest = nnx.split(heads, nnx.Param, ...)
    self.rest = jax.device_put(rest, self.replicated)

  def heads(self):
    """The current heads (GraphLoomHeads or TunedPrefix) as a module (a copy of the trained
    state)."""
    return nnx.merge(self.heads_def, jax.device_get(self.params), jax.device_get(self.rest))

  # ---------------------------------------------------------------- logging

  def _metrics_path(self):
    return self.workdir / "metrics.jsonl"

  def _read_metrics(self) -> list[dict[str, Any]]:
    """metrics.jsonl's records; a torn last line (no newline: a killed write) is dropped with
    a warning, any other unreadable line is an error naming it."""
    path = self._metrics_path()
    if not path.exists():
      return []
    lines = path.read_bytes().split(b"\n")
    records = []
    for number, raw in enumerate(lines, 1):
      if not raw.strip():
        continue
      try:
        record = json.loads(raw.decode("utf-8"))
      except (UnicodeDecodeError, json.JSONDecodeError) as e:
        if number == len(lines):
          self.log(f"warning: {path} line {number} is torn (a write was killed); dropping it: "
                   f"{raw[:80]!r}")
          continue
        raise ValueError(f"{path} line {number}: not a JSON record ({e}); fix or delete the "
                         "line to resume") from None
      if not isinstance(record, dict) or isinstance(record.get("step"), bool) or not isinstance(
          record.get("step"), int):
        raise ValueError(f"{path} line {number}: expected a JSON object with an integer "
                         f"'step', got {raw[:80]!r}")
      records.append(record)
    return records

  def _trim_logs(self) -> list[dict[str, Any]]:
    """Keeps the records up to the current step in metrics.jsonl and rewrites TensorBoard's
    events from them; returns them."""
    records = [r for r in self._read_metrics() if r["step"] <= self.step]
    if self._metrics_path().exists():
      atomic.atomic_write_text(self._metrics_path(),
                               "".join(json.dumps(r) + "\n" for r in records))
    if (self.workdir / "tensorboard").exists() and optional.available("tensorboardX"):
      with atomic.atomic_dir(self.workdir / "tensorboard") as tmp:
        # Its own suffix: event file names hold only the second and the host, and the run's
        # writer opened in the same second would otherwise truncate this file.
        writer = metric_writers.summary_writer(tmp, filename_suffix=".resumed")
        for r in records:
          self._add_scalars(writer, r)
        writer.close()
    return records

  @staticmethod
  def _add_scalars(writer, record):
    for k, v in record.items():
      if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
        writer.add_scalar(k, v, record["step"])

  def _write(self, record, writer):
    with open(self._metrics_path(), "a") as f:
      f.write(json.dumps(_jsonable(record)) + "\n")
    self.history.append(record)
    if writer is not None:
      self._add_scalars(writer, record)
      writer.flush()

  # ---------------------------------------------------------------- evaluation

  def evaluate(self, arrays=None) -> dict[str, Any]:
    """S_ans, S_faith, S_val and the gate ECE on validation arrays (default: the trainer's).
    S_ans is multiple-choice accuracy, or for open answers the share of questions whose greedy
    answer is the first gold answer (exact match of tokens, EOS included)."""
    arrays = self.val_arrays if arrays is None else arrays
    window = data_lib.answer_steps(arrays)
    n_correct, n, hits, total = 0, 0, 0, 0
    gates, utils, valids = [], [], []
    for batch, real in data_lib.eval_batches(arrays, self.config.train.batch_size):
      batch = self._bucketed(batch)
      out = eval_step(self.params, self.rest, self.backbone_state,
                      jax.device_put(batch, self.sharded), heads_def=self.heads_def,
                      backbone_def=self.backbone_def, first_layer=self.first_layer,
                      answer_steps=window, option_steps=data_lib.option_steps(arrays))
      out = jax.device_get(out)
      if "greedy_match" in out:  # open answers: the greedy answer is the target
        n_correct += int(np.sum(out["greedy_match"][:real]))
      else:
        choice = answers.choose(out["option_scores"][:real])
        n_correct += int(np.sum(choice == batch["answer_index"][:real]))
      n += real
      hits += int(out["faith_hits"][:real].sum())
      total += int(out["faith_total"][:real].sum())
      gates.append(out["gates"][:real])
      utils.append(batch["slot_utility"][:real])
      valids.append(batch["slot_valid"][:real])
    s_ans = n_correct / max(n, 1)
    s_faith = hits / total if total else 0.0
    if self.kind != "graphloom":  # an adapter routes no slots: it is stopped on S_ans alone
      return {"s_ans": s_ans, "s_val": s_ans, "eval_examples": n}
    ece = calibration.ece(np.concatenate(gates), np.concatenate(utils),
                          mask=np.concatenate(valids))
    return {"s_ans": s_ans, "s_faith": s_faith, "s_val": 0.7 * s_ans + 0.3 * s_faith,
            "gate_ece": ece, "eval_examples": n}

  def _bucketed(self, batch):
    """config.train.length_buckets: the batch cut to its power-of-two length bucket."""
    return data_lib.trim_batch(batch) if self.config.train.length_buckets else batch

  # ---------------------------------------------------------------- training

  def train(self) -> dict[str, Any]:
    """Runs (or resumes) training to `num_steps` or early stopping; returns the last metrics."""
    from tqdm import tqdm

    resumed = self.restore()
    if not resumed and self.kind == "graphloom":
      self.fit_reliability_calibration()
    self._drop_best_after_resume_point()
    records = self._trim_logs()
    cfg = self.config.train
    self.log(f"{cfg.target} trainable parameters: {self.num_params:,} (backbone frozen); "
             f"data-parallel over {self.mesh.devices.size} device(s); "
             + (f"resumed at step {self.step}" if resumed else "starting from scratch"))
    writer = self._open_writer(resumed)
    bar = tqdm(total=self.h.num_steps, initial=self.step, unit="step", dynamic_ncols=True,
               disable=not self.progress)
    window = []
    # A finished run returns its last evaluation again instead of nothing.
    last = next((r for r in reversed(records) if "s_val" in r), None)
    stopped = self.evals_without_improvement >= cfg.patience
    sched = schedule(self.h)
    t0 = time.perf_counter()
    try:
      while self.step < self.h.num_steps and not stopped:
        for _ in range(self.h.grad_accum):
          batch = jax.device_put(self._bucketed(self.dataset[self.micro_step]), self.sharded)
          self.params, self.opt_state, metrics = train_step(
              self.params, self.opt_state, self.rest, self.backbone_state, batch,
              heads_def=self.heads_def, backbone_def=self.backbone_def, h=self.h,
              first_layer=self.first_layer, answer_steps=self.answer_steps,
              option_steps=self.option_steps)
          window.append(metrics)
          self.micro_step += 1
        self.step += 1
        bar.update(1)
        if self.step % cfg.log_every == 0 or self.step == self.h.num_steps:
          host = jax.device_get(window)
          record = {"step": self.step,
                    **{k: float(np.mean([m[k] for m in host])) for k in host[0]},
                    "lr": float(sched(self.step - 1)),
                    "examples_per_s": len(host) * cfg.batch_size / (time.perf_counter() - t0)}
          self._write(record, writer)
          bar.set_postfix(loss=f"{record['loss']:.4f}")
          window, t0 = [], time.perf_counter()
        if self.step % cfg.eval_every == 0 or self.step == self.h.num_steps:
          last, stopped = self._evaluate_and_keep_best(writer)
        if self.step % cfg.checkpoint_every == 0 or self.step == self.h.num_steps or stopped:
          self._save(self.latest)
        if self.on_step is not None:
          self.on_step(self.step)
    finally:
      bar.close()
      if writer is not None:
        writer.close()
    return last or {}

  def _open_writer(self, resumed: bool):
    """TensorBoard's writer (None without tensorboardX), the hyperparameters written once."""
    writer = metric_writers.summary_writer(self.workdir / "tensorboard")
    if writer is not None and not resumed:  # the hyperparameters once, as a text summary
      writer.add_text("hparams", "```\n" + self.config.to_json_best_effort(indent=1) + "\n```", 0)
    if writer is None:
      self.log("TensorBoard events are not written: they need tensorboardX, which the optional "
               "[tensorboard] extra installs (metrics.jsonl holds every record)")
    return writer

  def _evaluate_and_keep_best(self, writer) -> tuple[dict, bool]:
    """Validation at this step: the record written, the best checkpoint kept when S_val
    improved; returns (record, whether early stopping ends the run)."""
    cfg = self.config.train
    ev = self.evaluate()
    if cfg.eval_shuffled_evidence and self.kind == "graphloom":
      shuffled = other_evidence(self.val_arrays, self.h.subgraph_keys)
      ev["s_ans_shuffled"] = self.evaluate(shuffled)["s_ans"]
    last = {"step": self.step, **ev}
    improved = ev["s_val"] > self.best
    if improved:
      self.best, self.evals_without_improvement = ev["s_val"], 0
    else:
      self.evals_without_improvement += 1
    self._write(last, writer)
    if improved:
      self._save(self.best_ckpt)
    if self.evals_without_improvement >= cfg.patience:
      self.log(f"early stopping at step {self.step}: S_val has not improved for "
               f"{cfg.patience} evaluations (best {self.best:.4f})")
      return last, True
    return last, False

  def close(self):
    try:
      self.latest.close()
      self.best_ckpt.close()
    finally:
      self._lock.release()
