r"""Rows of the PathQuestion / WorldCup2014 comparison: each question of a split answered by
`GraphLoom.answer_batch` (open answers) in a mode, or under an evidence control, scored by Hits@1
(`evaluation.answers.hits_at_1`), EM and F1 against the best gold answer, and R@5 of the answer
path's triples among the retrieved ones. One JSON per row under
--workdir/rows/<dataset>-<protocol>-<split>-<n>/seed<seed>/, resumable (a finished row is skipped);
`--report` writes report.md beside them with paired differences against GraphLoom and the
lexicon reader (graphloom_jax.graph.path_reader) on the same questions.

  python -m benchmarks.pathqa_rows --config=configs/pathquestion.py \
      --data=pathquestion --data_config=PQL-3H --data_dir=DIR --heads=HEADS \
      --rows=lexicon,no_retrieval,flat_rag,graphloom,shuffled,none,oracle --workdir=OUT

Rows: `lexicon`, `oracle_path` and `topic` (the readers of graph/path_reader, fitted on train;
`topic` echoes the question's topic entity), any
answering mode of `pipeline.types` (`graphloom` needs --heads, a tuned mode --adapters), and the
evidence controls of GraphLoom (`shuffled`: the subgraph retrieved for a question about another
topic entity, over that question's instance graph; `none`: no evidence; `blind`: no evidence
and no entity names in the fusion prefix; `oracle`: the answer path's triples only), and the
component and router-feature rows of the SceneKB tables (`-interleaved`, `-corrective`,
`-revision`, `+revision`, `-router`, `-KG-JSA++`, `-prefix`, `-retrieval_score`, `-context`,
`-conf_ext`, `-centrality`; `evaluation.pathqa_rows.COMPONENT_ROWS`, need --heads). Without an
image, the fusion prefix's object tokens are the instance graph's entity names (the first
`fusion.max_objects` in canonical order).

`--coverage` (no heads, no decoding) writes evidence_coverage.json beside the seeds' rows: per
question, whether the subgraph GraphLoom retrieves names a gold answer, holds a fact linking the
topic entity to one, and how much of the answer path it holds (`pathqa_rows.evidence_coverage`);
the report then splits the rows by it.
"""

from __future__ import annotations

import json
import pathlib
import time

from absl import app, flags
from ml_collections import config_flags

from graphloom_jax import atomic
from graphloom_jax.pipeline import GraphLoom
from graphloom_jax.evaluation import pathqa_rows


