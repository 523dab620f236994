"""GraphLoom on PathQuestion / WorldCup2014 (graphloom_jax.data.pathqa): the embedded decoder and
embedder, open answers, entity names kept as the KB writes them. Choose the dataset and folder
on the command line:

  python -m launch.train --config=configs/pathquestion.py --workdir=DIR \\
      --config.train.data_config=PQ-3H --config.train.data_root=FOLDER
  (WorldCup2014: --config.train.data=wc2014 --config.train.data_config=WC-2H)
"""

from graphloom_jax.configs import smollm2


def get_config():
  c = smollm2.get_config()
  c.train.data = "pathquestion"
  c.train.data_config = "PQ-3H"
  c.train.split_protocol = "path"
  # Entity names are KB names, not common nouns: no singular forms ("Hard Times" stays).
  c.graph.singularize = False
  # A question (up to ~35 tokens) and a KB name fit in 96 tokens of the training prompt.
  c.train.seq_len = 96
  return c
