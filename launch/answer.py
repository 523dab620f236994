r"""The main job: GraphLoom answers SceneKB questions, citing the triples it used.

  python -m launch.answer                                 # SceneKB v3 test questions
  python -m launch.answer --mode=flat_rag                 # a baseline through the same pipeline
  python -m launch.answer --compare --num_examples=30     # all three modes, one table
  python -m launch.answer --question="What is the horse in front of?" \
      --triples_file=scene.jsonl                          # your own question (triples JSONL,
                                                          # or a VG scene graph .json)
  python -m launch.answer --output=out.jsonl              # every Answer, provenance included
  python -m launch.answer --explain_dir=explain           # per answer: its subgraph as GraphML,
                                                          # a picture of it, its router gates

Per question it prints the answer, the triples it cites (routed slots at the answer steps with
their gates and sources) and whether verification passed; at the end EM / F1 (MMQA scorer),
4-way multiple-choice accuracy (length-normalised log-likelihood), the share of answers whose
claims the verifier supports, the corrective actions taken and the median seconds per stage.
"""

import collections
import json
import pathlib
import time

import numpy as np
from absl import app, flags, logging
from tqdm import tqdm

from graphloom_jax import atomic
from graphloom_jax.data import mmqa, scenekb
from graphloom_jax.evaluation import answers as metrics
from graphloom_jax.graph import export
from graphloom_jax.graph.scene_graph import read_scene_graphs
from graphloom_jax.graph.triples import read_triples
from graphloom_jax.pipeline import MODES, STAGES, GraphLoom
from graphloom_jax.pipeline.graphloom import HEADS_DIR, HEADS_FILE, HEADS_META
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/smollm2.py", "configuration")
flags.DEFINE_string("heads", str(HEADS_DIR / "smollm2"), "trained heads (launch.train's "
                    "WORKDIR/heads); the default ships with the package")
flags.DEFINE_enum("mode", "graphloom", MODES, "how the evidence reaches the decoder")
flags.DEFINE_bool("compare", False, "run all three modes on the same questions")
flags.DEFINE_string("split", "test", "SceneKB split")
flags.DEFINE_string("root", None, "a SceneKB folder (build_benchmark --out=DIR); default: the "
                    "embedded SceneKB v3")
flags.DEFINE_integer("num_examples", 10, "SceneKB questions (round-robin over families)")
flags.DEFINE_alias("num_questions", "num_examples")
flags.DEFINE_integer("batch_size", 5, "questions decoded together")
flags.DEFINE_string("output", None, "write every Answer as JSONL here")
flags.DEFINE_alias("predictions", "output")
flags.DEFINE_string("question", None, "answer your own question (with --triples_file)")
flags.DEFINE_string("triples_file", None, "triples (.jsonl / .json) or a VG scene graph (.json)")
flags.DEFINE_list("options", None, "optional answer options for --question")
flags.DEFINE_string("explain_dir", None, "write per answer DIR/<qid>.graphml (its retrieved "
                    "subgraph with gates and citations), DIR/<qid>_subgraph.png and "
                    "DIR/<qid>_gates.png (<qid>_<mode> with --compare; 0 for --question)")
FLAGS = flags.FLAGS


def show(answer, gold=None, options=None):
  mark = "supported" if answer.supported else "NOT supported"
  head = f"  -> {answer.text!r}" + (f"  (gold {gold})" if gold else "")
  if answer.choice is not None and options:
    head += f"  choice: {options[answer.choice]!r}"
  note = ""
  if answer.revised:
    note = f"; revised from {answer.first_text!r}"
  elif answer.revision_text is not None:
    note = f"; revision {answer.revision_text!r} supported less, kept"
  lines = [head, f"     verification: {mark}{note}"]
  if answer.correction is not None and answer.correction.action:
    lines.append(f"     correction: {answer.correction.action} (evaluator "
                 f"{answer.correction.score:.2f} -> {answer.correction.score_after:.2f})")
  for c in answer.evidence[:4]:
    t = c.triple
    src = t.source + (f" {t.provenance.ref}" if t.provenance.ref else "")
    lines.append(f"     cites ({t.subject}, {t.relation}, {t.object})  gate {c.gate:.2f}  [{src}]")
  return "\n".join(lines)


