r"""GRAIL's retrieval evaluations: Evidence Set Completion and Sequential Pool Construction.

  python -m launch.evaluate_retrieval --task=evidence_completion --data=embedded \
      --workdir=/tmp/eval_embedded [--grail_dir=/tmp/grail_embedded/grail]
  python -m launch.evaluate_retrieval --task=sequential_pool --data=mmqa --workdir=/tmp/eval \
      --config.grail.mmqa_dir=/path/to/multimodalqa/dataset

Rows: Query-only, Additive, GRAIL, Hybrid (all in the trained, aligned space), plus
"GRAIL (untrained gate)": the same adapters with the gate at its initialisation, which isolates
what training the gate buys. Without --grail_dir the launcher first trains with --config
(launch.train_grail) into <workdir>/grail_train.

Writes <workdir>/<task>_<data>.json (every number printed, the per-instance ranks or
per-question Set-Recall they come from, latency, and the data notes: which parts of MMQA are
not available offline) and PNG plots (<task>_<data>.png).
"""


from absl import app
from absl import flags

from graphloom_jax.data import grail_sets
from graphloom_jax.evaluation import grail_eval, written_queries
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/grail.py", "GRAIL config file.")
_TASK = flags.DEFINE_enum("task", None, ["evidence_completion", "sequential_pool"], "Which task.",
                          required=True)
_DATA = flags.DEFINE_enum("data", "embedded", list(grail_sets.DATA), "Which data set "
                          "(pathquestion / wc2014 read --config.grail.pathqa_dir and "
                          "--config.grail.pathqa_configs).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Results go here.", required=True)
flags.DEFINE_alias("output_dir", "workdir")
_GRAIL_DIR = flags.DEFINE_string("grail_dir", "", "Trained GRAIL checkpoint (launch.train_grail "
                                 "writes <workdir>/grail); empty: train one first.")
_SPLIT = flags.DEFINE_string("split", "test", "Questions of this split are evaluated.")
_NUM_EXAMPLES = flags.DEFINE_integer("num_examples", 0, "Evaluate at most this many questions "
                                     "(0 = all).")
flags.DEFINE_alias("max_questions", "num_examples")
_BUDGETS = flags.DEFINE_list("budgets", ["10", "20"], "Sequential pool budgets K.")
_MAX_SLICES = flags.DEFINE_integer("max_slices", 5, "Sequential pool: S = 1..max_slices.")
_LATENCY_QUERIES = flags.DEFINE_integer("latency_queries", 100, "Queries timed one by one.")
_WRITTEN = flags.DEFINE_multi_enum(
    "written", [], list(written_queries.METHODS),
    "Evidence completion: also rank the queries the decoder (--config.model) writes with these "
    "methods (repeat the flag).")
_WRITTEN_LATENCY = flags.DEFINE_integer("written_latency_queries", 20, "Decoder-written "
                                        "queries timed one by one (each writes a query).")


def check_flags(config) -> tuple[int, ...]:
  """Every flag before any data or model is loaded; returns the budgets as ints."""
  common.check_grail_data(_DATA.value, config.grail, f"--data={_DATA.value}")
  common.check_output_dir("workdir", _WORKDIR.value)
  if _GRAIL_DIR.value:
    common.check_input_dir("grail_dir", _GRAIL_DIR.value)
  if _WRITTEN.value:
    if _TASK.value != "evidence_completion":
      raise app.UsageError("--written: decoder-written queries are rows of "
                           "--task=evidence_completion only")
    common.model_section(config)
    common.check_int("written_latency_queries", _WRITTEN_LATENCY.value, 1)
  if config.embedder.path:
    common.check_weights("config.embedder.path", config.embedder.path, allowed=())
  if not _SPLIT.value.strip():
    raise app.UsageError("--split is empty")
  common.check_int("num_examples", _NUM_EXAMPLES.value, 0)
  common.check_int("max_slices", _MAX_SLICES.value, 1)
  common.check_int("latency_queries", _LATENCY_QUERIES.value, 1)
  budgets = []
  for b in _BUDGETS.value:
    try:
      k = int(b)
    except ValueError:
      k = 0
    if k < 2 or str(k) != b.strip():
      raise app.UsageError(f"--budgets={','.join(_BUDGETS.value)}: {b!r} is not an integer "
                           ">= 2 (K/2 items per search round)")
    budgets.append(k)
  if not budgets:
    raise app.UsageError("--budgets is empty")
  return tuple(budgets)


def main(argv):
  del argv
  budgets = check_flags(_CONFIG.value)
  grail_eval.run(_CONFIG.value, _TASK.value, _DATA.value, _WORKDIR.value, _GRAIL_DIR.value, _SPLIT.value,
                 _NUM_EXAMPLES.value, budgets, _MAX_SLICES.value, _LATENCY_QUERIES.value,
                 tuple(dict.fromkeys(_WRITTEN.value)), _WRITTEN_LATENCY.value)


def cli():
  """The `graphloom-evaluate-retrieval` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
