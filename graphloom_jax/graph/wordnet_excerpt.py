"""The WordNet-derived files the package reads at run time, built from WordNet 3.0's database
files (launch/build_wordnet_resources.py is the maintainers' command; its output is committed).

`build` writes, under `out` (graphloom_jax/data/resources/wordnet/):
  LICENSE            WordNet 3.0's licence notice (redistribution requires it).
  noun.exc           WordNet's noun exception list, unchanged (morphy's irregular plurals).
  noun_lemmas.txt.gz every noun lemma of index.noun, one per line (morphy checks candidates
                     against it); gzip with mtime 0 so the bytes are reproducible.
  data.noun          an excerpt in the real wndb format: the synset chosen for each VG150 object
                     class, its hypernym closure up to `entity`, and its one-hop part / member /
                     substance meronyms and holonyms; pointers to synsets outside the excerpt are
                     dropped (p_cnt rewritten) so the excerpt is closed.
  index.noun         an excerpt in the real wndb format: each VG150 class maps to the ONE sense
                     chosen in SENSES below (WordNet's first sense is often not the visual one:
                     "plant" = factory, "kite" = bank cheque), every other included synset's first
                     word maps to that synset.
  sense_counts.tsv   for every lemma of that index, each of its noun senses in the full
                     database: `lemma <TAB> sense number <TAB> synset offset <TAB> tag count`,
                     the tag count from cntlist.rev (how often the sense was tagged in the
                     semantic concordance; 0 when never); graded KB scores read it
                     (`graph.kb.WordNet`, score="frequency").
and, under `tests_out` (tests/data/wordnet/), unmodified real lines for a few lemmas (the
licence header, their senses' synsets and hypernym closures) for the loader tests.
"""

import gzip
import json
import pathlib

from graphloom_jax.graph.kb import WordNet


# VG150 class -> (WordNet lemma, 1-based sense number) where the first sense is not the object
# seen in images. Chosen by reading the glosses.
SENSES = {
    "bike": ("bike", 2), "board": ("board", 3), "branch": ("branch", 2), "glass": ("glass", 2),
    "glove": ("glove", 2), "kite": ("kite", 3), "light": ("light", 2), "men": ("man", 1),
    "number": ("numeral", 1), "pant": ("trouser", 1), "plant": ("plant", 2),
    "plate": ("plate", 4), "post": ("post", 4), "racket": ("racket", 4),
    "short": ("shorts", 1), "sign": ("sign", 2), "stand": ("stand", 4), "table": ("table", 2),
    "track": ("track", 3), "toilet": ("toilet", 2), "seat": ("seat", 3), "letter": ("letter", 2),
}


NEIGHBOUR_POINTERS = ("#m", "#s", "#p", "%m", "%s", "%p")


TEST_LEMMAS = ("dog", "car", "wheel", "horse", "table")


def chosen_synsets(wn: WordNet, objects):
  out = {}
  for cls in objects:
    lemma, sense = SENSES.get(cls, (cls, 1))
    senses = wn.senses(lemma)
    if len(senses) < sense:
      raise ValueError(f"VG150 class {cls!r}: WordNet has no sense {sense} of {lemma!r}")
    out[cls] = senses[sense - 1]
  return out


def closure(wn: WordNet, synsets):
  keep = set()
  for s in synsets:
    for path in wn.hypernym_paths(s):
      keep.update(x.offset for x in path)
    for sym in NEIGHBOUR_POINTERS:
      keep.update(x.offset for x in wn.related(s, sym))
  return keep