def _define_flags():
  """The command line's flags, defined only when this file runs as a script: importing it
  (tests do) defines none, so it never collides with other modules' flags."""
  global _CONFIG, _DATA, _DATASET, _DIR, _PROTOCOL, _SPLIT, _LIMIT, _HEADS, _ADAPTERS, _ROWS, \
      _SEED, _BATCH, _OUT, _REPORT, _PREFIX, _COVERAGE
  _CONFIG = config_flags.DEFINE_config_file("config", "configs/pathquestion.py",
                                            "GraphLoom config (decoder, thresholds)")
  _DATA = flags.DEFINE_enum("data", "pathquestion", ["pathquestion", "wc2014"], "benchmark")
  _DATASET = flags.DEFINE_string("data_config", "PQL-3H", "dataset: PQ-2H ... WC-C")
  _DIR = flags.DEFINE_string("data_dir", None, "folder with the release files", required=True)
  _PROTOCOL = flags.DEFINE_enum("protocol", "path", ["path", "line"], "split protocol")
  _SPLIT = flags.DEFINE_enum("split", "test", ["validation", "test"], "split")
  _LIMIT = flags.DEFINE_integer("num_examples", 0, "first N questions of the split (0: all)")
  flags.DEFINE_alias("limit", "num_examples")
  _HEADS = flags.DEFINE_string("heads", None, "trained GraphLoom heads (folder)")
  _ADAPTERS = flags.DEFINE_list("adapters", [], "mode=folder of a trained text adapter")
  _ROWS = flags.DEFINE_list("rows", ["lexicon", "no_retrieval", "flat_rag", "graphloom"],
                            "rows to run")
  _SEED = flags.DEFINE_integer("seed", 0, "training seed of the heads (a label for the rows)")
  _BATCH = flags.DEFINE_integer("batch", 8, "questions per answer_batch call")
  _OUT = flags.DEFINE_string("workdir", "runs/pathqa_rows", "output folder")
  flags.DEFINE_alias("out", "workdir")
  _REPORT = flags.DEFINE_bool("report", False, "only write report.md from the rows present")
  _PREFIX = flags.DEFINE_bool("gold_in_prefix", False,
                              "only print how often the prefix's object names hold a gold "
                              "answer (pathqa_rows.gold_in_prefix), no model")
  _COVERAGE = flags.DEFINE_bool("coverage", False,
                                "only write evidence_coverage.json beside the seeds' rows: what "
                                "GraphLoom's retrieved subgraph holds per question "
                                "(pathqa_rows.evidence_coverage; no heads, no decoding)")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  ds = pathqa_rows.readers()[_DATA.value].load(_DATASET.value, root=_DIR.value)
  questions = ds.split(_SPLIT.value, _PROTOCOL.value)
  questions = questions[:_LIMIT.value] if _LIMIT.value else questions
  folder = pathlib.Path(_OUT.value) / "rows" / (
      f"{_DATASET.value}-{_PROTOCOL.value}-{_SPLIT.value}-{len(questions)}")
  if _PREFIX.value:
    found = pathqa_rows.gold_in_prefix(_CONFIG.value, ds, questions)
    print(json.dumps(dict(dataset=_DATASET.value, split=_SPLIT.value, **found)))
    return
  if _REPORT.value:
    print(pathqa_rows.write_report(folder, ds, _CONFIG.value))
    return
  if _COVERAGE.value:
    system = GraphLoom.from_config(_CONFIG.value, kb_sources=[])
    start = time.time()
    records = pathqa_rows.evidence_coverage(system, ds, questions, _BATCH.value)
    summary = pathqa_rows.coverage_summary(records)
    folder.mkdir(parents=True, exist_ok=True)
    atomic.atomic_write_text(folder / pathqa_rows.COVERAGE_FILE, json.dumps(dict(
        dataset=_DATASET.value, protocol=_PROTOCOL.value, split=_SPLIT.value, summary=summary,
        wall_seconds=time.time() - start, records=records), indent=1) + "\n")
    print(json.dumps(dict(dataset=_DATASET.value, split=_SPLIT.value, **summary)))
    return
  seed_dir = folder / f"seed{_SEED.value}"
  seed_dir.mkdir(parents=True, exist_ok=True)
  system = None
  for row in _ROWS.value:
    path = seed_dir / f"{row}.json"
    if path.exists():
      print(f"{row}: done already ({path})")
      continue
    start = time.time()
    if row in pathqa_rows.READER_ROWS:
      records = pathqa_rows.reader_row(ds, questions, pathqa_rows.READER_ROWS[row],
                                       _PROTOCOL.value)
    else:
      if system is None:
        adapters = dict(a.split("=", 1) for a in _ADAPTERS.value)
        system = GraphLoom.from_config(_CONFIG.value, heads=_HEADS.value, adapters=adapters,
                                       kb_sources=[])
      if row in pathqa_rows.COMPONENT_ROWS:
        if not _HEADS.value:
          raise app.UsageError(f"row {row!r}: give GraphLoom's trained heads with --heads=DIR")
        records = pathqa_rows.component_row(system, _HEADS.value, ds, questions, row,
                                            _BATCH.value)
      else:
        records = pathqa_rows.system_row(system, ds, questions, row, _BATCH.value)
    result = dict(row=row, seed=_SEED.value, dataset=_DATASET.value, protocol=_PROTOCOL.value,
                  split=_SPLIT.value, heads=_HEADS.value, metrics=pathqa_rows.metrics(records),
                  wall_seconds=time.time() - start, records=records)
    atomic.atomic_write_text(path, json.dumps(result, indent=1) + "\n")
    m = result["metrics"]
    print(f"{row}: Hits@1 {m['hits']:.1f} EM {m['em']:.1f} ({result['wall_seconds']:.0f}s)",
          flush=True)
  print(pathqa_rows.write_report(folder, ds, _CONFIG.value))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
