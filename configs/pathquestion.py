"""GraphLoom on PathQuestion / WorldCup2014 (graphloom_jax.data.pathqa): the embedded decoder and
embedder, open answers, entity names kept as the KB writes them. Choose the dataset and folder
on the command line:

  python -m launch.train --config=configs/pathquestion.py --workdir=DIR \\
      --config.train.data_config=PQ-3H --config.train.data_root=FOLDER
  (WorldCup2014: --config.train.data=wc2014 --config.train.data_config=WC-2H)
"""

from graphloom_jax import defaults


def get_config():
  return defaults.pathquestion_config()
