r"""Trains GraphLoom's heads (slot projection, fusion prefix, router) on SceneKB with the decoder
frozen, or a trained text baseline's adapter (--config.train.target=flat_rag_tuned |
no_retrieval_tuned: models.heads.TunedPrefix, the same data, L_gen, steps and early stopping on
S_ans).

  python -m launch.train --config=configs/tiny.py --workdir=/tmp/graphloom_tiny
  python -m launch.train --config=configs/smollm2.py --workdir=runs/smollm2 \
      --config.train.num_steps=300
  python -m launch.train --config=configs/smollm2.py --workdir=runs/frt \
      --config.train.target=flat_rag_tuned --config.train.seq_len=640

Rerunning with the same --workdir resumes from its latest checkpoint (same data order). The
workdir receives: checkpoints/ (latest), best/ (best S_val), metrics.jsonl (one JSON line per
logged step and per evaluation), tensorboard/ (event files), features/ (cached embeddings and
token ids), config.json, final.json and heads/ (the best heads for
`GraphLoom.from_config(config, heads=WORKDIR/heads)`, or an adapter for
`from_config(config, adapters={TARGET: WORKDIR/heads})`).
"""

import json
import pathlib

from absl import app, flags

from graphloom_jax import atomic, provenance
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import heads as heads_lib
from graphloom_jax.pipeline import save_heads
from graphloom_jax.training import data, trainer
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/tiny.py", "configuration")
_WORKDIR = flags.DEFINE_string("workdir", None, "output folder (resumes when it has checkpoints)")
flags.mark_flag_as_required("workdir")


def check_flags(config):
  """The workdir and the config's model and training numbers, before anything is loaded."""
  common.check_output_dir("workdir", _WORKDIR.value)
  common.model_section(config)
  t = config.train
  for name in ("num_steps", "batch_size", "grad_accum", "log_every", "eval_every",
               "checkpoint_every", "seq_len"):
    common.check_int(f"config.train.{name}", t[name], 1)
  for name in ("max_train_examples", "eval_examples"):
    common.check_int(f"config.train.{name}", t[name], 0)
  try:
    heads_lib.kind_of_target(t.target)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def main(argv):
  del argv
  config = _CONFIG.value
  check_flags(config)
  workdir = pathlib.Path(_WORKDIR.value)
  # Locked before anything is written there: a second launcher on the workdir stops at once.
  lock = trainer.WorkdirLock(workdir)
  try:
    atomic.atomic_write_text(workdir / "config.json", config.to_json_best_effort(indent=2))
    provenance.write(workdir, config)
    decoder = decoder_lib.from_config(config.model)
    train_arrays, val_arrays = data.load_training_data(config, decoder, workdir / "features")
  except BaseException:
    lock.release()
    raise
  t = trainer.Trainer(config, decoder.model, train_arrays, val_arrays, workdir,
                      workdir_lock=lock)
  try:
    result = t.train()
    # The best heads (else the latest) as a standalone checkpoint for GraphLoom.from_config.
    t.restore("best") or t.restore("latest")
    save_heads(t.heads(), workdir / "heads", config,
               {"step": t.step, "best_s_val": t.best,
                "decoder": provenance.portable_path(decoder.source),
                "target": config.train.target, "parameters": t.num_params})
  finally:
    t.close()
  atomic.atomic_write_json(workdir / "final.json", result, indent=2, allow_nan=True)
  print(json.dumps(result))


def cli():
  """The `graphloom-train` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
