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

import pathlib

from absl import app
from absl import flags
import numpy as np

from graphloom_jax import atomic, provenance
from graphloom_jax.evaluation import grail_tasks
from graphloom_jax.retrieval import grail
from graphloom_jax.data import grail_sets
from graphloom_jax.retrieval import grail_data
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/grail.py", "GRAIL config file.")
_TASK = flags.DEFINE_enum("task", None, ["evidence_completion", "sequential_pool"], "Which task.",
                          required=True)
_DATA = flags.DEFINE_enum("data", "embedded", ["embedded", "mmqa"], "Which data set.")
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

ROW_LABELS = {"query": "Query-only", "additive": "Additive", "grail": "GRAIL", "hybrid": "Hybrid",
              "grail_untrained_gate": "GRAIL (untrained gate)"}


def make_retrievers(params, cfg, es, emb, seed: int = 0) -> dict:
  import jax

  trained = grail.GrailRetriever(params, cfg, emb.pool, es.pool.modality)
  untrained_gate = {**params, "gate": grail.init_params(jax.random.key(seed), cfg)["gate"]}
  untrained_gate.pop("selector", None)
  rows = {m: (trained, m) for m in grail.METHODS if m != "hybrid" or "selector" in params}
  rows["grail_untrained_gate"] = (grail.GrailRetriever(untrained_gate, cfg, emb.pool,
                                                       es.pool.modality), "grail")
  return rows


def _fmt(x, scale=100.0, width=7):
  return f"{'-':>{width}}" if x is None else f"{scale * x:{width}.2f}"


def completion_table(result) -> str:
  fams = sorted({f for m in result["methods"].values() for f in m["R@1"]["per_family"]})
  head = f"{'method':24s}" + "".join(f"{'R@' + str(k):>8s}" for k in grail_tasks.KS) + \
      "".join(f"{f[:9] + ' R@5':>14s}" for f in fams) + f"{'ms/query':>10s}{'steer ms':>10s}"
  lines = ["Evidence Set Completion: recall (%) macro-averaged over "
           f"{'/'.join(grail_data.MULTI_HOP_FAMILIES)}; per-family R@5; latency per query", head]
  for name, m in result["methods"].items():
    lat = result.get("latency", {}).get(name, {})
    lines.append(f"{ROW_LABELS.get(name, name):24s}"
                 + "".join(f" {_fmt(m[f'R@{k}']['macro'])}" for k in grail_tasks.KS)
                 + "".join(f"{_fmt(m['R@5']['per_family'].get(f), width=14)}" for f in fams)
                 + f"{lat.get('query_ms_median', float('nan')):10.3f}"
                 + f"{lat.get('steer_ms_median', float('nan')):10.3f}")
  lines.append(f"questions per family: {next(iter(result['methods'].values()))['questions_per_family']}"
               f"; {result['instances']} leave-one-out instances")
  return "\n".join(lines)


def pool_table(result) -> str:
  lines = ["Sequential Pool Construction: Set-Recall (%) vs slices S; Rank Jump = mean "
           "plain-search rank of gold items surfaced beyond the single-shot top-K (count)"]
  for k in result["budgets"]:
    lines.append(f"K = {k}")
    lines.append(f"{'method':24s}" + "".join(f"{'S=' + str(s):>8s}" for s in result["slices"])
                 + f"{'rank jump (S=max)':>22s}")
    for name, m in result["methods"].items():
      c = m["budgets"][str(k)]
      jump = c["rank_jump_mean_rank"][-1]
      lines.append(f"{ROW_LABELS.get(name, name):24s}"
                   + "".join(f" {_fmt(v)}" for v in c["set_recall"])
                   + f"{('-' if jump is None else f'{jump:.1f}'):>15s} ({c['rank_jump_items'][-1]})")
  for name, per_k in result["noise_resilience_margin"].items():
    for k, v in per_k.items():
      margins = " ".join("-" if x is None else f"{100 * x:+.2f}" for x in v["margin"])
      lines.append(f"Noise-Resilience Margin ({name}), K={k}, S=1..: {margins} "
                   f"(questions with no gold in slice 1: {v['questions']})")
  return "\n".join(lines)


