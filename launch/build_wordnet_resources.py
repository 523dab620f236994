r"""Generates the WordNet-derived files the product needs at run time, from WordNet 3.0's
database files (Debian: `apt-get install -y --no-install-recommends wordnet-base`). Run once;
the output is committed, so users need no apt.

  python -m launch.build_wordnet_resources \
      --wordnet_dir=/usr/share/wordnet --vocab=graphloom_jax/data/resources/vg150/vocab.json

Writes the files `graphloom_jax.graph.wordnet_excerpt` lists (LICENSE, noun.exc,
noun_lemmas.txt.gz, data.noun, index.noun, sense_counts.tsv) under --workdir
(graphloom_jax/data/resources/wordnet/), and unmodified real lines for a few lemmas under
--tests_out (tests/data/wordnet/) for the loader tests.
"""


from absl import flags

from graphloom_jax.graph import wordnet_excerpt
from . import common

FLAGS = flags.FLAGS
# Defaults inside the project (not the working directory), so the tool runs from anywhere.
_ROOT = common.PROJECT_ROOT


def _define_flags():
  """The flags, defined when this runs as a program only (importing the module defines
  none, so it never collides with another module's flags)."""
  flags.DEFINE_string("wordnet_dir", "/usr/share/wordnet", "folder with WordNet 3.0 wndb files")
  flags.DEFINE_string("vocab", str(_ROOT / "graphloom_jax/data/resources/vg150/vocab.json"),
                      "VG150 vocabulary")
  flags.DEFINE_string("workdir", str(_ROOT / "graphloom_jax/data/resources/wordnet"),
                      "output folder")
  flags.DEFINE_alias("out", "workdir")
  flags.DEFINE_string("tests_out", str(_ROOT / "tests/data/wordnet"),
                      "output folder for the test excerpt")
  flags.DEFINE_string("license", "/usr/share/doc/wordnet-base/copyright",
                      "file holding WordNet's licence text")


def main(argv):
  del argv
  common.check_input_dir("wordnet_dir", FLAGS.wordnet_dir)
  common.check_input_file("vocab", FLAGS.vocab)
  common.check_input_file("license", FLAGS.license)
  common.check_output_dir("workdir", FLAGS.workdir)
  common.check_output_dir("tests_out", FLAGS.tests_out)
  print(wordnet_excerpt.build(FLAGS.wordnet_dir, FLAGS.vocab, FLAGS.workdir, FLAGS.tests_out,
                              FLAGS.license))


def cli():
  """The `graphloom-build-wordnet-resources` console script: `python -m` of this module."""
  _define_flags()
  common.run(main)


if __name__ == "__main__":
  cli()
