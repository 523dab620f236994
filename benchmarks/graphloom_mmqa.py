"""GraphLoom vs Flat-RAG vs no retrieval on MMQA dev, all three through `GraphLoom.answer_batch`,
scored with the official MultimodalQA EM / F1 (graphloom_jax.evaluation.answers).

  python -m benchmarks.graphloom_mmqa --mmqa_dir=FOLDER --num_examples=60
  python -m benchmarks.graphloom_mmqa --mmqa_dir=FOLDER --config=configs/tiny.py --heads=random

FOLDER holds the official files: MMQA_dev.jsonl(.gz) and whichever of MMQA_images, MMQA_texts
and MMQA_tables (.jsonl or .jsonl.gz) are available. The default model is
`GraphLoom.from_pretrained("embedded")` (SmolLM2-135M-Instruct, MiniLM, the shipped heads);
with --config the decoder is the config's and --heads a folder or "random".

Instance graph of a question (one per question: MMQA's candidate documents are per question),
from the documents of the folder the question lists (`data.mmqa.question_triples`):
  images   "image k depicts TITLE" for the k-th candidate image: its Wikipedia title from
           MMQA_images (the pixels are not part of the release files)
  texts    "TITLE says SENTENCE" for the first `--text_sentences` sentences of each candidate
           text (MMQA_texts, when present)
  tables   "ROW KEY COLUMN CELL" for every cell of the first `--table_rows` rows (the row key is
           the key column's cell, else the first cell), and "TITLE has table NAME" (MMQA_tables,
           when present)
Nothing from the answers (no text_instances, table indices, intermediate answers or answer
entities) enters a graph. Retrieval is the pipeline's bounded retrieval (K seeds, 2 hops, d_max,
N_max, the configured second round) and corrective retrieval over that graph. Questions whose
candidate documents are all absent from the folder have no graph; they are left out of the
sample (and counted).

The sample: `--num_examples` dev questions in the order of the SHA-1 of their qid (a fixed
pseudo-random sample of the whole split). Answers are scored as one span each (the official
scorer aligns it with the best gold span of list questions). Per mode: EM, F1, the share of
answers the verifier supports, and EM / F1 per question family; results go to --output as the
batches finish.
"""


from absl import app, flags
from ml_collections import config_flags

from graphloom_jax.evaluation import mmqa_rows
from graphloom_jax.pipeline import MODES


def _define_flags():
  """The command line's flags, defined only when this file runs as a script: importing it
  (tests do) defines none, so it never collides with other modules' flags."""
  global _CONFIG, _MMQA_DIR, _NUM, _HEADS, _MODES, _BATCH, _SENTENCES, _ROWS, _OUT
  _CONFIG = config_flags.DEFINE_config_file("config", None, "configuration (default: the shipped "
                                            "model, GraphLoom.from_pretrained('embedded'))")
  _MMQA_DIR = flags.DEFINE_string("mmqa_dir", None, "folder with the official MMQA files "
                                  "(MMQA_dev.jsonl(.gz), MMQA_images, and MMQA_texts / "
                                  "MMQA_tables when available)")
  _NUM = flags.DEFINE_integer("num_examples", 60, "dev questions (a fixed pseudo-random sample)")
  flags.DEFINE_alias("num_questions", "num_examples")
  _HEADS = flags.DEFINE_string("heads", None, "with --config: a heads folder or 'random'")
  _MODES = flags.DEFINE_list("modes", list(MODES), "conditions to run")
  _BATCH = flags.DEFINE_integer("batch_size", 8, "questions answered together")
  _SENTENCES = flags.DEFINE_integer("text_sentences", 8, "sentences per text document")
  _ROWS = flags.DEFINE_integer("table_rows", 30, "rows per table")
  _OUT = flags.DEFINE_string("output", "runs/graphloom_mmqa/benchmark.json", "results (JSON)")
  flags.DEFINE_alias("out", "output")


def main(argv):
  del argv
  config = _CONFIG.value
  if config is None and _HEADS.value:
    raise app.UsageError("--heads needs --config (the default model has its shipped heads)")
  try:
    result = mmqa_rows.run(_MMQA_DIR.value, _NUM.value, config=config, heads=_HEADS.value,
                 modes=_MODES.value, batch_size=_BATCH.value, text_sentences=_SENTENCES.value,
                 table_rows=_ROWS.value, out=_OUT.value)
  except (ValueError, FileNotFoundError) as e:
    raise app.UsageError(str(e)) from None
  print(f"\nMMQA dev, {result['num_questions']} questions, {result['model']}")
  print(f"{'mode':13s} {'EM':>6s} {'F1':>6s} {'supported':>9s}")
  for mode, r in result["modes"].items():
    print(f"{mode:13s} {r['em']:6.1f} {r['f1']:6.1f} {r['supported_share']:8.1f}%")
  print(f"load average {result['load_average']}; wrote {_OUT.value}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
