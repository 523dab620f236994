"""PathQuestion and WorldCup2014 readers (graphloom_jax.data.pathqa, pathquestion, wc2014) on
hand-written fixtures in the release formats (tests/data/pathquestion, tests/data/wc2014): the
fields, both split protocols, the instance graph against a networkx reference, and bad input."""

import collections
import pathlib
import random
import shutil

import networkx as nx
import pytest

from graphloom_jax.data import pathqa, pathquestion, wc2014
from graphloom_jax.data.pathqa import PathQAFormatError

DATA = pathlib.Path(__file__).resolve().parent / "data"
PQ, WC = DATA / "pathquestion", DATA / "wc2014"


def test_pathquestion_fields():
  ds = pathquestion.load("PQ-2H", root=PQ)
  assert len(ds.questions) == 10 and ds.report.skipped == 0 and len(ds.kb) == 12
  q = ds.questions[0]
  assert q.qid == "PQ-2H:1" and q.line == 1
  assert q.question == "where was ada lovelace 's father born ?"
  assert q.raw_question == "where was ada_lovelace 's father born ?"
  assert q.answers == ("london",) and q.answer_ids == ("london",)
  assert q.path == ("ada_lovelace", "parents", "lord_byron", "place_of_birth", "london")
  assert q.topic == "ada_lovelace" and q.hops == 2 and q.split in pathqa.SPLITS
  assert q.path_facts() == [("ada_lovelace", "parents", "lord_byron"),
                            ("lord_byron", "place_of_birth", "london")]
  gold = ds.gold_triples(q)
  assert [t.verbalize() for t in gold] == ["ada lovelace parents lord byron",
                                           "lord byron place of birth london"]
  assert gold[0].source == "kb:pathquestion" and gold[0].provenance.ref == "2H-kb.txt:1"
  assert gold[0].provenance.instance == "PQ-2H:1"
  assert ds.kb_id("lord byron") == "lord_byron"
  three = pathquestion.load("PQ-3H", root=PQ).questions
  assert [q.hops for q in three] == [3] * 4 and three[3].answers == ("female",)


def test_freebase_names_and_answers_with_parentheses():
  ds = pathquestion.load("PQL-2H", root=PQ)
  q = ds.questions[0]
  assert q.raw_question == "what is the rating of Earthquake 's tracks ?"
  assert q.answer_ids == ("PG_(USA)",) and q.answers == ("PG (USA)",)
  assert ds.questions[2].answer_ids == ("Venus_(New_version)", "Venus")
  assert ds.triple(q.path_facts()[1]).relation == "film film rating"
  assert pathqa.readable("__people__person__place_of_birth") == "people person place of birth"


def test_worldcup_fields_and_datasets():
  one, two = wc2014.load("WC-1H", root=WC), wc2014.load("WC-2H", root=WC)
  mixed, conj = wc2014.load("WC-M", root=WC), wc2014.load("WC-C", root=WC)
  assert [len(d.questions) for d in (one, two, mixed, conj)] == [4, 3, 7, 2]
  assert [q.raw_question for q in mixed.questions] == \
      [q.raw_question for q in one.questions + two.questions]
  q = one.questions[3]
  assert q.answer_ids == ("Rui_COSTA", "Ana_SILVA") and q.hops == 1
  assert q.facts[0] == ("Rui_COSTA", "plays_in_club", "Porto_FC") and len(q.facts) == 6
  c = conj.questions[0]
  assert len(c.paths) == 2 and c.constraints == ("Forward", "Porto_FC")
  assert c.path == ("Forward", "plays_position_inverse", "Ana_SILVA")
  assert c.paths[1] == ("Porto_FC", "plays_in_club_inverse", "Ana_SILVA")
  assert [q.hops for q in two.questions] == [2, 2, 2]


def test_path_split_keeps_paraphrases_together_and_ignores_file_order(tmp_path):
  ds = pathquestion.load("PQ-2H", root=PQ)
  by_path = collections.defaultdict(set)
  for q in ds.questions:
    by_path[q.path].add(q.split)
  assert all(len(s) == 1 for s in by_path.values())
  # the same paths in another order (and another file) get the same splits
  shutil.copy(PQ / "2H-kb.txt", tmp_path / "2H-kb.txt")
  lines = (PQ / "PQ-2H.txt").read_text().splitlines()
  random.Random(3).shuffle(lines)
  (tmp_path / "PQ-2H.txt").write_text("\n".join(lines) + "\n")
  shuffled = pathquestion.load("PQ-2H", root=tmp_path)
  assert {q.path: q.split for q in shuffled.questions} == {q.path: q.split for q in ds.questions}
  # the split is the path text's SHA-256 bucket
  import hashlib
  for q in ds.questions:
    b = int(hashlib.sha256("#".join(q.path).encode()).hexdigest()[:16], 16) % 10
    assert q.split == ("train" if b < 8 else "validation" if b == 8 else "test")
  assert sum(len(ds.split(s)) for s in pathqa.SPLITS) == len(ds.questions)


