"""GraphLoom's per-question latency on this machine, stage by stage (SmolLM2 + MiniLM + the
shipped heads, one question at a time as an online system answers).

  python benchmarks/bench_pipeline_latency.py --num_examples=30

Online latency = retrieval + correction + evidence + decoding (a short answer with routing at
every step, its citations read from the routing the loop records) + verification (+ the
revision when a claim fails), with the instance graph cached per scene; the full pipeline adds
building the instance graph (filtering, canonicalisation, KB enrichment, embedding the triples:
each scene is built once with a fresh embedding memo, timed apart) and scoring the 4 options
(multiple choice, `--options`, not part of the online figure). Each stage is timed inside
`GraphLoom.answer` (Answer.timings). The first `--warmup` questions compile the jitted shapes
and are not counted. Prints the medians and one JSON line; the target is 0.5 s, the paper's
figure for comparison 119 ms on an A100 with an 8B decoder.

`--batch_sizes` adds batched throughput: the same questions (graphs cached) through
`answer_batch` in batches of each size, one untimed batch first to compile its shapes,
questions/s over the rest (online stages, no options).
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from absl import app, flags  # noqa: E402

from graphloom_jax.data import scenekb  # noqa: E402
from graphloom_jax.pipeline import STAGES, GraphLoom  # noqa: E402

_N = flags.DEFINE_integer("num_examples", 30, "timed questions (test split, in file order)")
flags.DEFINE_alias("num_questions", "num_examples")
_WARMUP = flags.DEFINE_integer("warmup", 5, "untimed questions first (compilation)")
_MODE = flags.DEFINE_string("mode", "graphloom", "pipeline mode")
_OPTIONS = flags.DEFINE_bool("options", True, "also score the multiple-choice options")
_BATCHES = flags.DEFINE_list("batch_sizes", [], "batched throughput at these batch sizes")
TARGET = 0.5  # seconds, median online latency (warm, this CPU)


def throughput(system, questions, graphs, size: int, mode: str) -> dict:
  """Questions/s of answer_batch over `questions` in batches of `size` (the first batch
  compiles and is not timed; a trailing partial batch is dropped)."""
  chunks = [questions[i:i + size] for i in range(0, len(questions) - size + 1, size)]
  if len(chunks) < 2:
    raise ValueError(f"--batch_sizes: {size} needs at least {2 * size} questions "
                     f"(--num_examples + --warmup = {len(questions)})")
  ask = lambda qs: system.answer_batch([q.question for q in qs],
                                       [graphs[q.extra["instance_id"]][0] for q in qs], mode=mode)
  ask(chunks[0])
  t0 = time.perf_counter()
  for c in chunks[1:]:
    ask(c)
  wall = time.perf_counter() - t0
  n = size * (len(chunks) - 1)
  return dict(batch=size, questions=n, seconds=wall, questions_per_second=n / wall)


def main(argv):
  del argv
  t0 = time.perf_counter()
  system = GraphLoom.from_pretrained("embedded")
  print(f"loaded in {time.perf_counter() - t0:.1f}s; load average {os.getloadavg()}")
  kb = scenekb.load("test")
  system.kb_sources = [kb.kb_source()]
  questions = kb.questions[:_WARMUP.value + _N.value]
  rows, graphs = [], {}
  for i, q in enumerate(questions):
    inst = q.extra["instance_id"]
    if inst not in graphs:
      fresh = GraphLoom(system.config, system.decoder, system.embedder.embedder,
                        kb_sources=system.kb_sources)  # an empty embedding memo
      t0 = time.perf_counter()
      fresh.instance_graph(kb.scene_graph(inst), instance_id=inst)
      build = time.perf_counter() - t0
      graphs[inst] = (system.instance_graph(kb.scene_graph(inst), instance_id=inst), build)
    graph, build = graphs[inst]
    t0 = time.perf_counter()
    a = system.answer(q.question, graph, mode=_MODE.value,
                      options=q.extra["options"] if _OPTIONS.value else None)
    wall = time.perf_counter() - t0
    if i >= _WARMUP.value:
      online = wall - a.timings["options"]
      rows.append(dict(a.timings, instance_graph=build, online=online,
                       full=online + build + a.timings["options"], revised=a.revised,
                       attempted=a.first_text is not None,
                       action=a.correction.action if a.correction else None))
  med = {k: statistics.median(r[k] for r in rows) for k in (*STAGES, "online", "full")}
  print(f"{len(rows)} questions, mode {_MODE.value}, load average {os.getloadavg()}")
  for k, v in med.items():
    print(f"  {k:15s} median {1000 * v:8.1f} ms")
  print(f"revisions attempted {sum(r['attempted'] for r in rows)} / {len(rows)}, adopted "
        f"{sum(r['revised'] for r in rows)}; corrective actions "
        f"{sum(r['action'] is not None for r in rows)}")
  print(f"online median {med['online']:.3f} s vs target {TARGET} s (ratio "
        f"{med['online'] / TARGET:.2f}); paper: 0.119 s on an A100 with an 8B decoder")
  batched = []
  for size in map(int, _BATCHES.value):
    batched.append(throughput(system, questions, graphs, size, _MODE.value))
    b = batched[-1]
    print(f"batch {size:3d}: {b['questions_per_second']:.2f} questions/s ({b['questions']} "
          f"questions in {b['seconds']:.1f} s; load average {os.getloadavg()[0]:.1f})")
  print(json.dumps({"median_seconds": med, "questions": len(rows), "batched": batched,
                    "load_average": os.getloadavg()}))


if __name__ == "__main__":
  app.run(main)
