r"""The paper's tables on a SceneKB benchmark drawn by the generator (SceneKB v2), every row through
`GraphLoom.answer_batch` with its mode and switches (pipeline/ablation.py).

  # the text baselines' prompt, chosen on validation (EM of Flat-RAG; ties: no-retrieval EM)
  python -m benchmarks.scenekb_tables --root=runs/scenekb_v2 --select_prompt --split=validation
  # rows on test (resumable: each finished row is a JSON file under --workdir/rows)
  python -m benchmarks.scenekb_tables --root=runs/scenekb_v2 --heads=runs/v2/s0/heads,... \
      --rows=main,components,features,knowledge,sensitivity --num_examples=300
  # the report: results JSON, markdown and PNG plots from the finished rows
  python -m benchmarks.scenekb_tables --root=runs/scenekb_v2 --report

Rows (groups): tuned = no_retrieval_tuned, flat_rag_tuned (their adapters in --adapters, one per
seed); main = symbolic (graph.lookup over the instance graph with the question's
structured query: the non-learned ceiling; SceneKB v3), no_retrieval, flat_rag, graphloom
(every --heads seed; mean +- std); controls = shuffled / no / blind (no evidence, no object
names) / oracle evidence for the trained heads (pipeline/controls.py);
components = -interleaved, -corrective, -revision, -router, -KG-JSA++ (mode routed_text),
-prefix; features = -retrieval_score, -context, -conf_ext, -centrality; knowledge = no KB
enrichment (graph.kb_hops = 0); sensitivity = tau_edge, tau_kb, tau_eval, tau_ent at -20% / +20%;
calibration = gate ECE (15 bins) of the heads in --calibration (name=folder pairs, e.g. a
router trained with L_cal against one trained without) on the test questions. Every row that
reads heads runs once per --heads folder (seed N is the N-th folder; a finished row that read
other heads stops the run); the report gives the mean +- std over seeds, and for the ablation
rows the paired difference from graphloom with a 95% bootstrap interval over questions.

Columns: MC accuracy (length-normalised option log-likelihood), EM / F1 (MMQA scorer, greedy),
H-Rate as the paper defines it (evaluation/hallucination.assess: claims of the answer not
supported by the evidence the mode was given / claims), falsity (claims false per the
generator's ground truth / claims) and abstention, all independent of the pipeline's verifier
(rows written before SceneKB v3 hold v2's H-Rate, the share of answers with a false claim), retrieval R@5 (gold supporting triples among the first five retrieved edges;
none for the modes that read no evidence),
seconds per question (the stage timings of a batch of --batch_size, divided per question:
amortised, not single-question latency) and the share of answers the pipeline's verifier
supports.
"""

from __future__ import annotations

import json
import pathlib

from absl import app, flags
from ml_collections import config_flags

from graphloom_jax.evaluation import scenekb_report
from graphloom_jax.evaluation import scenekb_rows
from graphloom_jax import atomic
from graphloom_jax.data import mmqa, scenekb
from graphloom_jax.evaluation import hallucination
from graphloom_jax.pipeline.types import TUNED_MODES


def _define_flags():
  """The command line's flags, defined only when this file runs as a script: importing it
  (tests do) defines none, so it never collides with other modules' flags."""
  global _CONFIG, _ROOT, _HEADS, _SPLIT, _NUM, _ROWS, _BATCH, _OUT, _SELECT, _STYLES, _REPORT, \
      _SEEDS, _CAL, _WORKDIRS
  _CONFIG = config_flags.DEFINE_config_file("config", "configs/smollm2.py", "configuration")
  _ROOT = flags.DEFINE_string("root", "runs/scenekb_v2", "benchmark folder (build_benchmark --out)")
  _HEADS = flags.DEFINE_list("heads", [], "trained heads folders, one per training seed")
  _SPLIT = flags.DEFINE_enum("split", "test", ["test", "validation"], "split to answer")
  _NUM = flags.DEFINE_integer("num_examples", 300, "questions (round-robin over families)")
  flags.DEFINE_alias("num_questions", "num_examples")
  _ROWS = flags.DEFINE_list("rows", ["main"], "groups or row names to run")
  _BATCH = flags.DEFINE_integer("batch_size", 10, "questions decoded together")
  _OUT = flags.DEFINE_string("workdir", "benchmarks/results/scenekb_v2", "results folder")
  flags.DEFINE_alias("out", "workdir")
  _SELECT = flags.DEFINE_bool("select_prompt", False, "choose baseline.prompt on validation")
  _STYLES = flags.DEFINE_list("styles", [], "with --select_prompt: the styles to (re)run (default "
                              "all); results of others already in prompt_selection.json are kept")
  _REPORT = flags.DEFINE_bool("report", False, "write the report from the finished rows")
  _CAL = flags.DEFINE_list("calibration", [], "name=heads_folder pairs for the calibration rows")
  _WORKDIRS = flags.DEFINE_list("workdirs", [], "training workdirs for the learning curves")
  _SEEDS = flags.DEFINE_list("seeds", [], "run only these seeds (indices into --heads), e.g. to "
                             "run two seeds of a row in parallel; default: every --heads folder")
  global _ADAPTERS, _COMPARE, _AGAINST, _APART
  _ADAPTERS = flags.DEFINE_list("adapters", [], "mode=folder pairs of trained text baselines "
                                "(launch.train --config.train.target=MODE), one per training "
                                "seed in seed order, e.g. flat_rag_tuned=runs/v3/frt0/heads")
  _COMPARE = flags.DEFINE_list("compare", [], "row files (rows/<split-n>/seed<s>/<row>.json, any "
                               "workdir) to pair against --against: prints the paired "
                               "differences and exits")
  _AGAINST = flags.DEFINE_list("against", [], "with --compare: the reference's row files, "
                               "paired by seed")
  _APART = flags.DEFINE_bool("apart", False, "with --compare: the two sides were trained apart "
                             "(seed s of one shares nothing with seed s of the other): average "
                             "each question over each side's own seeds instead of pairing seeds")


