"""Writes tests/data/mmqa_dev_answers.json from the official MMQA dev file (run by hand; tests
never read the official files).

  python tests/data/extract_mmqa_dev_answers.py --mmqa_dir=/path/to/multimodalqa/dataset

The output holds only what the scorer tests need: for every dev question in file order its qid
and gold answer strings (`answers[i].answer`, as the official evaluation reads them, converted
with str()), one question per line: {"qid": [answer, ...], ...}.
"""

import argparse
import gzip
import json
import pathlib


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--mmqa_dir", required=True, help="folder with MMQA_dev.jsonl(.gz)")
  p.add_argument("--out", default=str(pathlib.Path(__file__).parent / "mmqa_dev_answers.json"))
  args = p.parse_args()
  folder = pathlib.Path(args.mmqa_dir)
  path = folder / "MMQA_dev.jsonl.gz"
  opener = gzip.open if path.exists() else open
  path = path if path.exists() else folder / "MMQA_dev.jsonl"
  with opener(path, "rt", encoding="utf-8") as f:
    records = [json.loads(line) for line in f if line.strip()]
  lines = [f"{json.dumps(r['qid'])}: {json.dumps([str(a['answer']) for a in r['answers']])}"
           for r in records]
  pathlib.Path(args.out).write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
  print(f"{len(records)} questions, {sum(len(r['answers']) for r in records)} answers -> "
        f"{args.out}")


if __name__ == "__main__":
  main()
