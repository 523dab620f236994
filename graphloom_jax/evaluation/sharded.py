"""Sharded, resumable evaluation of GraphLoom and its baselines on a registered dataset, over
any number of processes (`launch.evaluate` is the command line).

The work plan. Examples [0, N) of the split, in the dataset's order, are cut into shards of
`batch_size` consecutive examples; shard k is ONE `GraphLoom.answer_batch` call and belongs to
process k % P. Each shard starts from a fresh pipeline state (embedding memo, correction
selector, instance graphs built inside the shard), so its predictions depend on its examples
alone: not on which process ran it, how many devices that process had, what it ran before, or
whether the run was restarted. That is what makes 1 device, 8 devices and 2 processes write the
same files, and a restarted run the same files as an uninterrupted one. (One input remains
outside the examples: the correction selector discounts each action by its wall time measured
so far in the shard, so a shard with several flagged subgraphs could pick another action when
timings reorder two actions' net utilities.)

Files under output_dir (a folder every process can read and write):
  plan.json                     the settings and qids of the run; a restart with other settings
                                is refused, naming what differs
  shards/shard-KKKKK-of-NNNNN.jsonl   one line per example of shard k, written atomically when
                                the shard finishes; a restart skips the shards that are there
  runs/p<i>.json                process i's last run: shards computed and reused, seconds,
                                questions per second, devices
  predictions.jsonl             (process 0, once every shard is there) every example in order:
                                index, qid, group, gold and `Answer.to_json()` without its
                                wall-clock fields
  timings.jsonl                 those wall-clock fields per example: the stage timings and the
                                correction's measured seconds and time-discounted utilities
  metrics.json                  computed from predictions.jsonl alone (`score`)

What runs where: examples are split over processes (shards); inside a process a shard is one
batch of the pipeline on the process's device mesh (`config.mesh`, graphloom_jax.pipeline.
sharding): its rows split over the mesh's "data" axis (padded to a multiple of it), the
decoder's parameters over its "model" axis, or everything on one device without a mesh. The
mesh is how a run computes, not what it evaluates: it is left out of the plan (a run may be
resumed on another mesh), and predictions agree across meshes up to float rounding of the
scores (reductions split over devices add in another order); texts, choices and citations are
the same.

Datasets: every entry of the dataset registry (graphloom_jax.data.registry): "scenekb",
"pathquestion" and "wc2014" with their instance graphs (every mode), and through their TFDS
builders "scienceqa", "okvqa" and "mmqa", which have no scene graphs or triples here, so only
mode "no_retrieval" runs on them. Metrics are the registry's (`registry.score`).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import pathlib
import time
from typing import Any, Callable, Sequence

from graphloom_jax import atomic, distributed
from graphloom_jax.data.registry import Dataset, Example, score
from graphloom_jax.models import embedding_cache

RANDOM_HEADS = "random"
PLAN, SHARDS, RUNS = "plan.json", "shards", "runs"
PREDICTIONS, TIMINGS, METRICS = "predictions.jsonl", "timings.jsonl", "metrics.json"


# ------------------------------------------------------------------------------ datasets

def check_mode(dataset: Dataset, mode: str) -> None:
  if mode != "no_retrieval" and not dataset.has_graphs:
    raise ValueError(f"dataset {dataset.name!r} has no scene graphs or triples to retrieve "
                     f"from, so mode {mode!r} cannot run on it; use mode 'no_retrieval'")


# ------------------------------------------------------------------------------ the system

def build_system(config, heads: str | None, mode: str, kb_sources=(), mesh=None):
  """GraphLoom as `config` names it, on `mesh` (default: the one config.mesh selects). heads:
  a folder from `save_heads` (mode "graphloom"), or RANDOM_HEADS for freshly initialised heads
  seeded by config.seed (a smoke-test setting for configs without trained heads, such as
  configs/tiny.py); ignored by the text modes."""
  from graphloom_jax.pipeline import GraphLoom, graphloom
  if mode != "graphloom":
    return GraphLoom.from_config(config, heads=None, kb_sources=kb_sources, mesh=mesh)
  if heads is None:
    raise ValueError("mode 'graphloom' needs heads: a folder written by save_heads, or "
                     f"{RANDOM_HEADS!r} (random heads, for smoke tests)")
  if heads != RANDOM_HEADS:
    return GraphLoom.from_config(config, heads=heads, kb_sources=kb_sources, mesh=mesh)
  text_only = GraphLoom.from_config(config, heads=None, kb_sources=kb_sources, mesh=mesh)
  fresh = graphloom.new_heads(config, text_only.decoder, text_only.embed_dim, seed=config.seed)
  return GraphLoom(config, text_only.decoder, text_only.embedder, fresh, kb_sources=kb_sources,
                   mesh=text_only.mesh)


def fresh_state(system):
  """The same system (decoder, embedder, heads, verifier, writer, knowledge) with a fresh
  embedding memo and correction selector, as every shard starts."""
  from graphloom_jax.pipeline import GraphLoom
  memo = embedding_cache.MemoEmbedder(system.embedder.embedder)
  return GraphLoom(system.config, system.decoder, memo, system.heads, verifier=system.verifier, writer=system.writer,
                   kb_sources=system.kb_sources, wordnet=system.wordnet, mesh=system.mesh)


def answer_shard(system, dataset: Dataset, examples: Sequence[Example], mode: str,
                 first_index: int) -> list[dict]:
  """One shard: its examples answered as one batch from a fresh pipeline state; one record per
  example (index, qid, group, gold and Answer.to_json(), wall-clock fields included)."""
  system = fresh_state(system)
  graphs, seconds = {}, {}
  for ex in examples:
    if ex.instance_id is not None and ex.instance_id not in graphs and mode != "no_retrieval":
      t0 = time.perf_counter()
      graphs[ex.instance_id] = system.instance_graph(dataset.instance_triples(ex),
                                                     instance_id=ex.instance_id)
      seconds[ex.instance_id] = time.perf_counter() - t0
  triples = [graphs.get(ex.instance_id) for ex in examples]
  options = [ex.options for ex in examples]
  out = system.answer_batch([ex.question for ex in examples], triples,
                            options=options if any(o is not None for o in options) else None,
                            mode=mode)
  records = []
  for i, (ex, answer) in enumerate(zip(examples, out)):
    if ex.instance_id in seconds:
      answer.timings["instance_graph"] = seconds[ex.instance_id]
    records.append({"index": first_index + i, "qid": ex.qid, "group": ex.group,
                    "gold": ex.gold, **answer.to_json()})
  return records


def split_wall_clock(record: dict) -> tuple[dict, dict]:
  """(record without wall-clock fields, those fields): the stage timings, and the correction's
  measured seconds and utilities (net of cost_weight x mean measured seconds)."""
  record = json.loads(json.dumps(record))
  clock = {"index": record["index"], "qid": record["qid"], "timings": record.pop("timings")}
  correction = record.get("correction")
  if correction is not None:
    clock["correction_utilities"] = correction.pop("utilities", {})
    if "seconds" in correction.get("details", {}):
      clock["correction_seconds"] = correction["details"].pop("seconds")
  return record, clock


# ------------------------------------------------------------------------------ the plan

def _digest(path: pathlib.Path) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def heads_identity(heads: str | None, mode: str) -> str | None:
  """What the plan records of the heads: None (text modes), "random", or the checkpoint's
  SHA-256 (so retrained heads in the same folder are a different run)."""
  if mode != "graphloom":
    return None
  if heads in (None, RANDOM_HEADS):
    return heads
  from graphloom_jax.pipeline.graphloom import HEADS_FILE, HEADS_META
  paths = [pathlib.Path(heads) / name for name in (HEADS_FILE, HEADS_META)]
  for path in paths:
    if not path.is_file():
      raise FileNotFoundError(f"heads checkpoint {heads}: {path.name} is missing (train heads "
                              f"with launch.train, or pass {RANDOM_HEADS!r} for a smoke test)")
  return "sha256:" + hashlib.sha256("".join(map(_digest, paths)).encode()).hexdigest()


@dataclasses.dataclass
class Plan:
  """The run: what is evaluated (settings) and the examples' qids, in order."""
  settings: dict[str, Any]
  qids: list[str]

  @property
  def batch_size(self) -> int:
    return self.settings["batch_size"]

  @property
  def num_shards(self) -> int:
    return -(-len(self.qids) // self.batch_size)

  def shard_range(self, k: int) -> tuple[int, int]:
    return k * self.batch_size, min((k + 1) * self.batch_size, len(self.qids))

  def owned(self, process_index: int, process_count: int) -> list[int]:
    return list(range(process_index, self.num_shards, process_count))

  def to_json(self) -> dict:
    return {"settings": self.settings, "qids": self.qids}


def make_plan(dataset: Dataset, *, num_examples: int, batch_size: int, mode: str,
              heads: str | None, config) -> Plan:
  """num_examples <= 0: the whole split."""
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  n = len(dataset) if num_examples <= 0 else min(num_examples, len(dataset))
  if n == 0:
    raise ValueError(f"dataset {dataset.name!r} split {dataset.split!r} has no examples")
  qids = [ex.qid for ex in dataset.examples(0, n)]
  duplicates = sorted(q for q, c in collections.Counter(qids).items() if c > 1)
  if duplicates:
    raise ValueError(f"dataset {dataset.name!r} split {dataset.split!r}: duplicate qids "
                     f"{duplicates[:5]}; predictions could not be told apart")
  settings = {"dataset": dataset.name, "split": dataset.split, "num_examples": n,
              "batch_size": batch_size, "mode": mode, "heads": heads_identity(heads, mode),
              "config": {k: v for k, v in json.loads(config.to_json_best_effort()).items()
                         if k != "mesh"}}
  return Plan(settings, qids)


def _differences(a, b, prefix: str = "") -> list[str]:
  if isinstance(a, dict) and isinstance(b, dict):
    return [d for k in sorted(set(a) | set(b), key=str)
            for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
  return [] if a == b else [f"{prefix[:-1]}: {a!r} there, {b!r} now"]


class Evaluation:
  """The files of one run under output_dir (see the module docstring)."""

  def __init__(self, output_dir, plan: Plan):
    self.dir = pathlib.Path(output_dir)
    self.plan = plan

  # ---------------------------------------------------------------- the plan file

  def publish_plan(self, writer: bool) -> None:
    """The writer (process 0) writes plan.json unless it is there; then every process checks
    that the plan there is this run's."""
    path = self.dir / PLAN
    if writer and not path.exists():
      atomic.atomic_write_json(path, self.plan.to_json())
    if not path.exists():
      raise FileNotFoundError(f"{path} is missing: process 0 writes it (wait_for_plan)")
    there = json.loads(path.read_text())
    diffs = _differences(there["settings"], self.plan.settings)
    if not diffs and there["qids"] != self.plan.qids:
      diffs = ["qids: the dataset's examples changed"]
    if diffs:
      raise ValueError(f"{self.dir} holds an evaluation with other settings ("
                       + "; ".join(diffs[:6]) + "): give another output_dir, or delete it to "
                       "start over")

  # ---------------------------------------------------------------- shards

  def shard_path(self, k: int) -> pathlib.Path:
    return self.dir / SHARDS / f"shard-{k:05d}-of-{self.plan.num_shards:05d}.jsonl"

  def read_shard(self, k: int) -> list[dict]:
    """Shard k's records, checked against the plan (one per example, in order)."""
    path = self.shard_path(k)
    start, stop = self.plan.shard_range(k)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    got = [(r.get("index"), r.get("qid")) for r in records]
    want = list(zip(range(start, stop), self.plan.qids[start:stop]))
    if got != want:
      raise ValueError(f"{path}: holds examples {got[:3]}...; this run's shard {k} is {want[:3]}"
                       f"... ({stop - start} examples); delete the file to recompute it")
    return records

  def missing(self, shards: Sequence[int]) -> list[int]:
    return [k for k in shards if not self.shard_path(k).exists()]

  def run(self, answer: Callable[[list[Example], int], list[dict]], dataset: Dataset,
          process_index: int = 0, process_count: int = 1, progress: bool = True,
          devices: dict | None = None) -> dict:
    """Computes this process's shards that are not on disk yet, writing each as it finishes.
    answer(examples, first_index) -> records (`answer_shard` bound to a system and mode).
    Returns (and writes to runs/p<i>.json) what this process computed and reused."""
    from tqdm import tqdm
    owned = self.plan.owned(process_index, process_count)
    todo = self.missing(owned)
    for k in sorted(set(owned) - set(todo)):
      self.read_shard(k)
    sizes = {k: self.plan.shard_range(k)[1] - self.plan.shard_range(k)[0] for k in owned}
    bar = tqdm(total=sum(sizes.values()), initial=sum(sizes[k] for k in owned if k not in todo),
               desc=f"process {process_index}: {dataset.name} {dataset.split}", unit="question",
               disable=not progress)
    t0 = time.perf_counter()
    for k in todo:
      start, stop = self.plan.shard_range(k)
      examples = dataset.examples(start, stop)
      if [ex.qid for ex in examples] != self.plan.qids[start:stop]:
        raise ValueError(f"shard {k}: the dataset's examples {start}..{stop} are not the "
                         f"planned ones")
      records = answer(examples, start)
      atomic.atomic_write_text(self.shard_path(k),
                               "".join(json.dumps(r, allow_nan=False) + "\n" for r in records))
      bar.update(len(records))
    bar.close()
    seconds = time.perf_counter() - t0
    computed = sum(sizes[k] for k in todo)
    report = {"process_index": process_index, "process_count": process_count,
              "computed": todo, "reused": [k for k in owned if k not in todo],
              "questions": computed, "seconds": seconds,
              "questions_per_second": computed / seconds if computed and seconds > 0 else None,
              "devices": devices or {}}
    atomic.atomic_write_json(self.dir / RUNS / f"p{process_index}.json", report, indent=1)
    return report

  def wait_for_shards(self, timeout_s: float) -> None:
    """A file barrier: returns once every shard of the plan is on disk, or raises after
    timeout_s naming the missing ones."""
    every = range(self.plan.num_shards)
    distributed.wait_for(lambda: not self.missing(every), timeout_s,
          lambda: f"shards {self.missing(every)[:10]} under {self.dir / SHARDS} (rerun the "
          "processes that own them: shard k belongs to process k % num_processes)")

  # ---------------------------------------------------------------- gathering

  def gather(self) -> dict:
    """predictions.jsonl, timings.jsonl and metrics.json from every shard (all must be there)."""
    rows, clocks = [], []
    for k in range(self.plan.num_shards):
      for record in self.read_shard(k):
        row, clock = split_wall_clock(record)
        rows.append(row)
        clocks.append(clock)
    atomic.atomic_write_text(self.dir / PREDICTIONS, _jsonl(rows))
    atomic.atomic_write_text(self.dir / TIMINGS, _jsonl(clocks))
    metrics = {"dataset": self.plan.settings["dataset"], "split": self.plan.settings["split"],
               "mode": self.plan.settings["mode"], **score(self.plan.settings["dataset"], rows)}
    atomic.atomic_write_json(self.dir / METRICS, metrics, indent=1, sort_keys=True)
    return metrics


def wait_for_plan(output_dir, timeout_s: float) -> None:
  """Processes other than 0 wait for process 0's plan.json before they read the dataset, so
  they find its TFDS files prepared (a file barrier)."""
  path = pathlib.Path(output_dir) / PLAN
  distributed.wait_for(path.exists, timeout_s, f"{path} (written by process 0)")


def _jsonl(rows) -> str:
  return "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows)