def raw_lines(path: pathlib.Path):
  header, lines = [], {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.startswith("  "):
        header.append(line)
      else:
        lines[line.split(" ", 1)[0]] = line
  return header, lines


def pruned(line: str, keep: set[int]) -> str:
  """The data line with pointers to noun synsets outside `keep` (and all non-noun ones) removed."""
  body, _, gloss = line.partition("|")
  f = body.split()
  w_cnt = int(f[3], 16)
  i = 4 + 2 * w_cnt
  p_cnt = int(f[i])
  ptrs = [f[i + 1 + 4 * j: i + 5 + 4 * j] for j in range(p_cnt)]
  ptrs = [p for p in ptrs if p[2] == "n" and int(p[1]) in keep]
  head = f[:i] + [f"{len(ptrs):03d}"] + [x for p in ptrs for x in p] + f[i + 1 + 4 * p_cnt:]
  return " ".join(head) + " |" + gloss


def write_gzip_lines(path: pathlib.Path, lines):
  data = "".join(x + "\n" for x in lines).encode("utf-8")
  with open(path, "wb") as raw:
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
      f.write(data)


def write_sense_counts(src: pathlib.Path, wn: WordNet, lemmas, path: pathlib.Path) -> None:
  """sense_counts.tsv (see the module docstring) for `lemmas`, from index.noun's sense order and
  cntlist.rev's tag counts ("sense_key sense_number tag_cnt" lines; noun keys have ss_type 1)."""
  counts = {}
  for line in (src / "cntlist.rev").read_text(encoding="utf-8").splitlines():
    key, number, tagged = line.split()
    lemma, _, lex = key.partition("%")
    if lex.startswith("1:"):
      counts[(lemma, int(number))] = counts.get((lemma, int(number)), 0) + int(tagged)
  with open(path, "w", encoding="utf-8") as f:
    for lemma in lemmas:
      for number, s in enumerate(wn.senses(lemma), start=1):
        f.write(f"{lemma}\t{number}\t{s.offset:08d}\t{counts.get((lemma, number), 0)}\n")


def build(wordnet_dir, vocab, out, tests_out, license_file) -> str:
  """Writes the resources; returns a one-line summary."""
  src, out, tests_out = pathlib.Path(wordnet_dir), pathlib.Path(out), pathlib.Path(tests_out)
  out.mkdir(parents=True, exist_ok=True)
  tests_out.mkdir(parents=True, exist_ok=True)
  objects = json.loads(pathlib.Path(vocab).read_text())["objects"]
  wn = WordNet.load(src, "n")

  licence = pathlib.Path(license_file).read_text(encoding="utf-8")
  # The "Files: *" stanza of Debian's copyright file: copyright line plus the WordNet licence.
  start = licence.index("Files: *")
  end = licence.index("\n\n", licence.index("License: WordNet3.0"))
  (out / "LICENSE").write_text(
      "WordNet 3.0 (Princeton University). The files in this folder are derived from the\n"
      "WordNet 3.0 database and are redistributed under its licence:\n\n"
      + licence[start:end].strip() + "\n", encoding="utf-8")
  (out / "noun.exc").write_bytes((src / "noun.exc").read_bytes())
  lemmas = [line.split(" ", 1)[0] for line in (src / "index.noun").read_text().splitlines()
            if not line.startswith("  ")]
  write_gzip_lines(out / "noun_lemmas.txt.gz", lemmas)

  chosen = chosen_synsets(wn, objects)
  keep = closure(wn, chosen.values())
  header, data = raw_lines(src / "data.noun")
  with open(out / "data.noun", "w", encoding="utf-8") as f:
    f.writelines(header)
    for off in sorted(keep):
      f.write(pruned(data[f"{off:08d}"], keep))
  index = {}
  for off in sorted(keep):
    head = wn.synsets[("n", off)].words[0].lower()
    index.setdefault(head, off)
  for cls in objects:
    index[cls.replace(" ", "_")] = chosen[cls].offset
  with open(out / "index.noun", "w", encoding="utf-8") as f:
    f.writelines(header)
    for lemma in sorted(index):
      f.write(f"{lemma} n 1 0 1 0 {index[lemma]:08d}  \n")

  write_sense_counts(src, wn, sorted(index), out / "sense_counts.tsv")

  test_keep = set()
  for lemma in TEST_LEMMAS:
    for s in wn.senses(lemma):
      for path in wn.hypernym_paths(s):
        test_keep.update(x.offset for x in path)
  with open(tests_out / "data.noun", "w", encoding="utf-8") as f:
    f.writelines(header)
    f.writelines(data[f"{off:08d}"] for off in sorted(test_keep))
  _, index_lines = raw_lines(src / "index.noun")
  with open(tests_out / "index.noun", "w", encoding="utf-8") as f:
    f.writelines(header)
    f.writelines(index_lines[lemma] for lemma in sorted(TEST_LEMMAS))
  return (f"{out}: {len(keep)} synsets, {len(index)} index lemmas, {len(lemmas)} noun lemmas; "
          f"{tests_out}: {len(test_keep)} synsets")
