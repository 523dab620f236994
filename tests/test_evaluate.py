"""`python -m launch.evaluate` on the tiny config (random decoder, random heads, 16 SceneKB
validation questions in 2 shards of 8), run as subprocesses: 1 device, 2 processes x 4 devices
(jax.distributed on localhost) and 8 devices not used by the pipeline (mesh 1 x 1), 8 devices
data-parallel (mesh 8 x 1) and a 2 x 4 data x model mesh write byte-identical metrics.json and
the same predictions: texts, choices, cited and retrieved triples and claims exactly, scores up
to float32 rounding (each device count is its own XLA executable, and a reduction split over
devices adds in another order), and their runs record the mesh; a run killed with SIGKILL
after its first shard, resumed by two processes sharing the folder without a coordinator,
neither recomputes that shard nor duplicates or loses a prediction; metrics.json equals a recomputation from predictions.jsonl with the scorers. The
library (graphloom_jax.evaluation.sharded) is tested in-process: the shard plan, refused
restarts and shard files, and the TFDS datasets' examples and official metrics on the committed
fixtures.

Subprocesses share a persistent compilation cache (their devices are set with
JAX_NUM_CPU_DEVICES, since XLA_FLAGS are part of the cache key), so only the first run and the
distributed pair, whose device topology is part of the key too, compile the pipeline.
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import mmqa, okvqa, scenekb, scienceqa
from graphloom_jax.data import registry
from graphloom_jax.evaluation import answers, sharded
from graphloom_jax.evaluation.scienceqa import scienceqa_accuracy

from fakes import same_json

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SPLIT, N, BATCH = "validation", 16, 8
# The tiny config's 512-token context is too short for some revision prompts (byte tokenizer).
ARGS = ["--config=configs/tiny.py", "--config.model.max_seq_len=1024",
        "--config.model.arch.max_position_embeddings=1024", "--heads=random",
        "--dataset=scenekb", f"--split={SPLIT}", f"--num_examples={N}", f"--batch_size={BATCH}",
        "--progress=false"]
OUTPUTS = (sharded.PREDICTIONS, sharded.METRICS)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return tmp_path_factory.mktemp("jax_cache")


def _env(cache, devices: int) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env.update(JAX_NUM_CPU_DEVICES=str(devices), JAX_COMPILATION_CACHE_DIR=str(cache),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  return env


def _start(out, cache, devices=1, extra=()):
  return subprocess.Popen([sys.executable, "-m", "launch.evaluate", *ARGS, f"--workdir={out}",
                           *extra], cwd=ROOT, env=_env(cache, devices), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _finish(proc, timeout=900):
  out, _ = proc.communicate(timeout=timeout)
  assert proc.returncode == 0, out[-4000:]
  return out


def _run_json(out, process=0):
  return json.loads((out / sharded.RUNS / f"p{process}.json").read_text())


def _rows(out):
  return [json.loads(l) for l in (out / sharded.PREDICTIONS).read_text().splitlines()]


def _exact(row) -> tuple:
  """What must not depend on the device count: the answers, the choice, the cited and retrieved
  triples and the claims' texts and verdicts."""
  spo = lambda t: (t["subject"], t["relation"], t["object"])
  return (row["qid"], row["text"], row["choice"], row["supported"],
          [spo(e) for e in row["evidence"]], [spo(t) for t in row["retrieved"]],
          [(c["text"], c["supported"]) for c in row["claims"]])


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def single(tmp_path_factory, cache):
  """The reference: one process, one device, uninterrupted."""
  out = tmp_path_factory.mktemp("single")
  _finish(_start(out, cache))
  return out



@pytest.mark.parametrize("mesh", [(8, 1), (2, 4)])
def test_data_and_model_parallel_meshes_give_the_same_predictions(single, cache, tmp_path,
                                                                   mesh):
  out = tmp_path / "mesh"
  _finish(_start(out, cache, devices=8, extra=[f"--config.mesh.data={mesh[0]}",
                                               f"--config.mesh.model={mesh[1]}"]))
  assert (out / sharded.METRICS).read_bytes() == (single / sharded.METRICS).read_bytes()
  got, want = _rows(out), _rows(single)
  assert [_exact(r) for r in got] == [_exact(r) for r in want]
  same_json(got, want)
  assert _run_json(out)["devices"] == {"backend": "cpu", "local": 8, "global": 8,
                                       "mesh": {"data": mesh[0], "model": mesh[1]}}


