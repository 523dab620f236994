r"""The non-learned baselines on PathQuestion and WorldCup2014 (graphloom_jax.graph.path_reader):
Hits@1 of the oracle path follower, the naive Bayes relation lexicon, the answer prior and the
topic echo on each dataset's validation and test split, under the path split and the published
split by line, with 95% bootstrap intervals; split statistics (how much of a test path train
already holds); the published results beside them. Writes results.json and
pathqa_tables.report.md to --workdir.

  python -m benchmarks.pathqa_tables --pathquestion_dir=DIR --wc2014_dir=DIR \
      --workdir=benchmarks/results/pathqa

Hits@1: the reader's first answer is one of the question's gold answers (KB ids compared
exactly, which is what the release's answer sets hold). Questions with no answer reached count
as wrong.
"""

from __future__ import annotations

import json
import pathlib

from absl import app, flags

from graphloom_jax.data import pathquestion, wc2014
from graphloom_jax.evaluation import pathqa_tables


def _define_flags():
  """The command line's flags, defined only when this file runs as a script: importing it
  (tests do) defines none, so it never collides with other modules' flags."""
  global _PQ, _WC, _OUT, _RESAMPLES
  _PQ = flags.DEFINE_string("pathquestion_dir", None, "folder with the PathQuestion release files")
  _WC = flags.DEFINE_string("wc2014_dir", None, "folder with the WorldCup2014 release files")
  _OUT = flags.DEFINE_string("workdir", "benchmarks/results/pathqa", "output folder")
  flags.DEFINE_alias("out", "workdir")
  _RESAMPLES = flags.DEFINE_integer("resamples", 10_000, "bootstrap resamples")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not (_PQ.value or _WC.value):
    raise app.UsageError("give --pathquestion_dir and/or --wc2014_dir")
  results = {}
  for module, root in ((pathquestion, _PQ.value), (wc2014, _WC.value)):
    if root is None:
      continue
    for name in module.NAMES:
      results[name] = pathqa_tables.evaluate(module.load(name, root=root), _RESAMPLES.value)
      test = results[name]["protocols"]["path"]["readers"]
      print(f"{name}: path split test Hits@1 " + ", ".join(
          f"{k} {v['test']['hits_at_1']}" for k, v in test.items()), flush=True)
  out = pathlib.Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
  (out / "pathqa_tables.report.md").write_text(pathqa_tables.report(results))
  print(f"wrote {out / 'results.json'} and {out / 'pathqa_tables.report.md'}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