def test_line_split_is_the_published_protocol():
  for n in (1, 7, 10, 1908):
    got = collections.Counter(pathqa.line_splits(n))
    assert got["train"] == int(0.8 * n) and got["validation"] == int(0.1 * n)
    assert got["test"] == n - int(0.8 * n) - int(0.1 * n)
  assert pathqa.line_splits(50) == pathqa.line_splits(50) != pathqa.line_splits(50, seed=1)
  ds = pathquestion.load("PQ-2H", root=PQ)
  assert [q.line_split for q in ds.questions] == pathqa.line_splits(10)
  assert len(ds.split("train", protocol="line")) == 8
  with pytest.raises(ValueError, match="protocol"):
    ds.split("train", protocol="random")
  with pytest.raises(ValueError, match="unknown split"):
    ds.split("dev")


def _reference_neighbourhood(kb, entity, hops, directed):
  """Facts with an end within hops - 1 of the entity (undirected or forward distance)."""
  g = nx.MultiDiGraph()
  for s, r, o in kb:
    g.add_edge(s, o, key=r)
  dist = nx.single_source_shortest_path_length(g if directed else g.to_undirected(as_view=True),
                                               entity, cutoff=hops - 1)
  return {f for f in kb if f[0] in dist or (not directed and f[2] in dist)}


@pytest.mark.parametrize("name,root,loader", [("PQ-3H", PQ, pathquestion),
                                              ("PQL-2H", PQ, pathquestion),
                                              ("WC-2H", WC, wc2014)])
def test_instance_graph_is_the_kb_neighbourhood(name, root, loader):
  ds = loader.load(name, root=root)
  for q in ds.questions:
    for direction in ("both", "out"):
      for hops in (1, 2, q.hops + 1):
        got = ds.neighbourhood(q.topic, hops, direction)
        assert len(got) == len(set(got))
        assert set(got) == _reference_neighbourhood(ds.kb, q.topic, hops, direction == "out")
    triples = ds.instance_triples(q)
    keys = {t.key() for t in triples}
    assert {t.key() for t in ds.gold_triples(q)} <= keys
    assert len(triples) == len(set(keys))
    assert {t.provenance.instance for t in triples} == {q.qid}
    want = _reference_neighbourhood(ds.kb, q.topic, q.hops + 1, False) | set(q.facts)
    assert keys == {tuple(pathqa.readable(x) for x in f) for f in want}


def test_kb_refs_name_the_facts_line():
  ds = pathquestion.load("PQ-3H", root=PQ)
  lines = (PQ / "3H-kb.txt").read_text().splitlines()
  for t in ds.kb_triples():
    fields = [f for f in lines[int(t.provenance.ref.split(":")[1]) - 1].split("\t") if f]
    assert tuple(pathqa.readable(f) for f in fields) == t.key()


# --- bad input ------------------------------------------------------------------------------

def _copy(tmp_path, src=PQ):
  for f in src.iterdir():
    shutil.copy(f, tmp_path / f.name)
  return tmp_path


GOOD = "where was mary_shelley 's husband born ?\thorsham(horsham/)\t" \
       "mary_shelley#spouse#percy_shelley#place_of_birth#horsham#<end>#horsham"
