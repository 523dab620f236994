"""GRAIL training and evaluation: gate + adapters by InfoNCE, then the hybrid selector.

  python -m launch.train_grail --config=configs/grail.py --workdir=/tmp/grail \
      --config.grail.data=mmqa --config.grail.mmqa_dir=/path/to/multimodalqa/dataset
"""

import ml_collections

from graphloom_jax.configs import base


def get_config():
  c = base.get_base_config()
  g = c.grail
  g.data = "embedded"  # "embedded" (the embedded benchmark), "mmqa" (needs mmqa_dir),
  # or "pathquestion" / "wc2014" (need pathqa_dir and pathqa_configs)
  # data=mmqa: the folder with the official MMQA_dev.jsonl(.gz) and MMQA_images.jsonl(.gz)
  # (allenai/multimodalqa, dataset/); no default, the launchers refuse mmqa without it.
  g.mmqa_dir = ""
  g.embedded_dir = ""  # "" = the benchmark shipped in graphloom_jax/data/resources
  # data=pathquestion / wc2014: the release folder and the datasets whose answer paths are the
  # evidence sets (comma-separated, e.g. "PQ-2H,PQ-3H,PQL-2H,PQL-3H" or "WC-2H").
  g.pathqa_dir = ""
  g.pathqa_configs = ""
  g.per_split = 0  # > 0: only the first per_split questions of each split (quick runs)
  g.cache_dir = ""  # embedding cache ("" = <workdir>/embeddings)
  g.train = ml_collections.ConfigDict(dict(
      align_steps=300,  # phase 1: modality adapters, alignment InfoNCE
      align_learning_rate=1e-3,
      gate_steps=300,  # phase 2: gap gate, steering InfoNCE
      gate_learning_rate=1e-2,
      gate_adapters=False,  # True: fine-tune the adapters in phase 2 as well
      batch_size=64,
      warmup_steps=20,
      weight_decay=1e-4,
      clip_norm=1.0,
      temperature=0.05,  # InfoNCE temperature over cosine logits
      align_weight=0.5,  # alignment term in phase 2 when gate_adapters
      eval_every=25,
      max_evidence=8,  # E: context slots per training instance
      num_negatives=16,  # H: hard negatives per instance
      seed=0,
  ))
  return c
