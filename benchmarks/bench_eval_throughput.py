"""Evaluation throughput (questions/s) of `launch.evaluate` on 1 vs 8 CPU devices and 1 vs 2
processes, and the scaling efficiency.

  python benchmarks/bench_eval_throughput.py [--num_examples=32] [--batch_size=8] [--repeats=3]
      [--layouts=1x1,1x8,2x1,2x4] [--distributed] [--mesh_data=0] [--workdir=DIR]

Each layout PxD runs `python -m launch.evaluate --config=configs/tiny.py --heads=random
--dataset=scenekb` (the README's "Evaluation at scale" smoke setting: random tiny decoder,
random heads) as P processes with D CPU devices each (JAX_NUM_CPU_DEVICES), in a fresh output
folder, on the first --num_examples questions of the split. With P = 2 the processes share the
folder and split the shards through its files (shard k is process k % P's), or with
--distributed through jax.distributed on localhost. Within a process the pipeline runs on the
mesh `--config.mesh.data=<--mesh_data>` selects (graphloom_jax.sharding): 0 (the
default) splits every batch over the process's D devices (data-parallel), 1 keeps it on one
device.

What is measured: the questions/s each process records in runs/p<i>.json (its shard loop:
answering and writing its shards, after the pipeline is built). A layout's throughput is all
questions over the slowest process's loop seconds; the wall clock of the whole command (process
start-up, model building and gathering included) is printed beside it. Speedup is against 1x1,
efficiency = speedup / (P * D), the share of perfect scaling over P * D devices.

Compilation is kept out of the timings: every layout gets one untimed warm-up run first, into a
persistent compilation cache that all runs share (as tests/test_evaluate.py does), so a timed
run loads its executables instead of compiling them. Layouts run in turn within each repeat,
so a change of load from other processes falls on all of them; the median over repeats is
reported. Every run's predictions must equal the 1x1 run's: texts and choices exactly, the
scores to float32 rounding (a batch split over devices sums in another order; runs on a 1 x 1
mesh are byte-identical).

Read the numbers with the machine in mind: CPU "devices" from JAX_NUM_CPU_DEVICES are slices of
the same cores (os.sched_getaffinity says how many this process may use), so more devices add
no compute, and two processes share those cores too. So on a 2-core machine 1x8 measures the
overhead of splitting each batch over 8 virtual devices (the SPMD program, 8 smaller matmuls on
the same cores) and 2x1 how well two processes share 2 cores, not how the evaluation scales on 8
or 16 accelerators.
"""

import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]

flags.DEFINE_integer("num_examples", 32, "questions per run (the first N of the split)")
flags.DEFINE_integer("batch_size", 8, "examples per shard")
flags.DEFINE_integer("mesh_data", 0, "--config.mesh.data of every run: 0 = data-parallel over "
                     "the process's devices, 1 = one device")
flags.DEFINE_string("split", "validation", "SceneKB split")
flags.DEFINE_integer("repeats", 3, "timed runs per layout (median reported)")
flags.DEFINE_list("layouts", ["1x1", "1x8", "2x1", "2x4"], "PxD: P processes of D CPU devices")
flags.DEFINE_bool("distributed", False, "P > 1 through jax.distributed on localhost instead of "
                  "the output folder's files")
flags.DEFINE_string("workdir", None, "runs go here (default: a temporary folder, removed)")
flags.DEFINE_alias("output_dir", "workdir")
flags.DEFINE_integer("timeout_s", 1800, "per run")
FLAGS = flags.FLAGS


def parse_layout(text: str) -> tuple[int, int]:
  p, d = (int(x) for x in text.lower().split("x"))
  if p < 1 or d < 1:
    raise ValueError(f"layout {text!r}: P and D must be >= 1")
  return p, d