BAD_LINES = {
    "missing field": ("where was x born ?\thorsham(horsham/)", "expected 3"),
    "hop not in KB": (GOOD.replace("spouse", "sibling"), "is not a fact of"),
    "unknown entity": (GOOD.replace("percy_shelley#place", "nobody#place"), "is not a fact of"),
    "answer not the end": (GOOD.replace("horsham(horsham/)", "london(london/)"),
                           "is not the path's end"),
    "answer not in its set": (GOOD.replace("horsham(horsham/)", "horsham(london/)"),
                              "answer set"),
    "end suffix disagrees": (GOOD[:-len("horsham")] + "london", "after <end>"),
    "even path": (GOOD.replace("#place_of_birth#horsham#<end>#horsham", "#place_of_birth"),
                  "odd number"),
    "no answer set": (GOOD.replace("horsham(horsham/)", "horsham"), "answer set"),
    "empty question": (GOOD.replace("where was mary_shelley 's husband born ?", " "),
                       "question is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_bad_question_line_strict_names_file_and_line_lenient_skips(tmp_path, case):
  root = _copy(tmp_path)
  line, message = BAD_LINES[case]
  good = (PQ / "PQ-2H.txt").read_text().splitlines()
  (root / "PQ-2H.txt").write_text("\n".join(good[:3] + [line] + good[3:]) + "\n")
  with pytest.raises(PathQAFormatError, match=rf"PQ-2H.txt:4: .*{message}"):
    pathquestion.load("PQ-2H", root=root)
  ds = pathquestion.load("PQ-2H", root=root, strict=False)
  assert ds.report.skipped == 1 and ds.report.read == 10 and len(ds.questions) == 10
  assert "PQ-2H.txt:4" in ds.report.errors[0]


def test_non_utf8_empty_truncated_and_bad_kb_lines(tmp_path):
  root = _copy(tmp_path)
  raw = (PQ / "PQ-2H.txt").read_bytes().split(b"\n")
  (root / "PQ-2H.txt").write_bytes(b"\n".join(raw[:1] + [raw[1].replace(b"ada", b"\xffda")]
                                              + raw[2:]))
  with pytest.raises(PathQAFormatError, match=r"PQ-2H.txt:2: not valid UTF-8"):
    pathquestion.load("PQ-2H", root=root)
  assert pathquestion.load("PQ-2H", root=root, strict=False).report.skipped == 1
  # truncated in the middle of its last line
  text = (PQ / "PQ-2H.txt").read_text()
  (root / "PQ-2H.txt").write_text(text[:len(text) - 30])
  with pytest.raises(PathQAFormatError, match=r"PQ-2H.txt:10: "):
    pathquestion.load("PQ-2H", root=root)
  assert len(pathquestion.load("PQ-2H", root=root, strict=False).questions) == 9
  (root / "PQ-2H.txt").write_text("")
  with pytest.raises(PathQAFormatError, match="PQ-2H.txt: the file is empty"):
    pathquestion.load("PQ-2H", root=root, strict=False)
  (root / "PQ-2H.txt").write_text(text)
  kb = (PQ / "2H-kb.txt").read_text().splitlines()
  (root / "2H-kb.txt").write_text("\n".join(kb[:5] + ["william_king\tnationality"] + kb[5:]))
  with pytest.raises(PathQAFormatError, match=r"2H-kb.txt:6: .*found 2 field"):
    pathquestion.load("PQ-2H", root=root)
  ds = pathquestion.load("PQ-2H", root=root, strict=False)
  assert ds.kb_report.skipped == 1 and len(ds.kb) == 12 and len(ds.questions) == 10
  (root / "PQ-2H.txt").unlink()
  with pytest.raises(FileNotFoundError, match="PQ-2H.txt is missing"):
    pathquestion.load("PQ-2H", root=root)
  with pytest.raises(ValueError, match="unknown dataset"):
    pathquestion.load("PQ-4H", root=root)


def test_worldcup_bad_lines(tmp_path):
  root = _copy(tmp_path, WC)
  lines = (WC / "WC-C.txt").read_text().splitlines()
  bad = {"one path": lines[0].replace("#Ana_SILVA*Porto_FC#plays_in_club_inverse#Ana_SILVA#<end>"
                                      "#Ana_SILVA", ""),
         "carried fact": lines[0].replace("Ana_SILVA#is_aged#23", "Ana_SILVA#is_aged"),
         "six fields": lines[0].rsplit("\t", 1)[0]}
  for case, line in bad.items():
    (root / "WC-C.txt").write_text("\n".join([lines[1], line]) + "\n")
    with pytest.raises(PathQAFormatError, match="WC-C.txt:2: "):
      wc2014.load("WC-C", root=root)
    assert len(wc2014.load("WC-C", root=root, strict=False).questions) == 1, case


@pytest.mark.parametrize("seed", range(40))
def test_fuzzed_files_give_format_errors_only(tmp_path, seed):
  """Random byte edits: strict reading either succeeds or raises PathQAFormatError; lenient
  reading keeps every line strict reading accepts."""
  rng = random.Random(seed)
  root = _copy(tmp_path)
  name = rng.choice(["PQ-2H.txt", "2H-kb.txt"])
  data = bytearray((PQ / name).read_bytes())
  for _ in range(rng.randint(1, 6)):
    i = rng.randrange(len(data))
    op = rng.random()
    if op < 0.4:
      data[i] = rng.choice(b"\t\n#()/_ \xff\x00ab")
    elif op < 0.7:
      del data[i:i + rng.randint(1, 20)]
    else:
      data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
  (root / name).write_bytes(bytes(data))
  try:
    strict = pathquestion.load("PQ-2H", root=root)
  except PathQAFormatError:
    strict = None
  try:
    lenient = pathquestion.load("PQ-2H", root=root, strict=False)
  except PathQAFormatError as e:  # nothing readable at all
    assert "empty" in str(e) or "could be read" in str(e)
    return
  if strict is not None:
    assert lenient.questions == strict.questions and lenient.report.skipped == 0
  assert lenient.report.read == len(lenient.questions)
