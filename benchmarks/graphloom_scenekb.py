"""GraphLoom vs Flat-RAG vs no retrieval on SceneKB, all three through `GraphLoom.answer_batch`
(the same instance graphs, subgraphs, corrections and verifier), plus the router's gate ECE.

  python -m benchmarks.graphloom_scenekb                          # the shipped SmolLM2 heads
  python -m benchmarks.graphloom_scenekb --heads=runs/x/heads --num_examples=60

On `num_questions` test questions (round-robin over the five families) it reports per mode:
multiple-choice accuracy (length-normalised option log-likelihood under the mode's
conditioning), open-answer EM / F1 (greedy, MMQA scorer), the share of answers whose claims the
verifier supports, revisions, and for GraphLoom the precision of its citations (cited triples
that are gold supporting triples). Router calibration: gates at the first answer step of the
gold answer against slot utility (gold-support membership) on the test questions: ECE of the raw
gates, and after a temperature fitted on `num_val` validation questions (post-hoc scaling of the
same router, not a separately trained calibrated router); a reliability diagram and every figure
go to --workdir.
"""

import json
import pathlib
import time

import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from graphloom_jax.data import scenekb
from graphloom_jax.evaluation import answers, calibration
from graphloom_jax.ops import routing
from graphloom_jax.pipeline import MODES, GraphLoom
from graphloom_jax.pipeline.graphloom import HEADS_DIR
from graphloom_jax.evaluation.scenekb_rows import gate_stats


def _define_flags():
  """The command line's flags, defined only when this file runs as a script: importing it (the
  SceneKB v2 tables import `gate_stats`) defines none, so it never collides with their flags."""
  global _CONFIG, _HEADS, _NUM, _NUM_VAL, _BATCH, _OUT
  _CONFIG = config_flags.DEFINE_config_file("config", "configs/smollm2.py", "configuration")
  _HEADS = flags.DEFINE_string("heads", str(HEADS_DIR / "smollm2"), "trained heads folder")
  _NUM = flags.DEFINE_integer("num_examples", 60, "test questions (round-robin over families)")
  flags.DEFINE_alias("num_questions", "num_examples")
  _NUM_VAL = flags.DEFINE_integer("num_val", 40, "validation questions for the gate temperature")
  _BATCH = flags.DEFINE_integer("batch_size", 5, "questions decoded together")
  _OUT = flags.DEFINE_string("workdir", "runs/graphloom_scenekb",
                             "folder for benchmark.json and the reliability diagram")
  flags.DEFINE_alias("out", "workdir")


def main(argv):
  del argv
  config = _CONFIG.value
  out = pathlib.Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  system = GraphLoom.from_config(config, heads=_HEADS.value)
  test_kb, val_kb = scenekb.load("test"), scenekb.load("validation")
  system.kb_sources = [test_kb.kb_source()]
  questions = scenekb.round_robin(test_kb.questions, _NUM.value)
  graphs = {i: system.instance_graph(test_kb.scene_graph(i), instance_id=i)
            for i in sorted({q.extra["instance_id"] for q in questions})}
  gold = [q.answer_texts for q in questions]
  results = {}
  for mode in MODES:
    start = time.time()
    got = []
    for s in range(0, len(questions), _BATCH.value):
      qs = questions[s:s + _BATCH.value]
      got += system.answer_batch([q.question for q in qs],
                                 [graphs[q.extra["instance_id"]] for q in qs],
                                 options=[q.extra["options"] for q in qs], mode=mode)
    mc = np.mean([a.choice == q.extra["answer_index"] for a, q in zip(got, questions)])
    cited = [(c.triple.key() in {tuple(g) for g in q.extra["gold_triples"]})
             for a, q in zip(got, questions) for c in a.evidence]
    results[mode] = dict(mc_accuracy=100 * float(mc),
                         **answers.mean_answer_metrics([a.text for a in got], gold),
                         supported=100 * float(np.mean([a.supported for a in got])),
                         revised=int(sum(a.revised for a in got)),
                         citation_precision=float(np.mean(cited)) if cited else None,
                         seconds=time.time() - start, examples=[a.text for a in got[:5]])
    print(f"{mode}: done in {results[mode]['seconds']:.0f}s", flush=True)

  val_questions = scenekb.round_robin(val_kb.questions, _NUM_VAL.value)
  g_test, u_test, m_test = gate_stats(system, test_kb, questions, config.train.seq_len)
  g_val, u_val, m_val = gate_stats(system, val_kb, val_questions, config.train.seq_len)
  z = lambda g: np.log(np.clip(g, 1e-6, 1 - 1e-6)) - np.log1p(-np.clip(g, 1e-6, 1 - 1e-6))
  temp = float(routing.fit_temperature(jnp.asarray(z(g_val).ravel()),
                                       jnp.asarray(u_val.ravel()), jnp.asarray(m_val.ravel())))
  cal = np.asarray(routing.apply_temperature(jnp.asarray(z(g_test)), temp))
  raw_r = calibration.reliability(g_test, u_test, mask=m_test)
  cal_r = calibration.reliability(cal, u_test, mask=m_test)
  png = calibration.reliability_diagram(out / "reliability.png", {
      "raw gates": raw_r, f"temperature {temp:.2f} (fitted on validation)": cal_r})
  results["router_calibration"] = dict(ece_raw=raw_r.ece, ece_temperature=cal_r.ece,
                                       temperature=temp, diagram=str(png),
                                       useful_slot_rate=float(u_test[m_test].mean()))
  (out / "benchmark.json").write_text(json.dumps(results, indent=2))

  print(f"\nSceneKB test, {len(questions)} questions, decoder {system.decoder.source}, heads "
        f"{_HEADS.value}")
  print(f"{'mode':13s} {'MC acc':>7s} {'EM':>6s} {'F1':>6s} {'supported':>9s} {'revised':>7s} "
        f"{'cite prec':>9s}")
  for mode in MODES:
    r = results[mode]
    prec = f"{r['citation_precision']:.2f}" if r["citation_precision"] is not None else "-"
    print(f"{mode:13s} {r['mc_accuracy']:7.1f} {r['em']:6.1f} {r['f1']:6.1f} "
          f"{r['supported']:8.1f}% {r['revised']:7d} {prec:>9s}")
  rc = results["router_calibration"]
  print(f"router gate ECE {rc['ece_raw']:.3f} raw -> {rc['ece_temperature']:.3f} with T = "
        f"{temp:.2f}; useful-slot rate {rc['useful_slot_rate']:.3f}")
  for mode in ("flat_rag", "no_retrieval"):
    print(f"GraphLoom / {mode} MC accuracy ratio: "
          f"{results['graphloom']['mc_accuracy'] / max(results[mode]['mc_accuracy'], 1e-9):.2f}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