def _print_comparison(row_files, reference_files, match_seeds=True):
  try:
    result = scenekb_report.compare_files(row_files, reference_files, match_seeds=match_seeds)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  for metric, label in (("mc_accuracy", "MC"), ("em", "EM"), ("text_h_rate", "H-Rate, text")):
    p = result[metric]
    if p is None:
      print(f"{label}: no questions answered by both sides (or rows without the rate)")
      continue
    extra = f", same option {p['same_choice']:.0f}%" if "same_choice" in p else ""
    seeds = (f"{p['seeds']} seed(s)" if match_seeds
             else f"{p['seeds_each'][0]} against {p['seeds_each'][1]} seed(s)")
    print(f"{label}: {p['delta']:+.1f} [{p['lo']:+.1f}, {p['hi']:+.1f}] over {p['questions']} "
          f"questions, {seeds}{extra}")


def main(argv):
  del argv
  if _COMPARE.value or _AGAINST.value:
    _print_comparison(_COMPARE.value, _AGAINST.value, match_seeds=not _APART.value)
    return
  base = _CONFIG.value
  root = pathlib.Path(_ROOT.value)
  if mmqa.find_file(root, "truth") is None:  # the embedded benchmark's files are gzipped
    raise app.UsageError(f"--root={root}: no truth.jsonl(.gz); draw a benchmark first with "
                         "python -m graphloom_jax.data.build_benchmark --version=3 --out=DIR")
  out = pathlib.Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  if _SELECT.value:
    scenekb_rows.select_prompt(base, root, out, _NUM.value, _BATCH.value, _STYLES.value)
    return
  if _REPORT.value:
    scenekb_report.write(out, [pathlib.Path(w) for w in _WORKDIRS.value], scenekb_rows.GROUPS)
    return
  chosen = out / "prompt_selection.json"
  if chosen.exists():
    base.baseline.prompt = json.loads(chosen.read_text())["chosen"]
    print(f"baseline prompt (chosen on validation): {base.baseline.prompt}")
  kb = scenekb.load(_SPLIT.value, root=root)
  truth = hallucination.GroundTruth.load(root)
  questions = scenekb.round_robin(kb.questions, _NUM.value)
  heads = _HEADS.value
  try:
    rows = scenekb_rows.select_rows(_ROWS.value)
    adapters = scenekb_rows.adapter_folders(_ADAPTERS.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  if not heads and any(mode in ("graphloom", "routed_text") for _, _, mode, _ in rows):
    raise app.UsageError("--heads: give at least one trained heads folder (rows "
                         f"{[n for _, n, m, _ in rows if m in ('graphloom', 'routed_text')]} "
                         "read them)")
  system = scenekb_rows.base_system(base, heads[0] if heads else None, root)
  rows_dir = out / "rows"
  for group, name, mode, overrides in rows:
    folders = adapters.get(mode, []) if mode in TUNED_MODES else heads
    if mode in TUNED_MODES and not folders:
      raise app.UsageError(f"row {name!r}: give its trained adapters with --adapters={mode}=DIR")
    try:
      runs = scenekb_rows.row_seeds(mode, folders, [int(x) for x in _SEEDS.value])
    except ValueError as e:
      raise app.UsageError(str(e)) from None
    for seed, heads_dir in runs:
      path = rows_dir / f"{_SPLIT.value}-{len(questions)}" / f"seed{seed}" / f"{name}.json"
      if path.exists():
        try:
          scenekb_rows.check_done(path, heads_dir)
        except ValueError as e:
          raise app.UsageError(str(e)) from None
        print(f"{name} seed {seed}: done ({path})")
        continue
      settings = {k: v for k, v in overrides.items() if k != "control"}
      config = scenekb_rows.configured(base, settings)
      print(f"{group} / {name} (mode {mode}, seed {seed}, {overrides})", flush=True)
      sys_ = scenekb_rows.variant(system, config,
                                  heads_dir if mode not in scenekb_rows.HEADLESS else None, mode)
      r = scenekb_rows.run_row(sys_, kb, questions, mode, truth, _BATCH.value,
                               control=overrides.get("control"))
      r.update(group=group, name=name, mode=mode, seed=seed,
               overrides={k: repr(v) if isinstance(v, scenekb_rows.Scale) else v
                          for k, v in overrides.items()},
               heads=heads_dir, split=_SPLIT.value, baseline_prompt=base.baseline.prompt)
      atomic.atomic_write_json(path, r)
      print(f"  {json.dumps(r['metrics'])}", flush=True)
  for name_dir in _CAL.value:
    name, heads_dir = name_dir.split("=", 1)
    path = rows_dir / f"{_SPLIT.value}-{len(questions)}" / f"calibration-{name}.json"
    if path.exists():
      continue
    sys_ = scenekb_rows.variant(system, base, heads_dir)
    atomic.atomic_write_json(path, scenekb_rows.gate_calibration(
        sys_, kb, questions, base.train.seq_len, name, heads_dir))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
