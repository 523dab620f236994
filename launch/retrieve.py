r"""Bounded subgraph retrieval over SceneKB instance graphs, scored against the gold triples.

  python -m launch.retrieve --config=configs/smollm2.py --split=validation \
      --config.retrieval.second_round=template [--distractor_instances=20] [--limit=100]

For each question: the instance graph (scene triples >= tau_edge, WordNet facts within 2 hops,
canonicalised) optionally mixed with the triples of other instances, a `BoundedRetriever`
(K seeds, d_max, N_max, the second round by decoder / template / none), then P@5, R@5 and MRR
of the gold supporting triples in the subgraph ranked by question score, |E_sub| and the share
of edges from round 2, per question family. Writes --output (JSON) when given.
"""

import collections
import random
import time

from absl import app, flags

from graphloom_jax import atomic
from graphloom_jax.data import scenekb
from graphloom_jax.evaluation import retrieval_metrics as rm
from graphloom_jax.graph.instance_graph import build_instance_graph, graph_triples
from graphloom_jax.retrieval import factory as retrieval_factory
from graphloom_jax.retrieval import subgraph as sg
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/smollm2.py", "config file")
_SPLIT = flags.DEFINE_enum("split", "validation", list(scenekb.SPLITS), "SceneKB split")
_NUM_EXAMPLES = flags.DEFINE_integer("num_examples", 0, "at most this many questions (0: all)")
flags.DEFINE_alias("limit", "num_examples")
_DISTRACTORS = flags.DEFINE_integer("distractor_instances", 0,
                                    "other instances whose triples join each pool")
_OUTPUT = flags.DEFINE_string("output", "", "write the figures here as JSON")


SECOND_ROUNDS = ("decoder", "template", "none")


def check_flags(config) -> sg.SubgraphConfig:
  """Every flag and the retrieval settings, before the embedder or a decoder is loaded."""
  common.check_int("num_examples", _NUM_EXAMPLES.value, 0)
  common.check_int("distractor_instances", _DISTRACTORS.value, 0)
  if _OUTPUT.value:
    common.check_output_file("output", _OUTPUT.value)
  if config.embedder.path:
    common.check_weights("config.embedder.path", config.embedder.path, allowed=())
  mode = config.retrieval.second_round
  if mode not in SECOND_ROUNDS:
    raise app.UsageError(f"--config.retrieval.second_round={mode}: expected one of "
                         f"{list(SECOND_ROUNDS)}")
  if mode == "decoder":
    common.model_section(config)
  try:
    return sg.SubgraphConfig.from_config(config.retrieval)
  except (TypeError, ValueError) as e:
    raise app.UsageError(f"--config.retrieval: {e}") from None


def main(argv):
  del argv
  config = _CONFIG.value
  cfg = check_flags(config)
  from graphloom_jax.models import load_embedder
  embedder = load_embedder(config.embedder.path or None)
  mode = config.retrieval.second_round
  decoder = None
  if mode == "decoder":
    from graphloom_jax.models import decoder as decoder_lib
    decoder = decoder_lib.from_config(config.model)
  writer = retrieval_factory.query_writer(config, decoder)
  data = scenekb.load(_SPLIT.value)
  questions = data.questions[:_NUM_EXAMPLES.value] if _NUM_EXAMPLES.value else data.questions
  instances = sorted(data.images)
  rng = random.Random(config.seed)
  pools = {}

  def pool_for(inst):
    if inst not in pools:
      others = [i for i in instances if i != inst]
      mixed = [inst] + rng.sample(others, min(_DISTRACTORS.value, len(others)))
      triples = [t for i in mixed for t in data.instance_facts(i, config.graph.kb_hops)]
      g = build_instance_graph(triples, tau_edge=config.graph.tau_edge)
      pools[inst] = sg.TriplePool(graph_triples(g), embedder=embedder)
    return pools[inst]

  per_family = collections.defaultdict(list)
  for q in questions:
    pool = pool_for(q.extra["instance_id"])
    retriever = retrieval_factory.bounded_retriever(config, pool, embedder, writer)
    t0 = time.perf_counter()
    sub = retriever.retrieve(q.question)
    latency = time.perf_counter() - t0
    gold = {tuple(g) for g in q.extra["gold_triples"]}
    ranked = [t.key() for t in sub.edges]
    per_family[q.metadata["family"]].append(dict(
        p5=rm.precision_at_k(ranked, gold, 5), r5=rm.recall_at_k(ranked, gold, 5),
        rr=rm.reciprocal_rank(ranked, gold), set_recall=rm.set_recall(ranked, gold),
        edges=len(sub.edges), round2=sum(r == 2 for r in sub.rounds) / max(len(sub.edges), 1),
        latency_ms=1000 * latency, pool=len(pool)))
  report = {}
  for family in sorted(per_family) + ["all"]:
    rows = [r for f in per_family for r in per_family[f]] if family == "all" \
        else per_family[family]
    report[family] = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    report[family]["n"] = len(rows)
  print(f"split={_SPLIT.value} second_round={mode} distractor_instances={_DISTRACTORS.value} "
        f"K={cfg.seeds} d_max={cfg.d_max} N_max={cfg.n_max}")
  print(f"{'family':10s} {'n':>4s} {'P@5':>6s} {'R@5':>6s} {'MRR':>6s} {'SetR':>6s} "
        f"{'|E|':>5s} {'rnd2':>5s} {'pool':>6s} {'ms':>7s}")
  for family, r in report.items():
    print(f"{family:10s} {r['n']:4d} {r['p5']:6.3f} {r['r5']:6.3f} {r['rr']:6.3f} "
          f"{r['set_recall']:6.3f} {r['edges']:5.1f} {r['round2']:5.2f} {r['pool']:6.0f} "
          f"{r['latency_ms']:7.1f}")
  if _OUTPUT.value:
    atomic.atomic_write_json(_OUTPUT.value, report, indent=1, sort_keys=True, allow_nan=True)


def cli():
  """The `graphloom-retrieve` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
