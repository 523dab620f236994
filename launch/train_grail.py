"""Trains GRAIL's gap gate and modality adapters (InfoNCE), then fits the hybrid selector.

  python -m launch.train_grail --config=configs/grail.py --output_dir=/tmp/grail_embedded
  python -m launch.train_grail --config=configs/grail.py --output_dir=/tmp/grail_mmqa \
      --config.grail.data=mmqa --config.grail.mmqa_dir=/path/to/multimodalqa/dataset

Writes <output_dir>/grail (the checkpoint `GrailRetriever.from_checkpoint` and
`launch.evaluate_retrieval --grail_dir` read), <output_dir>/checkpoints (orbax training state;
a rerun resumes from it) and <output_dir>/train_history.json.
"""

import pathlib

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from graphloom_jax.training import grail_train

_CONFIG = config_flags.DEFINE_config_file("config", "configs/grail.py", "GRAIL config file.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where checkpoints and logs go.",
                                  required=True)


def main(argv):
  del argv
  g = _CONFIG.value.grail
  if g.data == "mmqa" and not g.mmqa_dir:  # the project ships no MMQA folder
    raise app.UsageError(
        "--config.grail.data=mmqa needs --config.grail.mmqa_dir=FOLDER, the folder with the "
        "official MMQA_dev.jsonl(.gz) and MMQA_images.jsonl(.gz) (allenai/multimodalqa, dataset/)")
  if g.data == "mmqa" and not pathlib.Path(g.mmqa_dir).is_dir():
    raise app.UsageError(f"--config.grail.mmqa_dir={g.mmqa_dir}: no such folder")
  logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
  _, _, history = grail_train.train_from_config(_CONFIG.value, _OUTPUT_DIR.value)
  for phase, h in history.items():
    if isinstance(h, dict) and "best_val_loss" in h:
      print(f"{phase}: validation InfoNCE {h['val_loss'][0]:.4f} -> {h['best_val_loss']:.4f} "
            f"(best step {h['best_step']})")
  print(f"checkpoint in {_OUTPUT_DIR.value}/grail")


if __name__ == "__main__":
  app.run(main)