def test_one_device_eight_devices_and_two_processes_write_the_same_predictions(single, cache,
                                                                              tmp_path):
  eight = tmp_path / "eight"
  _finish(_start(eight, cache, devices=8))
  two = tmp_path / "two"
  flags = [f"--coordinator_address=127.0.0.1:{_free_port()}", "--num_processes=2"]
  procs = [_start(two, cache, devices=4, extra=flags + [f"--process_id={i}"]) for i in (1, 0)]
  logs = [_finish(p) for p in procs]
  # every log line of a process names it; only process 0 reports writing the outputs
  for i, log in zip((1, 0), logs):
    lines = [l for l in log.splitlines() if l[:1] in "IWE" and "] " in l and l[1:5].isdigit()]
    assert lines and all(f"] [process {i}/2] " in l for l in lines), log[-3000:]
  assert any("wrote " in l and sharded.METRICS in l for l in logs[1].splitlines())
  assert not any("wrote " in l and sharded.METRICS in l for l in logs[0].splitlines())
  # metrics.json (computed from texts and choices), the texts, choices and citations are exact;
  # scores agree to float32 rounding: each device count and topology is its own XLA
  # executable, which need not order a reduction the same way on every machine.
  want = _rows(single)
  for out in (eight, two):
    assert (out / sharded.METRICS).read_bytes() == (single / sharded.METRICS).read_bytes()
    got = _rows(out)
    assert [_exact(r) for r in got] == [_exact(r) for r in want]
    same_json(got, want)
  one = {"data": 1, "model": 1}
  assert _run_json(single)["devices"] == {"backend": "cpu", "local": 1, "global": 1,
                                          "mesh": one}
  assert _run_json(eight)["devices"] == {"backend": "cpu", "local": 8, "global": 8,
                                         "mesh": one}
  for i in (0, 1):  # shard k belongs to process k % 2
    report = _run_json(two, i)
    assert report["devices"] == {"backend": "cpu", "local": 4, "global": 8, "mesh": one}
    assert report["computed"] == [i] and report["process_count"] == 2
  # every example once, in order, with its gold answers and the Answer's provenance
  questions = scenekb.load(SPLIT).questions[:N]
  rows = _rows(single)
  assert [r["qid"] for r in rows] == [q.qid for q in questions]
  assert [r["index"] for r in rows] == list(range(N))
  for r, q in zip(rows, questions):
    assert r["gold"] == {"answers": q.answer_texts, "option": q.extra["answer_index"]}
    assert r["group"] == q.family and r["mode"] == "graphloom" and r["question"] == q.question
    assert r["choice"] == int(np.argmax(r["option_scores"])) and len(r["option_scores"]) == 4
    assert "timings" not in r and all(e["source"] for e in r["retrieved"])
  clocks = [json.loads(l) for l in (single / sharded.TIMINGS).read_text().splitlines()]
  assert [c["qid"] for c in clocks] == [q.qid for q in questions]
  assert all(c["timings"]["decoding"] > 0 for c in clocks)


def test_killed_run_resumes_without_recomputing_or_duplicating(single, cache, tmp_path):
  out = tmp_path / "killed"
  first, second = (out / sharded.SHARDS / f"shard-{k:05d}-of-00002.jsonl" for k in (0, 1))
  proc = _start(out, cache)
  deadline = time.monotonic() + 900
  while not first.exists():
    assert proc.poll() is None, proc.communicate()[0][-4000:]
    assert time.monotonic() < deadline
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.communicate()
  assert not second.exists(), "the kill came after the second shard: nothing left to resume"
  assert not (out / sharded.PREDICTIONS).exists()
  kept = first.read_bytes()
  # resumed by two independent processes (no coordinator: the files are the barriers); shard 0
  # is process 0's and on disk, so process 0 only waits for process 1's shard and gathers
  split = ["--num_processes=2", "--wait_timeout_s=900"]
  procs = [_start(out, cache, extra=split + [f"--process_id={i}"]) for i in (0, 1)]
  for p in procs:
    _finish(p)
  assert (_run_json(out, 0)["computed"], _run_json(out, 0)["reused"]) == ([], [0])
  assert (_run_json(out, 1)["computed"], _run_json(out, 1)["reused"]) == ([1], [])
  assert first.read_bytes() == kept
  for name in OUTPUTS:
    assert (out / name).read_bytes() == (single / name).read_bytes(), name
  # a finished run reruns without computing anything
  _finish(_start(out, cache))
  assert _run_json(out)["computed"] == [] and _run_json(out)["reused"] == [0, 1]