def _free_port() -> int:
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(cache: pathlib.Path, devices: int) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env.update(JAX_NUM_CPU_DEVICES=str(devices), JAX_COMPILATION_CACHE_DIR=str(cache),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  return env


def run_layout(out: pathlib.Path, cache: pathlib.Path, processes: int, devices: int) -> dict:
  """One evaluation as `processes` processes of `devices` CPU devices; returns its numbers."""
  args = ["--config=configs/tiny.py", "--config.model.max_seq_len=1024",
          "--config.model.arch.max_position_embeddings=1024", "--heads=random",
          "--dataset=scenekb", f"--split={FLAGS.split}", f"--num_examples={FLAGS.num_examples}",
          f"--batch_size={FLAGS.batch_size}", "--progress=false", f"--workdir={out}",
          f"--config.mesh.data={FLAGS.mesh_data}"]
  if processes > 1:
    args.append(f"--num_processes={processes}")
    if FLAGS.distributed:
      args.append(f"--coordinator_address=127.0.0.1:{_free_port()}")
  start = time.perf_counter()
  procs = [subprocess.Popen(
      [sys.executable, "-m", "launch.evaluate", *args] +
      ([f"--process_id={i}"] if processes > 1 else []), cwd=ROOT, env=_env(cache, devices),
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for i in reversed(range(processes))]  # process 0 last: the others wait for its plan
  logs = [p.communicate(timeout=FLAGS.timeout_s)[0] for p in procs]
  wall = time.perf_counter() - start
  for p, log in zip(procs, logs):
    if p.returncode != 0:
      raise RuntimeError(f"{processes}x{devices}: launch.evaluate exited {p.returncode}:\n"
                         f"{log[-4000:]}")
  reports = [json.loads((out / "runs" / f"p{i}.json").read_text()) for i in range(processes)]
  questions = sum(r["questions"] for r in reports)
  if questions != FLAGS.num_examples:
    raise RuntimeError(f"{processes}x{devices}: computed {questions} questions, expected "
                       f"{FLAGS.num_examples} (stale shards in {out}?)")
  for r in reports:
    mesh = {"data": devices if FLAGS.mesh_data == 0 else FLAGS.mesh_data, "model": 1}
    if r["devices"].get("local") != devices or r["devices"].get("mesh") != mesh:
      raise RuntimeError(f"{processes}x{devices}: process {r['process_index']} saw devices "
                         f"{r['devices']}, expected {devices} local and mesh {mesh}")
  seconds = max(r["seconds"] for r in reports)
  return {"questions": questions, "seconds": seconds, "rate": questions / seconds,
          "per_process": [r["questions_per_second"] for r in reports], "wall": wall,
          "predictions": (out / "predictions.jsonl").read_bytes()}


def _close(a, b) -> bool:
  """Equal JSON values, floats to float32 rounding."""
  if isinstance(a, dict):
    return isinstance(b, dict) and sorted(a) == sorted(b) and all(_close(a[k], b[k]) for k in a)
  if isinstance(a, list):
    return isinstance(b, list) and len(a) == len(b) and all(map(_close, a, b))
  if isinstance(a, float) and isinstance(b, float):
    return abs(a - b) <= 1e-6 + 1e-5 * abs(a)
  return a == b


def agreement(reference: bytes, other: bytes) -> str:
  """"identical" (byte for byte), "equal to float32 rounding", or "DIFFERENT"."""
  if other == reference:
    return "identical"
  rows = [[json.loads(line) for line in text.decode().splitlines()] for text in
          (reference, other)]
  return "equal to float32 rounding" if _close(*rows) else "DIFFERENT"


def main(argv):
  del argv
  layouts = [parse_layout(x) for x in FLAGS.layouts]
  if (1, 1) not in layouts:
    layouts.insert(0, (1, 1))
  for p, d in layouts:
    if (FLAGS.num_examples + FLAGS.batch_size - 1) // FLAGS.batch_size < p:
      raise app.UsageError(f"--num_examples={FLAGS.num_examples} gives fewer shards than {p} "
                           "processes")
  root = pathlib.Path(FLAGS.workdir or tempfile.mkdtemp(prefix="bench_eval_"))
  root.mkdir(parents=True, exist_ok=True)
  cache = root / "jax_cache"
  cores = len(os.sched_getaffinity(0))
  print(f"{FLAGS.num_examples} SceneKB {FLAGS.split} questions, shards of {FLAGS.batch_size}, "
        f"configs/tiny.py with random heads, config.mesh.data={FLAGS.mesh_data}; {cores} usable "
        f"CPU cores "
        f"(os.cpu_count() = {os.cpu_count()}); load average {os.getloadavg()[0]:.2f}; "
        f"{'jax.distributed' if FLAGS.distributed else 'file barriers'} for P > 1")
  try:
    for p, d in layouts:  # untimed: fills the compilation cache for this topology
      t = time.perf_counter()
      run_layout(root / f"warmup_{p}x{d}", cache, p, d)
      print(f"warm-up {p}x{d}: {time.perf_counter() - t:.1f} s")
    results = {layout: [] for layout in layouts}
    for rep in range(FLAGS.repeats):
      for p, d in layouts:
        out = root / f"run{rep}_{p}x{d}"
        results[(p, d)].append(run_layout(out, cache, p, d))
    reference = results[(1, 1)][0]["predictions"]
    agree = {f"{p}x{d}": sorted({agreement(reference, r["predictions"]) for r in rs})
             for (p, d), rs in results.items()}
    identical = all("DIFFERENT" not in a for a in agree.values())
    base = statistics.median(r["rate"] for r in results[(1, 1)])
    print("\n| layout (P x D) | questions/s | per process | speedup vs 1x1 | efficiency | "
          "wall s (whole command) |")
    print("|---|---|---|---|---|---|")
    summary = {}
    for (p, d), rs in results.items():
      rate = statistics.median(r["rate"] for r in rs)
      per = [statistics.median(r["per_process"][i] for r in rs) for i in range(p)]
      speedup = rate / base
      summary[f"{p}x{d}"] = {"questions_per_second": rate, "per_process": per,
                             "speedup": speedup, "efficiency": speedup / (p * d),
                             "runs": [r["rate"] for r in rs],
                             "wall_s": statistics.median(r["wall"] for r in rs)}
      runs = ", ".join(f"{r['rate']:.2f}" for r in rs)
      print(f"| {p} x {d} | {rate:.2f} (runs: {runs}) | "
            f"{', '.join(f'{x:.2f}' for x in per)} | {speedup:.2f}x | {speedup / (p * d):.0%} | "
            f"{summary[f'{p}x{d}']['wall_s']:.1f} |")
    print(f"\npredictions against the first 1x1 run: {agree}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"CPU devices share the same {cores} cores: the device rows show what splitting a "
          "batch over virtual devices costs, the process rows how processes share the cores; "
          "neither is the scaling on real accelerators.")
    (root / "summary.json").write_text(json.dumps(summary, indent=1))
    if not identical:
      raise SystemExit("predictions differ between layouts")
  finally:
    if FLAGS.workdir is None:
      shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
  app.run(main)