def summary(name, answers, questions):
  golds = [q.answer_texts for q in questions]
  scores = metrics.mean_answer_metrics([a.text for a in answers], golds)
  mc = np.mean([a.choice == q.extra["answer_index"] for a, q in zip(answers, questions)])
  supported = np.mean([a.supported for a in answers])
  actions = collections.Counter(a.correction.action for a in answers
                                if a.correction and a.correction.action)
  stages = {s: float(np.median([a.timings.get(s, 0.0) for a in answers])) for s in STAGES}
  online = float(np.median([sum(v for k, v in a.timings.items()
                                if k not in ("instance_graph", "options")) for a in answers]))
  return dict(mode=name, em=scores["em"], f1=scores["f1"], mc_accuracy=100 * float(mc),
              supported=100 * float(supported), revised=sum(a.revised for a in answers),
              corrections=dict(actions), median_seconds=stages, online_median=online)


def print_summary(rows, n, split):
  print(f"\nSceneKB {split}, {n} questions")
  print(f"{'mode':13s} {'EM':>6s} {'F1':>6s} {'MC acc':>7s} {'supported':>9s} {'revised':>7s} "
        f"{'s/quest.':>8s}  corrective actions")
  for r in rows:
    acts = ", ".join(f"{k}: {v}" for k, v in sorted(r["corrections"].items())) or "none fired"
    print(f"{r['mode']:13s} {r['em']:6.1f} {r['f1']:6.1f} {r['mc_accuracy']:7.1f} "
          f"{r['supported']:8.1f}% {r['revised']:7d} {r['online_median']:8.3f}  {acts}")
  print("s/quest.: median seconds per question of this run without the instance graph and the "
        "option scoring, jit compilation of the first batch included (warm latency: "
        "benchmarks/bench_pipeline_latency.py)")
  print("median seconds per stage: " + "; ".join(
      f"{r['mode']}: " + ", ".join(f"{s} {v:.3f}" for s, v in r["median_seconds"].items())
      for r in rows))


def read_own_triples(path):
  """The triples of --triples_file: a VG scene graph (.json with "relationships") or triples."""
  path = pathlib.Path(path)
  if path.suffix == ".json" and '"relationships"' in path.read_text(errors="replace")[:100000]:
    triples, _ = read_scene_graphs(path)
  else:
    triples, _ = read_triples(path)
  if not triples:
    raise app.UsageError(f"--triples_file={path}: no triples in the file")
  return triples


def check_flags(config):
  """Every flag, before a model is loaded; returns the triples of --triples_file (or None)."""
  common.model_section(config)
  if FLAGS.heads is not None:
    heads = common.check_input_dir("heads", FLAGS.heads)
    for name in (HEADS_FILE, HEADS_META):
      if not (heads / name).is_file():
        raise app.UsageError(f"--heads={FLAGS.heads}: no {name} there (launch.train writes "
                             "WORKDIR/heads)")
  if FLAGS.output is not None:
    common.check_output_file("output", FLAGS.output)
  if FLAGS.explain_dir is not None:
    common.check_output_dir("explain_dir", FLAGS.explain_dir)
  if FLAGS.question is None:
    for name in ("triples_file", "options"):
      if FLAGS[name].present:
        raise app.UsageError(f"--{name} is only used with --question (your own question)")
    common.check_int("num_examples", FLAGS.num_examples, 1)
    common.check_int("batch_size", FLAGS.batch_size, 1)
    if FLAGS.split not in scenekb.SPLITS:
      raise app.UsageError(f"--split={FLAGS.split}: expected one of {list(scenekb.SPLITS)}")
    if FLAGS.root is not None and mmqa.find_file(FLAGS.root, "kb_wordnet") is None:
      raise app.UsageError(f"--root={FLAGS.root}: not a SceneKB folder (no kb_wordnet.jsonl(.gz); "
                           "write one with python -m graphloom_jax.data.build_benchmark --out=DIR)")
    return None
  if not FLAGS.question.strip():
    raise app.UsageError("--question is empty")
  if FLAGS.compare:
    raise app.UsageError("--compare runs the SceneKB questions; drop it or drop --question")
  for name in ("num_examples", "split", "root"):
    if FLAGS[name].present or (name == "num_examples" and FLAGS["num_questions"].present):
      raise app.UsageError(f"--{name} selects SceneKB questions; it cannot be combined with "
                           "--question")
  if FLAGS.options is not None:
    if len(FLAGS.options) < 2 or any(not o.strip() for o in FLAGS.options):
      raise app.UsageError(f"--options={','.join(FLAGS.options)}: give at least 2 non-empty "
                           "comma-separated options")
  if not FLAGS.triples_file:
    raise app.UsageError("--question needs --triples_file")
  common.check_input_file("triples_file", FLAGS.triples_file)
  try:
    return read_own_triples(FLAGS.triples_file)
  except ValueError as e:
    raise app.UsageError(f"--triples_file={FLAGS.triples_file}: {e}") from None


