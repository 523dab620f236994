r"""Trains GRAIL's gap gate and modality adapters (InfoNCE), then fits the hybrid selector.

  python -m launch.train_grail --config=configs/grail.py --workdir=/tmp/grail_embedded
  python -m launch.train_grail --config=configs/grail.py --workdir=/tmp/grail_mmqa \
      --config.grail.data=mmqa --config.grail.mmqa_dir=/path/to/multimodalqa/dataset

Writes <workdir>/grail (the checkpoint `GrailRetriever.from_checkpoint` and
`launch.evaluate_retrieval --grail_dir` read), <workdir>/checkpoints (orbax training state;
a rerun resumes from it) and <workdir>/train_history.json.
"""

from absl import flags
from absl import logging

from graphloom_jax import provenance
from graphloom_jax.training import grail_train
from . import common

_CONFIG = common.DEFINE_config_file("config", "configs/grail.py", "GRAIL config file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and logs go.",
                               required=True)
flags.DEFINE_alias("output_dir", "workdir")


def main(argv):
  del argv
  g = _CONFIG.value.grail
  common.check_grail_data(g.data, g, f"--config.grail.data={g.data}")
  common.check_output_dir("workdir", _WORKDIR.value)
  if _CONFIG.value.embedder.path:
    common.check_weights("config.embedder.path", _CONFIG.value.embedder.path, allowed=())
  provenance.write(_WORKDIR.value, _CONFIG.value)
  _, _, history = grail_train.train_from_config(_CONFIG.value, _WORKDIR.value)
  for phase, h in history.items():
    if isinstance(h, dict) and "best_val_loss" in h:
      print(f"{phase}: validation InfoNCE {h['val_loss'][0]:.4f} -> {h['best_val_loss']:.4f} "
            f"(best step {h['best_step']})")
  logging.info("checkpoint in %s/grail", _WORKDIR.value)


def cli():
  """The `graphloom-train-grail` console script: `python -m` of this module."""
  common.run(main)


if __name__ == "__main__":
  cli()