def plot_completion(result, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(7, 4))
  names = list(result["methods"])
  width = 0.8 / len(names)
  for i, name in enumerate(names):
    vals = [100 * (result["methods"][name][f"R@{k}"]["macro"] or 0) for k in grail_tasks.KS]
    ax.bar(np.arange(len(grail_tasks.KS)) + i * width, vals, width, label=ROW_LABELS[name])
  ax.set_xticks(np.arange(len(grail_tasks.KS)) + 0.4 - width / 2,
                [f"R@{k}" for k in grail_tasks.KS])
  ax.set_ylabel("recall (%), macro over Compare/Compose/Intersect")
  ax.set_title(f"Evidence Set Completion ({result['data']})")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_pool(result, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  budgets = result["budgets"]
  fig, axes = plt.subplots(1, len(budgets), figsize=(5 * len(budgets), 4), squeeze=False)
  for ax, k in zip(axes[0], budgets):
    for name, m in result["methods"].items():
      ax.plot(result["slices"], [100 * v for v in m["budgets"][str(k)]["set_recall"]], marker="o",
              label=ROW_LABELS[name])
    ax.set_xlabel("number of retrieval slices S")
    ax.set_ylabel("Set-Recall (%)")
    ax.set_title(f"K = {k} ({result['data']})")
    ax.set_xticks(result["slices"])
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def run(config, task, data, output_dir, grail_dir="", split="test", max_questions=0,
        budgets=(10, 20), max_slices=5, latency_queries=100, log=print) -> dict:
  """Runs one task and writes its JSON and PNG; returns the result dict."""
  from graphloom_jax.models import load_embedder

  out = pathlib.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  provenance.write(out, config, task=task, data=data)
  g = config.grail
  es = grail_sets.load_evidence_set(data, mmqa_dir=g.mmqa_dir, embedded_dir=g.embedded_dir,
                                    per_split=g.per_split)
  cache_dir = g.cache_dir or str(out / "embeddings")
  emb = es.embed(load_embedder(config.embedder.path or None), cache_dir)
  if grail_dir:
    params, cfg = grail.load(grail_dir)
    train_history = None
  else:
    from graphloom_jax.training import grail_train
    config = config.copy_and_resolve_references()
    config.grail.data = data
    config.grail.cache_dir = cache_dir  # the training run reuses these embeddings
    params, cfg, train_history = grail_train.train_from_config(config, out / "grail_train", log)
  retrievers = make_retrievers(params, cfg, es, emb, g.train.seed)
  questions = es.select([split])
  if max_questions:
    questions = questions[:max_questions]
  if not questions:
    raise ValueError(f"{es.name}: no questions in split {split!r}")
  max_evidence = g.train.max_evidence
  if task == "evidence_completion":
    result = grail_tasks.evidence_completion(retrievers, es, emb, questions, max_evidence)
    inst = grail_data.completion_instances(es, questions, max_evidence)
    result["latency"] = grail_tasks.measure_latency(retrievers, emb, inst.question.tolist(),
                                                    inst.context, k=20, repeats=latency_queries)
  else:
    result = grail_tasks.sequential_pool(retrievers, es, emb, questions, budgets, max_slices)
    with_gold = [qi for qi in questions if es.questions[qi].gold]
    base = retrievers["query"][0]
    q = base.encode_queries(emb.questions[with_gold[:latency_queries]])
    k = max(budgets)
    ctx, _ = base.search(q, np.full((len(q), 0), -1, np.int32), "query", k // 2,
                         exclude_context=False)
    result["latency"] = grail_tasks.measure_latency(retrievers, emb, with_gold[:latency_queries],
                                                    ctx, k=k - k // 2, repeats=latency_queries)
  result.update(task=task, data=data, split=split, pool_size=len(es.pool),
                notes=es.notes, grail_config=dict(tau=cfg.tau, gate=cfg.gate),
                grail_dir=str(grail_dir or out / "grail_train" / "grail"),
                train_history=train_history)
  table = completion_table(result) if task == "evidence_completion" else pool_table(result)
  log(table)
  for note in es.notes:
    log(f"note: {note}")
  atomic.atomic_write_json(out / f"{task}_{data}.json", result, indent=1, allow_nan=True)
  atomic.atomic_write_text(out / f"{task}_{data}.txt", table + "\n")
  (plot_completion if task == "evidence_completion" else plot_pool)(
      result, out / f"{task}_{data}.png")
  return result


def check_flags(config) -> tuple[int, ...]:
  """Every flag before any data or model is loaded; returns the budgets as ints."""
  common.check_mmqa(_DATA.value, config.grail.mmqa_dir, "--data=mmqa")
  common.check_output_dir("workdir", _WORKDIR.value)
  if _GRAIL_DIR.value:
    common.check_input_dir("grail_dir", _GRAIL_DIR.value)
  if config.grail.embedded_dir:
    common.check_input_dir("config.grail.embedded_dir", config.grail.embedded_dir)
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
  run(_CONFIG.value, _TASK.value, _DATA.value, _WORKDIR.value, _GRAIL_DIR.value, _SPLIT.value,
      _NUM_EXAMPLES.value, budgets, _MAX_SLICES.value,
      _LATENCY_QUERIES.value)


def cli():
  """The `graphloom-evaluate-retrieval` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
