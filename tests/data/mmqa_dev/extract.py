"""Rebuilds this fixture from the official MMQA files (run by hand; tests never read them).

  python tests/data/mmqa_dev/extract.py --mmqa_dir=/path/to/multimodalqa/dataset

Keeps, verbatim and in file order, the first 3 questions of each family of MMQA_dev.jsonl.gz
plus the one question whose gold document is not among its candidates, and the records of
MMQA_images.jsonl.gz for every image those questions list or cite. Prints the counts that
tests/test_mmqa.py expects, computed from the raw JSON (not through graphloom_jax).
"""

import argparse
import collections
import gzip
import json
import pathlib

PER_FAMILY = 3


def family(r):
  return r["metadata"]["type"].split("(", 1)[0]


def candidates(r):
  m = r["metadata"]
  return set(m.get("image_doc_ids", []) + m.get("text_doc_ids", []) +
             ([m["table_id"]] if m.get("table_id") else []))


def write_gz(path, lines):
  """gzip with mtime 0 and no file name, so that a rerun gives the same bytes."""
  with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                               mtime=0) as f:
    f.write("".join(line + "\n" for line in lines).encode("utf-8"))


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--mmqa_dir", required=True, help="folder with MMQA_dev/images.jsonl.gz")
  p.add_argument("--out", default=str(pathlib.Path(__file__).parent))
  a = p.parse_args()
  src, out = pathlib.Path(a.mmqa_dir), pathlib.Path(a.out)
  with gzip.open(src / "MMQA_dev.jsonl.gz", "rt", encoding="utf-8") as f:
    lines = f.read().splitlines()
  seen, keep = collections.Counter(), []
  for line in lines:
    r = json.loads(line)
    outside = {c["doc_id"] for c in r["supporting_context"]} - candidates(r)
    if seen[family(r)] < PER_FAMILY or outside:
      seen[family(r)] += 1
      keep.append((line, r))
  images = set()
  for _, r in keep:
    images.update(r["metadata"].get("image_doc_ids", []))
    images.update(c["doc_id"] for c in r["supporting_context"] if c["doc_part"] == "image")
  with gzip.open(src / "MMQA_images.jsonl.gz", "rt", encoding="utf-8") as f:
    img_lines = [line for line in f.read().splitlines() if json.loads(line)["id"] in images]
  write_gz(out / "MMQA_dev.jsonl.gz", [line for line, _ in keep])
  write_gz(out / "MMQA_images.jsonl.gz", img_lines)
  rs = [r for _, r in keep]
  print("questions", len(rs), dict(collections.Counter(family(r) for r in rs)))
  print("images", len(img_lines), "of", len(images), "listed")
  print("duplicate supporting docs", sum(len(r["supporting_context"]) !=
                                         len({c["doc_id"] for c in r["supporting_context"]})
                                         for r in rs))
  print("gold outside candidates", [r["qid"] for r in rs
                                    if {c["doc_id"] for c in r["supporting_context"]}
                                    - candidates(r)])


if __name__ == "__main__":
  main()