def test_metrics_equal_a_recomputation_from_predictions(single):
  rows = _rows(single)
  metrics = json.loads((single / sharded.METRICS).read_text())
  questions = scenekb.load(SPLIT).questions[:N]

  def expected(pairs):
    em, f1 = zip(*(answers.answer_metrics(r["text"], q.answer_texts) for r, q in pairs))
    mc = [r["choice"] == q.extra["answer_index"] for r, q in pairs]
    return {"em": 100 * np.mean(em), "f1": 100 * np.mean(f1), "mc_accuracy": 100 * np.mean(mc),
            "count": len(pairs)}

  pairs = list(zip(rows, questions))
  want = expected(pairs)
  for key in ("em", "f1", "mc_accuracy"):
    assert metrics[key] == pytest.approx(want[key], abs=1e-9), key
  assert metrics["count"] == N
  assert metrics["supported"] == pytest.approx(100 * np.mean([r["supported"] for r in rows]))
  families = sorted({q.family for q in questions})
  assert sorted(metrics["by_family"]) == families
  for fam in families:
    got, ref = metrics["by_family"][fam], expected([p for p in pairs if p[1].family == fam])
    assert got["count"] == ref["count"]
    for key in ("em", "f1", "mc_accuracy"):
      assert got[key] == pytest.approx(ref[key], abs=1e-9), (fam, key)
  assert (metrics["dataset"], metrics["split"], metrics["mode"]) == ("scenekb", SPLIT,
                                                                      "graphloom")


# ------------------------------------------------------------------------------ the library

@pytest.mark.parametrize("n,batch,processes", [(16, 8, 1), (16, 8, 2), (17, 4, 3), (3, 8, 2)])
def test_shards_cover_every_example_once(n, batch, processes):
  plan = sharded.Plan({"batch_size": batch}, [str(i) for i in range(n)])
  owned = [k for p in range(processes) for k in plan.owned(p, processes)]
  assert sorted(owned) == list(range(plan.num_shards))
  covered = [i for k in range(plan.num_shards) for i in range(*plan.shard_range(k))]
  assert covered == list(range(n))
  assert all(stop - start <= batch for start, stop in map(plan.shard_range,
                                                          range(plan.num_shards)))


def _plan(config, batch_size=8, n=16):
  return sharded.make_plan(registry.open_dataset("scenekb", SPLIT), num_examples=n,
                           batch_size=batch_size, mode="no_retrieval", heads=None, config=config)


def test_restart_with_other_settings_or_a_foreign_shard_is_refused(tmp_path):
  config = tiny.get_config()
  sharded.Evaluation(tmp_path, _plan(config)).publish_plan(writer=True)
  sharded.Evaluation(tmp_path, _plan(config)).publish_plan(writer=True)  # same run: fine
  with pytest.raises(ValueError, match="batch_size: 8 there, 4 now"):
    sharded.Evaluation(tmp_path, _plan(config, batch_size=4)).publish_plan(writer=True)
  other = tiny.get_config()
  other.retrieval.seeds = 3
  with pytest.raises(ValueError, match="config.retrieval.seeds: 15 there, 3 now"):
    sharded.Evaluation(tmp_path, _plan(other)).publish_plan(writer=False)
  with pytest.raises(ValueError, match="num_examples"):
    sharded.Evaluation(tmp_path, _plan(config, n=8)).publish_plan(writer=True)
  # a shard file that holds other examples than the plan's is named, never merged
  evaluation = sharded.Evaluation(tmp_path, _plan(config))
  path = evaluation.shard_path(1)
  path.parent.mkdir(parents=True)
  path.write_text(json.dumps({"index": 0, "qid": evaluation.plan.qids[0]}) + "\n")
  with pytest.raises(ValueError, match="shard-00001-of-00002.jsonl: holds examples"):
    evaluation.read_shard(1)
  with pytest.raises(TimeoutError, match=r"shards \[0\]"):
    evaluation.wait_for_shards(0.3)


def test_datasets_without_graphs_refuse_retrieval_modes(tmp_path):
  data = registry.open_dataset("okvqa", "val", registry.Location(
      root=DATA / "okvqa", data_dir=tmp_path))
  sharded.check_mode(data, "no_retrieval")
  for mode in ("graphloom", "flat_rag"):
    with pytest.raises(ValueError, match="use mode 'no_retrieval'"):
      sharded.check_mode(data, mode)
  sharded.check_mode(registry.open_dataset("scenekb", SPLIT), "graphloom")
  with pytest.raises(ValueError, match="--manual_dir"):
    registry.open_dataset("mmqa", None, registry.Location(data_dir=tmp_path))