def answer_own(system, triples):
  answer = system.answer(FLAGS.question, triples, options=FLAGS.options, mode=FLAGS.mode)
  print(FLAGS.question)
  print(show(answer, options=FLAGS.options))
  return [answer]


def main(argv):
  del argv
  config = _CONFIG.value
  own_triples = check_flags(config)
  start = time.time()
  system = GraphLoom.from_config(config, heads=FLAGS.heads)
  logging.info("GraphLoom: decoder %s (%s), heads %s, loaded in %.1fs", system.decoder.source,
               config.model.dtype, FLAGS.heads, time.time() - start)
  if FLAGS.question is not None:
    answers = answer_own(system, own_triples)
    names = ["0"]
  else:
    kb = scenekb.load(FLAGS.split, root=FLAGS.root)
    system.kb_sources = [kb.kb_source()]
    questions = scenekb.round_robin(kb.questions, FLAGS.num_examples)
    graphs = {}
    for inst in tqdm(sorted({q.extra["instance_id"] for q in questions}), desc="instance graphs"):
      t0 = time.perf_counter()
      graphs[inst] = (system.instance_graph(kb.scene_graph(inst), instance_id=inst),
                      time.perf_counter() - t0)
    modes = MODES if FLAGS.compare else (FLAGS.mode,)
    rows, answers, names = [], [], []
    for mode in modes:
      got = []
      bar = tqdm(range(0, len(questions), FLAGS.batch_size), desc=mode, unit="batch")
      for s in bar:
        qs = questions[s:s + FLAGS.batch_size]
        out = system.answer_batch([q.question for q in qs],
                                  [graphs[q.extra["instance_id"]][0] for q in qs],
                                  options=[q.extra["options"] for q in qs], mode=mode)
        for q, a in zip(qs, out):
          a.timings["instance_graph"] = graphs[q.extra["instance_id"]][1]
          tqdm.write(f"[{mode} {q.family:9s}] {q.question}\n" +
                     show(a, q.answer_texts, q.extra["options"]))
        got += out
      rows.append(summary(mode, got, questions))
      answers += got
      names += [q.qid + (f"_{mode}" if FLAGS.compare else "") for q in questions]
    print_summary(rows, len(questions), FLAGS.split)
  if FLAGS.output:
    atomic.atomic_write_text(FLAGS.output,
                             "".join(json.dumps(a.to_json()) + "\n" for a in answers))
    logging.info("wrote %d answers to %s", len(answers), FLAGS.output)
  if FLAGS.explain_dir:
    n = export.write_explanations(answers, names, FLAGS.explain_dir)
    logging.info("wrote the subgraphs and gates of %d answers to %s", n, FLAGS.explain_dir)


def cli():
  """The `graphloom-answer` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
