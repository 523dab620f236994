r"""Evaluates GraphLoom or a baseline on a dataset, sharded over processes and resumable.

  python -m launch.evaluate --config=configs/tiny.py --heads=random --dataset=scenekb \
      --split=validation --num_examples=16 --workdir=/tmp/eval
  python -m launch.evaluate --dataset=scienceqa --manual_dir=DIR --mode=no_retrieval \
      --workdir=/tmp/sqa                               # okvqa and mmqa likewise
  python -m launch.evaluate --config=configs/pathquestion.py --heads=WORKDIR/heads \
      --dataset=pathquestion --data_config=PQL-3H --manual_dir=DIR --workdir=/tmp/pq
  # two hosts (or two processes on one), the workdir shared between them:
  python -m launch.evaluate ... --coordinator_address=host0:1234 --num_processes=2 --process_id=0
  python -m launch.evaluate ... --coordinator_address=host0:1234 --num_processes=2 --process_id=1

Every process answers its shards (batches of --batch_size consecutive examples; shard k is
process k % num_processes's) and writes each to workdir/shards/ as it finishes; rerunning the
same command skips the shards that are there. Process 0 then writes predictions.jsonl,
timings.jsonl and metrics.json (graphloom_jax.evaluation.sharded describes them). Without
--coordinator_address, --num_processes/--process_id still split the work between independent
jobs that share workdir.

Devices: within a process the pipeline runs on the mesh config.mesh selects (graphloom_jax.
graphloom_jax/sharding.py): --config.mesh.data=0 splits every batch over all local devices
(data-parallel), --config.mesh.model=M splits the decoder's parameters over M of them
(model-parallel, Megatron; configs/llama3_8b.py puts every local device on "model"); the
default 1 x 1 is one device. The mesh is printed and recorded in runs/p<i>.json.

--heads=random initialises untrained heads (seeded by config.seed): a smoke-test setting for
configs without trained heads, such as configs/tiny.py; the default heads are trained for
SmolLM2 (configs/smollm2.py).
"""

import json
import pathlib

from absl import app, flags, logging

from graphloom_jax import distributed, provenance
from graphloom_jax.data import registry
from graphloom_jax.evaluation import sharded
from graphloom_jax import sharding
from graphloom_jax.pipeline import MODES
from graphloom_jax.pipeline.graphloom import HEADS_DIR
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/smollm2.py", "configuration")
flags.DEFINE_enum("dataset", "scenekb", registry.DATASETS, "what to evaluate on (an entry of "
                  "graphloom_jax.data.registry)")
flags.DEFINE_string("split", None, "the split (default: the dataset's, " + ", ".join(
    f"{k} {e.default_split}" for k, e in registry.REGISTRY.items()) + ")")
flags.DEFINE_integer("num_examples", 0, "the first N examples of the split (0: all)")
flags.DEFINE_integer("batch_size", 8, "examples per shard, answered as one batch (its rows "
                     "are padded to a multiple of the mesh's data axis)")
flags.DEFINE_string("workdir", None, "where shards, predictions and metrics go (shared by "
                    "all processes)")
flags.DEFINE_alias("output_dir", "workdir")
flags.DEFINE_enum("mode", "graphloom", MODES, "how the evidence reaches the decoder")
flags.DEFINE_string("heads", str(HEADS_DIR / "smollm2"), "trained heads (launch.train's "
                    f"WORKDIR/heads), or {sharded.RANDOM_HEADS!r} for a smoke test; mode "
                    "graphloom only")
flags.DEFINE_string("manual_dir", None, "the folder of the dataset's files: the official files "
                    "of scienceqa / okvqa / mmqa, the release of pathquestion / wc2014, a "
                    "build_benchmark --out folder for scenekb (default: the embedded copy)")
flags.DEFINE_string("data_config", None, "the variant of pathquestion (PQ-2H, PQ-3H, PQL-2H, "
                    "PQL-3H) or wc2014 (WC-1H, WC-2H, WC-M, WC-C)")
flags.DEFINE_enum("split_protocol", "path", ("path", "line"), "pathquestion / wc2014: split "
                  "by answer path (the headline protocol) or by line (the published one)")
flags.DEFINE_string("data_dir", None, "where their TFDS files are prepared (default "
                    "WORKDIR/tfds)")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (jax.distributed)")
flags.DEFINE_integer("num_processes", 1, "processes sharing the evaluation")
flags.DEFINE_integer("process_id", 0, "this process, in [0, num_processes)")
flags.DEFINE_list("local_device_ids", None, "with --coordinator_address: the devices this "
                  "process uses (one process per accelerator)")
flags.DEFINE_float("wait_timeout_s", 3600.0, "how long a process waits for the others' files")
flags.DEFINE_bool("progress", True, "show a progress bar")
flags.mark_flag_as_required("workdir")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  config = _CONFIG.value
  common.check_output_dir("workdir", FLAGS.workdir)
  common.set_log_process(FLAGS.process_id, FLAGS.num_processes)  # before jax.distributed logs
  ids = [int(i) for i in FLAGS.local_device_ids] if FLAGS.local_device_ids else None
  procs = distributed.init_processes(FLAGS.coordinator_address, FLAGS.num_processes,
                                 FLAGS.process_id, ids)
  common.set_log_process(procs.index, procs.count)
  out = pathlib.Path(FLAGS.workdir)
  if procs.index != 0:
    sharded.wait_for_plan(out, FLAGS.wait_timeout_s)
  try:
    mesh = sharding.mesh_from_config(config)
    devices = distributed.local_devices(mesh)
    registry.entry(FLAGS.dataset).check_config(config)
    dataset = registry.open_dataset(FLAGS.dataset, FLAGS.split, registry.Location(
        root=FLAGS.manual_dir, data_dir=FLAGS.data_dir or out / "tfds",
        config=FLAGS.data_config, protocol=FLAGS.split_protocol))
    sharded.check_mode(dataset, FLAGS.mode)
    plan = sharded.make_plan(dataset, num_examples=FLAGS.num_examples,
                             batch_size=FLAGS.batch_size, mode=FLAGS.mode, heads=FLAGS.heads,
                             config=config)
    evaluation = sharded.Evaluation(out, plan)
    evaluation.publish_plan(writer=procs.index == 0)
  except (ValueError, FileNotFoundError) as e:
    raise app.UsageError(str(e)) from None
  system = None
  if evaluation.missing(plan.owned(procs.index, procs.count)):
    system = sharded.build_system(config, FLAGS.heads, FLAGS.mode, dataset.kb_sources, mesh)
  report = evaluation.run(
      lambda examples, first: sharded.answer_shard(system, dataset, examples, FLAGS.mode, first),
      dataset, procs.index, procs.count, progress=FLAGS.progress, devices=devices)
  logging.info("mesh %s of %d local %s device(s): computed shards %s, reused %s",
               devices["mesh"], devices["local"], devices["backend"], report["computed"],
               report["reused"])
  distributed.sync(procs, "launch.evaluate: shards written")
  if procs.index == 0:
    evaluation.wait_for_shards(FLAGS.wait_timeout_s)
    metrics = evaluation.gather()
    print(json.dumps({k: v for k, v in metrics.items() if not isinstance(v, dict)}, indent=1))
    provenance.write(out, config)
    logging.info("wrote %s and %s", out / sharded.PREDICTIONS, out / sharded.METRICS)
  if procs.distributed:
    import jax
    jax.distributed.shutdown()


def cli():
  """The `graphloom-evaluate` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