def _answer_rows(examples, rng, texts):
  """Prediction rows as answer_shard writes them, with random answers."""
  rows = []
  for i, ex in enumerate(examples):
    choice = int(rng.integers(len(ex.options))) if ex.options else None
    rows.append({"index": i, "qid": ex.qid, "group": ex.group, "gold": ex.gold,
                 "text": str(rng.choice(texts)), "choice": choice,
                 "supported": bool(rng.integers(2))})
  return rows


def test_tfds_datasets_give_the_readers_examples_and_official_metrics(tmp_path, rng):
  # ScienceQA: the choices are the options, the hint is the context, official breakdowns
  problems = scienceqa.load(DATA / "scienceqa", "test")
  data = registry.open_dataset("scienceqa", None, registry.Location(
      root=DATA / "scienceqa", data_dir=tmp_path))
  examples = data.examples(0, len(data))
  assert [e.qid for e in examples] == [p.pid for p in problems]
  for e, p in zip(examples, problems):
    assert e.options == list(p.choices) and e.gold["answer"] == p.answer
    assert e.question == (f"Context: {p.hint}\n{p.question}" if p.hint else p.question)
  rows = _answer_rows(examples, rng, ["x"])
  got = registry.score("scienceqa", rows)
  want = scienceqa_accuracy([r["choice"] for r in rows], problems)
  assert got["scienceqa"] == want and got["accuracy"] == want["average"]
  # OK-VQA: the 10 human answers, VQA accuracy overall and per question type
  questions = okvqa.load(DATA / "okvqa", "val")
  data = registry.open_dataset("okvqa", None, registry.Location(
      root=DATA / "okvqa", data_dir=tmp_path))
  examples = data.examples(0, len(data))
  assert [e.qid for e in examples] == [str(q.question_id) for q in questions]
  assert [e.gold["answers"] for e in examples] == [list(q.answers) for q in questions]
  pool = [a for q in questions for a in q.answers] + ["nothing"]
  rows = _answer_rows(examples, rng, pool)
  got = registry.score("okvqa", rows)
  accs = [answers.vqa_accuracy(r["text"], q.answers) for r, q in zip(rows, questions)]
  assert got["vqa_accuracy"] == pytest.approx(100 * np.mean(accs))
  for group, g in got["by_question_type"].items():
    mine = [a for a, e in zip(accs, examples) if e.group == group]
    assert g["count"] == len(mine) and g["vqa_accuracy"] == pytest.approx(100 * np.mean(mine))
  # MMQA: gold answer lists, EM / F1 by the official scorer, per question type
  official = mmqa.MMQA.load(DATA / "mmqa", "dev").questions
  data = registry.open_dataset("mmqa", None, registry.Location(
      root=DATA / "mmqa", data_dir=tmp_path))
  examples = data.examples(0, len(data))
  assert [e.qid for e in examples] == [q.qid for q in official]
  assert [e.gold["answers"] for e in examples] == [q.answer_texts for q in official]
  assert [e.group for e in examples] == [q.type for q in official]
  rows = _answer_rows(examples, rng, [a for q in official for a in q.answer_texts] + ["no"])
  got = registry.score("mmqa", rows)
  pairs = [answers.answer_metrics(r["text"], q.answer_texts) for r, q in zip(rows, official)]
  assert got["em"] == pytest.approx(100 * np.mean([e for e, _ in pairs]))
  assert got["f1"] == pytest.approx(100 * np.mean([f for _, f in pairs]))
  assert sum(g["count"] for g in got["by_type"].values()) == len(rows)
  assert got["supported"] == pytest.approx(100 * np.mean([r["supported"] for r in rows]))


def test_wall_clock_fields_leave_the_prediction():
  record = {"index": 3, "qid": "q", "text": "a", "timings": {"decoding": 0.5},
            "correction": {"score": 0.1, "action": "expansion_boost",
                           "utilities": {"expansion_boost": 0.2},
                           "details": {"seconds": 0.01, "kept": "corrected"}}}
  row, clock = sharded.split_wall_clock(record)
  assert row == {"index": 3, "qid": "q", "text": "a",
                 "correction": {"score": 0.1, "action": "expansion_boost",
                                "details": {"kept": "corrected"}}}
  assert clock == {"index": 3, "qid": "q", "timings": {"decoding": 0.5},
                   "correction_utilities": {"expansion_boost": 0.2},
                   "correction_seconds": 0.01}
  assert record["timings"] == {"decoding": 0.5}  # the input is left alone
