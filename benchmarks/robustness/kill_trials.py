"""Scripted `kill -9` trials: training, index saving and evaluation are killed at random points
and restarted; every artifact must stay loadable and every resumed result must equal an
uninterrupted run.

  python benchmarks/robustness/kill_trials.py                      # 20 trials of each kind
  python benchmarks/robustness/kill_trials.py --trials=1 --kinds=index

Kinds:
  train     `launch.train` (configs/tiny.py, a few steps, a checkpoint every 2 steps) killed at a
            random moment, then rerun on the same workdir; its final.json, metrics.jsonl (wall
            clock fields aside) and heads must equal an uninterrupted run's to 1e-6.
  index     a child process saves a new `ExactIndex` or `ScannIndex` over a saved one and is
            killed mid-save; `load_index` must then give the old or the new index exactly, and
            a save rerun to completion must give the new one.
  evaluate  `launch.evaluate` (tiny config, random heads, SceneKB validation, 2 shards) killed
            and rerun; predictions.jsonl and metrics.json must equal an uninterrupted run's
            byte for byte.

Half the kills fall uniformly over a whole run (start-up included), the other half uniformly
over the part of the run that writes (after the first artifact appears). A kill that lands
after the process finished still counts as a trial ("killed" says how many were killed
mid-run). The feature caches of the training runs are copied from the reference run so that
each trial is short; all runs share one JAX compilation cache.

Prints a table (kind, trials, killed mid-run, artifacts loadable, resumes equal) and, with
--output, writes it as Markdown with the load average.
"""

import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.py")

flags.DEFINE_integer("trials", 20, "trials per kind")
flags.DEFINE_list("kinds", ["train", "index", "evaluate"], "which kinds to run")
flags.DEFINE_integer("steps", 8, "training steps of each training run")
flags.DEFINE_integer("seed", 0, "seeds the kill times")
flags.DEFINE_string("workdir", None, "scratch folder (default: a new temporary folder, deleted)")
flags.DEFINE_string("output", None, "write the table as Markdown here")
FLAGS = flags.FLAGS

TRAIN_ARGS = ["--config.train.checkpoint_every=2", "--config.train.eval_every=4",
              "--config.train.log_every=2", "--config.train.eval_examples=8",
              "--config.train.max_train_examples=48"]
EVAL_ARGS = ["--config.model.max_seq_len=1024", "--config.model.arch.max_position_embeddings=1024",
             "--heads=random", "--dataset=scenekb", "--split=validation", "--num_examples=8",
             "--batch_size=4", "--progress=false"]
WALL_CLOCK_KEYS = ("examples_per_s", "seconds", "time", "elapsed")


