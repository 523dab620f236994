r"""Builds the instance graphs and triple embeddings of a corpus with Apache Beam, then one
retrieval index over all of their triples.

  python -m launch.build_graphs --dataset=scenekb --split=train --workdir=DIR
  python -m launch.build_graphs --dataset=mmqa --root=MMQA_DIR --split=dev --workdir=DIR
  # any other Beam runner: name it, and pass its pipeline options along unchanged, e.g.
  python -m launch.build_graphs ... --workdir=gs://BUCKET/graphs --index_dir=/tmp/index \
      --runner=DataflowRunner --project=P --region=R --temp_location=gs://BUCKET/tmp \
      --setup_file=./setup.py
  python -m launch.build_graphs ... --runner=FlinkRunner --flink_master=HOST:8081
  python -m launch.build_graphs ... --runner=SparkRunner --spark_master_url=spark://HOST:7077

`graphloom_jax.data.beam_graphs` describes the pipeline and its output (graphs-*.jsonl and
embeddings-*.npy shards plus manifest.json). Every argument this launcher does not define is a
Beam pipeline option. After the pipeline the index (--index: scann, exact or none; ScaNN with
`retrieval.index.scann_defaults`) is built here from the output and saved to --index_dir
(default WORKDIR/index; required when WORKDIR is not a local folder); its ids are the output's
rows in `beam_graphs.corpus_rows` order. The embedder is config.embedder.path (empty: the embedded
all-MiniLM-L6-v2), or --embedder_factory=module:callable (made once per worker).
"""

import functools
import importlib
import json
import time

from absl import app, flags, logging

from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/smollm2.py", "configuration "
                                    "(graph.* and embedder.path are read)")
flags.DEFINE_enum("dataset", "scenekb", ["scenekb", "mmqa"], "the corpus")
flags.DEFINE_string("split", "train", "the split whose questions name the corpus's instances "
                    "(SceneKB) or documents (MMQA)")
flags.DEFINE_string("root", None, "the dataset folder (SceneKB: default the embedded copy; "
                    "MMQA: required, the official jsonl files)")
flags.DEFINE_string("workdir", None, "output folder (any Beam filesystem path)")
flags.DEFINE_alias("out", "workdir")
flags.DEFINE_string("runner", "DirectRunner", "Beam runner: DirectRunner, DataflowRunner, "
                    "FlinkRunner, SparkRunner, PortableRunner, ...")
flags.DEFINE_integer("num_shards", 8, "output shards")
flags.DEFINE_integer("batch_size", 256, "at most this many texts per embedding call")
flags.DEFINE_string("embedder_factory", "", "module:callable making the embedder (overrides "
                    "config.embedder.path); e.g. tests.fakes:HashEmbed")
flags.DEFINE_enum("index", "scann", ["scann", "exact", "none"], "index built from the output")
flags.DEFINE_string("index_dir", None, "where the index is saved (default WORKDIR/index)")


def _factory(spec: str):
  module, _, name = spec.partition(":")
  if not module or not name:
    raise app.UsageError(f"--embedder_factory={spec!r}: expected module:callable")
  return getattr(importlib.import_module(module), name)


def main(argv):
  f = flags.FLAGS
  from graphloom_jax.data import beam_graphs
  from graphloom_jax.models import load_embedder

  if not f.workdir:
    raise app.UsageError("--workdir is required")
  if f.dataset == "mmqa" and not f.root:
    raise app.UsageError("--dataset=mmqa needs --root, the folder of the official MMQA jsonl "
                         "files (MMQA_<split>.jsonl[.gz], MMQA_tables / MMQA_images)")
  config = _CONFIG.value
  if f.embedder_factory:
    make_embedder, embedder_id = _factory(f.embedder_factory), f.embedder_factory
  else:
    path = config.embedder.path or None
    make_embedder = functools.partial(load_embedder, path)
    embedder_id = path or "embedded all-MiniLM-L6-v2"
  local_out = "://" not in f.workdir
  index_dir = f.index_dir or (f"{f.workdir.rstrip('/')}/index" if local_out else None)
  if f.index != "none" and index_dir is None:
    raise app.UsageError(f"--workdir={f.workdir} is not a local folder: name a local "
                         "--index_dir for the index (or --index=none)")

  corpus = beam_graphs.Corpus(f.dataset, f.split, f.root)
  pipeline_args = [f"--runner={f.runner}", *argv[1:]]
  logging.info("Beam pipeline options: %s", pipeline_args)
  t = time.perf_counter()
  manifest = beam_graphs.run(corpus, config, f.workdir, make_embedder, pipeline_args,
                             num_shards=f.num_shards, max_batch_size=f.batch_size,
                             min_batch_size=min(16, f.batch_size), embedder_id=embedder_id)
  pipeline_s = time.perf_counter() - t
  summary = {k: manifest[k] for k in ("dataset", "split", "instances", "rows", "dim",
                                      "num_shards")}
  summary["pipeline_s"] = round(pipeline_s, 2)
  if f.index != "none":
    t = time.perf_counter()
    index = beam_graphs.build_index(f.workdir, f.index)
    index.save(index_dir)
    summary.update(index=f.index, index_dir=index_dir, index_s=round(time.perf_counter() - t, 2))
    if f.index == "scann":
      summary["scann_options"] = index.options
  print(json.dumps(summary, sort_keys=True))


def cli():
  """The `graphloom-build-graphs` console script: `python -m` of this module."""
  common.run(main, pass_extra_args=True)  # the flags it does not define go to Beam


if __name__ == "__main__":
  cli()