def _env(cache: pathlib.Path) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env.update(JAX_NUM_CPU_DEVICES="1", JAX_COMPILATION_CACHE_DIR=str(cache),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", PYTHONUNBUFFERED="1")
  return env


def _start(cmd, cache, log: pathlib.Path) -> subprocess.Popen:
  f = open(log, "ab")
  return subprocess.Popen(cmd, cwd=ROOT, env=_env(cache), stdout=f, stderr=subprocess.STDOUT)


def _run(cmd, cache, log) -> tuple[int, float]:
  t0 = time.monotonic()
  proc = _start(cmd, cache, log)
  return proc.wait(), time.monotonic() - t0


def _kill_at(proc, marker: pathlib.Path | None, delay: float) -> bool:
  """Waits for `marker` (when given) then `delay` seconds, then SIGKILLs; True if the process
  was still running."""
  if marker is not None:
    while not marker.exists() and proc.poll() is None:
      time.sleep(0.02)
  end = time.monotonic() + delay
  while time.monotonic() < end and proc.poll() is None:
    time.sleep(0.01)
  alive = proc.poll() is None
  if alive:
    proc.send_signal(signal.SIGKILL)
  proc.wait()
  return alive


def _timed_marker_run(cmd, cache, log, marker: pathlib.Path) -> tuple[float, float]:
  """Runs `cmd` to completion; (seconds until `marker` appeared, total seconds)."""
  t0 = time.monotonic()
  proc = _start(cmd, cache, log)
  seen = None
  while proc.poll() is None:
    if seen is None and marker.exists():
      seen = time.monotonic() - t0
    time.sleep(0.02)
  total = time.monotonic() - t0
  if proc.returncode != 0:
    raise RuntimeError(f"reference run failed ({log}): {log.read_text()[-3000:]}")
  return (seen if seen is not None else total), total


def _kill_plan(rng, trial: int, t_marker: float, t_total: float, marker):
  """Even trials: uniform over the whole run; odd: uniform over its writing part."""
  if trial % 2 == 0:
    return None, rng.uniform(0.0, t_total)
  return marker, rng.uniform(0.0, max(t_total - t_marker, 0.05))


# ------------------------------------------------------------------------------ training

def _numbers_close(a, b, tol=1e-6) -> bool:
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(_numbers_close(a[k], b[k], tol) for k in a)
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(_numbers_close(x, y, tol) for x, y in zip(a, b))
  if isinstance(a, (int, float)) and isinstance(b, (int, float)):
    return bool(np.isclose(a, b, rtol=tol, atol=tol, equal_nan=True))
  return a == b


def _metric_records(workdir: pathlib.Path) -> list[dict]:
  rows = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  return [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in rows]


def _heads(workdir: pathlib.Path) -> dict:
  from safetensors.numpy import load_file
  return load_file(str(workdir / "heads" / "heads.safetensors"))


def _train_outcome(workdir: pathlib.Path, ref: pathlib.Path) -> tuple[bool, bool, str]:
  """(loadable, equal, note) for a finished training workdir against the reference."""
  try:
    final = json.loads((workdir / "final.json").read_text())
    records = _metric_records(workdir)
    heads = _heads(workdir)
  except Exception as e:  # noqa: BLE001  (any failure to read is the finding)
    return False, False, f"unreadable: {e}"
  ref_heads = _heads(ref)
  equal = (_numbers_close(final, json.loads((ref / "final.json").read_text()))
           and _numbers_close(records, _metric_records(ref))
           and heads.keys() == ref_heads.keys()
           and all(np.allclose(heads[k], ref_heads[k], rtol=1e-6, atol=1e-6) for k in heads))
  return True, equal, "" if equal else "differs from the uninterrupted run"


def train_trials(n, work, cache, rng, log):
  cmd = lambda wd: [sys.executable, "-m", "launch.train", f"--config={TINY}", f"--workdir={wd}",
                    f"--config.train.num_steps={FLAGS.steps}", *TRAIN_ARGS]
  ref = work / "train_ref"
  # first run builds the feature cache and fills the compilation cache; the timed one reuses both
  warm = work / "train_warm"
  rc, _ = _run(cmd(warm), cache, work / "train_warm.log")
  if rc != 0:
    raise RuntimeError(f"training warm-up failed: {(work / 'train_warm.log').read_text()[-3000:]}")
  ref.mkdir()
  shutil.copytree(warm / "features", ref / "features")
  t_marker, t_total = _timed_marker_run(cmd(ref), cache, work / "train_ref.log",
                                        ref / "checkpoints")
  log(f"train: reference run {t_total:.1f}s (first checkpoint folder after {t_marker:.1f}s)")
  rows = []
  for i in range(n):
    wd = work / f"train_{i}"
    wd.mkdir()
    shutil.copytree(warm / "features", wd / "features")
    marker, delay = _kill_plan(rng, i, t_marker, t_total, wd / "checkpoints")
    proc = _start(cmd(wd), cache, work / f"train_{i}.log")
    killed = _kill_at(proc, marker, delay)
    rc, _ = _run(cmd(wd), cache, work / f"train_{i}.log")
    loadable, equal, note = (False, False, f"resume exited {rc}") if rc else \
        _train_outcome(wd, ref)
    rows.append(dict(killed=killed, loadable=loadable, equal=equal, note=note))
    log(f"train {i}: kill {'after marker ' if marker else ''}+{delay:.1f}s "
        f"{'(mid-run)' if killed else '(already finished)'} -> loadable {loadable}, "
        f"equal {equal} {note}")
    shutil.rmtree(wd, ignore_errors=True)
  return rows


# ------------------------------------------------------------------------------ index saving

INDEX_CHILD = textwrap.dedent("""
  import sys
  import numpy as np
  from graphloom_jax.retrieval import index
  kind, folder, seed, n, dim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \\
      int(sys.argv[5])
  rng = np.random.default_rng(seed)
  vectors = rng.standard_normal((n, dim)).astype(np.float32)
  ids = rng.permutation(10 * n)[:n].astype(np.int64)
  built = (index.ExactIndex(vectors, ids) if kind == "exact"
           else index.ScannIndex(vectors, ids))
  print("saving", flush=True)
  built.save(folder)
  print("saved", flush=True)
""")
INDEX_SIZES = {"exact": (200_000, 64), "scann": (20_000, 64)}


def _index_data(seed, n, dim):
  rng = np.random.default_rng(seed)
  vectors = rng.standard_normal((n, dim)).astype(np.float32)
  return vectors, rng.permutation(10 * n)[:n].astype(np.int64)


PROBE_ROWS = np.array([0, 17, 4242, 9999])


def _index_version(idx, versions: dict) -> str:
  """Which of `versions` ({name: (vectors, ids)}) `idx` holds: its ids are that version's and
  each probe row of that version's vectors finds itself first. "MIXED" when none fits."""
  ids = np.asarray(idx.ids)
  for name, (vectors, want) in versions.items():
    if ids.shape == want.shape and np.array_equal(ids, want):
      found, _ = idx.search(vectors[PROBE_ROWS], 1)
      if np.array_equal(np.asarray(found)[:, 0], want[PROBE_ROWS]):
        return name
  return "MIXED"


def index_trials(n, work, cache, rng, log):
  from graphloom_jax.retrieval import index

  rows = []
  for i in range(n):
    kind = "exact" if i % 2 == 0 else "scann"
    size, dim = INDEX_SIZES[kind]
    folder = work / f"index_{i}"
    old_seed, new_seed = 1000 + i, 2000 + i
    cls = index.ExactIndex if kind == "exact" else index.ScannIndex
    versions = {"old": _index_data(old_seed, size, dim), "new": _index_data(new_seed, size, dim)}
    new = cls(*versions["new"])
    t0 = time.monotonic()
    new.save(work / f"index_timing_{i}")
    t_save = time.monotonic() - t0
    shutil.rmtree(work / f"index_timing_{i}")
    cls(*versions["old"]).save(folder)
    cmd = [sys.executable, "-c", INDEX_CHILD, kind, str(folder), str(new_seed), str(size),
           str(dim)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(cache), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    while proc.stdout.readline().strip() != "saving":  # the child built its index
      if proc.poll() is not None:
        raise RuntimeError(f"index child failed: {proc.stdout.read()[-3000:]}")
    delay = rng.uniform(0.0, 1.2 * t_save)
    time.sleep(delay)
    killed = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    try:
      version = _index_version(index.load_index(folder), versions)
      loadable = version != "MIXED"
    except Exception as e:  # noqa: BLE001
      loadable, version = False, f"unloadable: {e}"
    new.save(folder)  # the rerun of the killed save
    equal = _index_version(index.load_index(folder), versions) == "new"
    rows.append(dict(killed=killed, loadable=loadable, equal=equal, note=version))
    log(f"index {i} ({kind}, {size}x{dim}, save {t_save:.2f}s): kill +{delay:.2f}s "
        f"{'(mid-save)' if killed else '(already saved)'} -> load gives the {version} version; "
        f"rerun equal {equal}")
    shutil.rmtree(folder, ignore_errors=True)
  return rows


# ------------------------------------------------------------------------------ evaluation

EVAL_OUTPUTS = ("predictions.jsonl", "metrics.json")


def eval_trials(n, work, cache, rng, log):
  cmd = lambda out: [sys.executable, "-m", "launch.evaluate", f"--config={TINY}", *EVAL_ARGS,
                     f"--workdir={out}"]
  rc, _ = _run(cmd(work / "eval_warm"), cache, work / "eval_warm.log")
  if rc != 0:
    raise RuntimeError(f"evaluation warm-up failed: {(work / 'eval_warm.log').read_text()[-3000:]}")
  ref = work / "eval_ref"
  t_marker, t_total = _timed_marker_run(cmd(ref), cache, work / "eval_ref.log", ref / "shards")
  log(f"evaluate: reference run {t_total:.1f}s (shards folder after {t_marker:.1f}s)")
  rows = []
  for i in range(n):
    out = work / f"eval_{i}"
    marker, delay = _kill_plan(rng, i, t_marker, t_total, out / "shards")
    proc = _start(cmd(out), cache, work / f"eval_{i}.log")
    killed = _kill_at(proc, marker, delay)
    rc, _ = _run(cmd(out), cache, work / f"eval_{i}.log")
    loadable, equal, note = rc == 0, False, f"restart exited {rc}" if rc else ""
    if rc == 0:
      try:
        json.loads((out / "metrics.json").read_text())
        [json.loads(l) for l in (out / "predictions.jsonl").read_text().splitlines()]
        equal = all((out / f).read_bytes() == (ref / f).read_bytes() for f in EVAL_OUTPUTS)
        note = "" if equal else "differs from the uninterrupted run"
      except Exception as e:  # noqa: BLE001
        loadable, note = False, f"unreadable: {e}"
    rows.append(dict(killed=killed, loadable=loadable, equal=equal, note=note))
    log(f"evaluate {i}: kill {'after marker ' if marker else ''}+{delay:.1f}s "
        f"{'(mid-run)' if killed else '(already finished)'} -> loadable {loadable}, "
        f"equal {equal} {note}")
    shutil.rmtree(out, ignore_errors=True)
  return rows


KINDS = {"train": train_trials, "index": index_trials, "evaluate": eval_trials}


def table(results: dict) -> str:
  lines = ["| kind | trials | killed mid-run | artifacts loadable | resumes equal |",
           "|---|---|---|---|---|"]
  for kind, rows in results.items():
    lines.append(f"| {kind} | {len(rows)} | {sum(r['killed'] for r in rows)} | "
                 f"{sum(r['loadable'] for r in rows)} | {sum(r['equal'] for r in rows)} |")
  return "\n".join(lines)


def write_markdown(path, results: dict, minutes: float, load_before) -> None:
  uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
  notes = [f"- {k} trial {i}: {r['note']}" for k, rows in results.items()
           for i, r in enumerate(rows) if r["note"] and not (r["loadable"] and r["equal"])]
  pathlib.Path(path).write_text(
      "# Kill -9 trials\n\n"
      f"`python benchmarks/robustness/kill_trials.py --trials={FLAGS.trials} --steps={FLAGS.steps}` "
      f"({minutes:.1f} min). Load average (1/5/15 min) at the start "
      f"{' '.join(f'{x:.2f}' for x in load_before)}; `uptime` at the end: {uptime}. 2 CPU "
      "cores shared with other jobs.\n\n" + table(results) + "\n\n"
      + (("Failures:\n" + "\n".join(notes) + "\n\n") if notes else "")
      + "How each kind is tried and judged (from the script's docstring):\n\n```text\n"
      + __doc__.split("Kinds:\n")[1].split("\nPrints a table")[0].rstrip() + "\n```\n")


def main(argv):
  del argv
  unknown = set(FLAGS.kinds) - set(KINDS)
  if unknown:
    raise app.UsageError(f"--kinds: unknown {sorted(unknown)}; choose from {sorted(KINDS)}")
  if FLAGS.trials < 1:
    raise app.UsageError(f"--trials must be >= 1, got {FLAGS.trials}")
  if FLAGS.steps < 2:
    raise app.UsageError(f"--steps must be >= 2, got {FLAGS.steps}")
  rng = random.Random(FLAGS.seed)
  scratch = FLAGS.workdir is None
  work = pathlib.Path(FLAGS.workdir or tempfile.mkdtemp(prefix="kill_trials_"))
  work.mkdir(parents=True, exist_ok=True)
  cache = work / "jax_cache"
  t0 = time.monotonic()
  load_before = os.getloadavg()
  results = {}
  log = lambda s: print(s, flush=True)
  try:
    for kind in FLAGS.kinds:
      results[kind] = KINDS[kind](FLAGS.trials, work, cache, rng, log)
      if FLAGS.output:  # after each kind, so a long run that is cut short keeps its figures
        write_markdown(FLAGS.output, results, (time.monotonic() - t0) / 60, load_before)
  finally:
    if scratch:
      shutil.rmtree(work, ignore_errors=True)
  print(table(results))
  ok = all(r["loadable"] and r["equal"] for rows in results.values() for r in rows)
  print("all artifacts loadable and all resumes equal" if ok else "FAILURES above")
  return 0 if ok else 1


if __name__ == "__main__":
  app.run(main)
