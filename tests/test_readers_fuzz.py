"""Bad bytes in triple files: non-UTF-8, corrupt or truncated gzip, deep nesting, control
characters in fields and NaN regions give errors naming the file and line; lenient reading
keeps every good record."""

import gzip
import json
import math

import hypothesis
import hypothesis.strategies as st
import pytest

from graphloom_jax.graph import triples as T


def _good(i):
  return T.dumps({"subject": f"cup{i}", "relation": "on", "object": "table",
                  "confidence": 0.5, "source": "scene"})


def _write_jsonl(path, lines: list[bytes]):
  data = b"\n".join(lines) + b"\n"
  path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_non_utf8_line_named_and_skipped(tmp_path, name):
  path = tmp_path / name
  _write_jsonl(path, [_good(0).encode(), b'{"subject": "caf\xe9", "relation": "r", "object": "o"}',
                      _good(2).encode()])
  with pytest.raises(T.TripleFormatError, match=f"{name}:2: not valid UTF-8"):
    T.read_triples(path)
  got, report = T.read_triples(path, strict=False)
  assert [t.subject for t in got] == ["cup0", "cup2"]
  assert report.skipped == 1 and "t.jsonl" in report.errors[0] and ":2:" in report.errors[0]


def test_deeply_nested_line_named_and_skipped(tmp_path):
  path = tmp_path / "t.jsonl"
  _write_jsonl(path, [_good(0).encode(), b"[" * 100_000 + b"]" * 100_000, _good(2).encode()])
  with pytest.raises(T.TripleFormatError, match="t.jsonl:2: .*nested too deeply"):
    T.read_triples(path)
  got, report = T.read_triples(path, strict=False)
  assert [t.subject for t in got] == ["cup0", "cup2"] and report.skipped == 1


def test_deeply_nested_json_file_named(tmp_path):
  path = tmp_path / "t.json"
  path.write_text("[" * 100_000 + "]" * 100_000)
  with pytest.raises(T.TripleFormatError, match="t.json: .*nested too deeply"):
    T.read_triples(path)


def test_non_utf8_json_file_names_line(tmp_path):
  path = tmp_path / "t.json"
  path.write_bytes(b'[\n' + _good(0).encode() + b',\n{"subject": "\xff"}]')
  with pytest.raises(T.TripleFormatError, match="t.json:3: not valid UTF-8"):
    T.read_triples(path)


def test_truncated_gzip_keeps_good_records_in_lenient_mode(tmp_path):
  path = tmp_path / "t.jsonl.gz"
  lines = [_good(i).encode() for i in range(2000)]
  data = gzip.compress(b"\n".join(lines) + b"\n")
  path.write_bytes(data[:len(data) // 2])
  with pytest.raises(T.TripleFormatError, match="t.jsonl.gz:.*truncated or corrupt gzip"):
    T.read_triples(path)
  got, report = T.read_triples(path, strict=False)
  assert 0 < len(got) < 2000 and report.skipped == 1
  assert [t.subject for t in got] == [f"cup{i}" for i in range(len(got))]
  assert "truncated or corrupt gzip" in report.errors[0]


def test_corrupt_gzip_header_named(tmp_path):
  path = tmp_path / "t.jsonl.gz"
  path.write_bytes(b"this is not gzip at all\n")
  with pytest.raises(T.TripleFormatError, match="t.jsonl.gz:1: truncated or corrupt gzip"):
    T.read_triples(path)
  got, report = T.read_triples(path, strict=False)
  assert got == [] and report.skipped == 1
  json_gz = tmp_path / "t.json.gz"
  json_gz.write_bytes(gzip.compress(b"[" + _good(0).encode() + b"]")[:-12])
  with pytest.raises(T.TripleFormatError, match="t.json.gz: truncated or corrupt gzip"):
    T.read_triples(json_gz)


@pytest.mark.parametrize("field", ["subject", "relation", "object", "source"])
@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x00b", "a\u2028b"])
def test_line_breaks_and_nul_in_fields_refused(tmp_path, field, bad):
  record = {"subject": "cup", "relation": "on", "object": "table", "source": "scene",
            field: bad}
  with pytest.raises(T.TripleFormatError, match=f"{field} must not contain line breaks or NUL"):
    T.triple_from_json(record)
  path = tmp_path / "t.jsonl"
  _write_jsonl(path, [_good(0).encode(), json.dumps(record).encode()])
  with pytest.raises(T.TripleFormatError, match="t.jsonl:2: "):
    T.read_triples(path)
  assert len(T.read_triples(path, strict=False)[0]) == 1


def test_line_breaks_in_provenance_refused():
  with pytest.raises(T.TripleFormatError, match="provenance.instance must not contain"):
    T.Triple("a", "b", "c", provenance=T.Provenance(instance="x\ny"))
  with pytest.raises(T.TripleFormatError, match="provenance.ref must not contain"):
    T.Triple("a", "b", "c", provenance=T.Provenance(ref="x\x00"))


@pytest.mark.parametrize("region", [[math.nan, 0, 1, 1], [0, 0, math.inf, 1], [0, 0, -1, 2]])
def test_bad_regions_refused(region):
  with pytest.raises(T.TripleFormatError, match="provenance.region must be"):
    T.Triple("a", "b", "c", provenance=T.Provenance(region=tuple(region)))


def test_nan_region_in_file_refused(tmp_path):
  path = tmp_path / "t.jsonl"
  path.write_text('{"subject": "a", "relation": "b", "object": "c", '
                  '"provenance": {"region": [NaN, 0, 1, 1]}}\n')
  with pytest.raises(T.TripleFormatError, match="t.jsonl:1: .*provenance.region"):
    T.read_triples(path)


@hypothesis.given(st.lists(st.one_of(
    st.binary(max_size=40),
    st.builds(lambda i: _good(i).encode(), st.integers(0, 99))), max_size=12))
@hypothesis.settings(max_examples=60)
def test_lenient_reading_keeps_every_good_record(tmp_path_factory, lines):
  """Random byte lines (at most 40 bytes: too short to be a triple) between good ones: lenient
  reading keeps exactly the good records, in order; strict reading names the first bad line."""
  lines = [l.replace(b"\n", b" ").replace(b"\r", b" ") for l in lines]
  path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
  _write_jsonl(path, lines)
  good = [json.loads(l)["subject"] for l in lines if len(l) > 40]
  bad = [i + 1 for i, l in enumerate(lines) if len(l) <= 40 and l.strip()]
  got, report = T.read_triples(path, strict=False)
  assert [t.subject for t in got] == good and report.skipped == len(bad)
  if bad:
    with pytest.raises(T.TripleFormatError, match=f"t.jsonl:{bad[0]}: "):
      T.read_triples(path)
  else:
    assert len(T.read_triples(path)[0]) == len(good)


# ------------------------------------------------------------------------------ KB readers

from graphloom_jax.graph import kb  # noqa: E402

CN_GOOD = ("/a/[x]\t/r/IsA\t/c/en/dog{i}/n\t/c/en/animal\t"
           '{{"weight": 2.0, "dataset": "/d/test"}}')
WN_DATA = ("00001740 03 n 01 entity 0 000 | that which is perceived  ",
           "00002137 03 n 01 thing 0 001 @ 00001740 n 0000 | a separate object  ")
WN_INDEX = ("entity n 1 0 1 0 00001740  ", "thing n 1 1 @ 1 0 00002137  ")


def _cn_file(path, lines: list[bytes]):
  data = b"\n".join(lines) + b"\n"
  path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
  return path


def _cn_good(i) -> bytes:
  return CN_GOOD.format(i=i).encode()


@pytest.mark.parametrize("bad, why", [
    (b"/a/[x]\t/r/IsA\t/c/en/caf\xe9\t/c/en/animal\t{\"weight\": 1}", "not valid UTF-8"),
    (b"/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal", "expected 5 tab-separated columns"),
    (b"/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{\"weight\": NaN}", "finite non-negative"),
    (b"/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{\"weight\": Infinity}", "finite non-negative"),
    (b"/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{\"weight\": -1}", "finite non-negative"),
    (b"/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{\"weight\": true}", "numeric 'weight'"),
    (b"/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{\"dataset\": 1}", "numeric 'weight'"),
    (b"/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{weight: 1}", "not valid JSON"),
    (b"/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t" + b"[" * 100_000, "nested too deeply"),
    (b"/a/[x]\t/r/IsA\t/c/en/\t/c/en/animal\t{\"weight\": 1}", "not a ConceptNet concept"),
    (b"/a/[x]\tIsA\t/c/en/dog\t/c/en/animal\t{\"weight\": 1}", "not a ConceptNet relation"),
    (b"/a/[x]\t/r/IsA\t/c/en/do\x00g\t/c/en/animal\t{\"weight\": 1}", "NUL byte"),
    (b"/a/[x]\t/r/IsA\t/c/en/do\xe2\x80\xa8g\t/c/en/animal\t{\"weight\": 1}",
     "must not contain line breaks"),
])
def test_conceptnet_bad_line_named_and_skipped(tmp_path, bad, why):
  path = _cn_file(tmp_path / "cn.csv", [_cn_good(0), bad, _cn_good(2)])
  with pytest.raises(T.TripleFormatError, match=f"cn.csv:2: .*{why}"):
    kb.load_conceptnet(path)
  got, report = kb.load_conceptnet(path, strict=False)
  assert [t.subject for t in got] == ["dog0", "dog2"]
  assert report.skipped == 1 and report.read == 2 and "cn.csv:2:" in report.errors[0]


def test_conceptnet_huge_line_refused_without_reading_it_whole(tmp_path, monkeypatch):
  monkeypatch.setattr(kb, "MAX_LINE_BYTES", 1000)
  huge = b"/a/[x]\t/r/IsA\t/c/en/" + b"a" * 5000 + b"\t/c/en/b\t{\"weight\": 1}"
  path = _cn_file(tmp_path / "cn.csv", [_cn_good(0), huge, _cn_good(2), huge])
  with pytest.raises(T.TripleFormatError, match="cn.csv:2: line longer than 1000 bytes"):
    kb.load_conceptnet(path)
  got, report = kb.load_conceptnet(path, strict=False)
  assert [t.subject for t in got] == ["dog0", "dog2"] and report.skipped == 2
  assert "cn.csv:4:" in report.errors[1]


def test_conceptnet_truncated_gzip_named_and_good_lines_kept(tmp_path):
  path = tmp_path / "cn.csv.gz"
  data = gzip.compress(b"\n".join(_cn_good(i) for i in range(3000)) + b"\n")
  path.write_bytes(data[:len(data) // 2])
  with pytest.raises(T.TripleFormatError, match="cn.csv.gz:.*truncated or corrupt gzip"):
    kb.load_conceptnet(path)
  got, report = kb.load_conceptnet(path, strict=False)
  assert 0 < len(got) < 3000 and report.skipped == 1
  assert [t.subject for t in got] == [f"dog{i}" for i in range(len(got))]


def _wordnet(folder, data_lines, index_lines, raw_data: bytes | None = None):
  folder.mkdir(exist_ok=True)
  header = "  1 This software and database is being provided\n"
  (folder / "data.noun").write_bytes(raw_data if raw_data is not None else
                                     (header + "\n".join(data_lines) + "\n").encode())
  (folder / "index.noun").write_text(header + "\n".join(index_lines) + "\n")
  return folder


def test_wordnet_minimal_files_load(tmp_path):
  wn = kb.WordNet.load(_wordnet(tmp_path / "wn", WN_DATA, WN_INDEX))
  assert [s.head for s in wn.related(wn.senses("thing")[0], "@")] == ["entity"]
  assert wn.report.read == 4 and wn.report.skipped == 0


@pytest.mark.parametrize("bad, why", [
    ("00002137 03 n 01 thing 0 001 @ 00001740 n 0000 a separate object", "missing the '|'"),
    ("00002137 03 n 00 0 000 | no words", "at least one word"),
    ("00002137 03 q 01 thing 0 000 | bad ss_type", "ss_type 'q'"),
    ("-0002137 03 n 01 thing 0 000 | negative", "must be >= 0"),
    ("00002137 03 n 01 thing 0 002 @ 00001740 n 0000 | too few pointers", "malformed"),
    ("00002137 03 n 01 thing 0 001 @ 00001740 x 0000 | bad pos", "pos 'x'"),
    ("00002137 03 n 01 thing 0 001 @ 00001740 n 00 | short st", "4 hex digits"),
    ("00002137 03 n 0z thing 0 000 | bad hex", "malformed"),
    ("00002137 03 v 01 run 0 000 05 + 01 00 | frames", "f_cnt 5"),
    ("00002137 03 n 01 thing 0 000 extra | stray field", "unexpected field"),
])
def test_wordnet_bad_data_line_named_and_skipped(tmp_path, bad, why):
  folder = _wordnet(tmp_path / "wn", [WN_DATA[0], bad], WN_INDEX[:1])
  with pytest.raises(T.TripleFormatError, match=f"data.noun:3: .*{why}"):
    kb.WordNet.load(folder)
  wn = kb.WordNet.load(folder, strict=False)
  assert list(wn.synsets) == [("n", 1740)] and wn.report.skipped == 1
  assert "data.noun:3:" in wn.report.errors[0]


@pytest.mark.parametrize("bad, why", [
    ("thing v 1 0 1 0 00002137", "pos 'v'"),
    ("thing n 2 0 2 0 00002137", "synset_cnt says 2"),
    ("thing n 0 0 0 0", "synset_cnt 0"),
    ("thing n 1 0 1 0 -0002137", "negative synset offset"),
    ("thing n 1", "malformed"),
])
def test_wordnet_bad_index_line_named(tmp_path, bad, why):
  folder = _wordnet(tmp_path / "wn", WN_DATA, [WN_INDEX[0], bad])
  with pytest.raises(T.TripleFormatError, match=f"index.noun:3: .*{why}"):
    kb.WordNet.load(folder)
  wn = kb.WordNet.load(folder, strict=False)
  assert list(wn.index) == [("n", "entity")] and wn.report.skipped == 1


def test_wordnet_non_utf8_and_huge_lines_named(tmp_path, monkeypatch):
  raw = ("  1 header\n" + WN_DATA[0] + "\n").encode() + b"00002137 03 n 01 th\xffing 0 000 | x\n"
  folder = _wordnet(tmp_path / "wn", None, WN_INDEX[:1], raw_data=raw)
  with pytest.raises(T.TripleFormatError, match="data.noun:3: not valid UTF-8"):
    kb.WordNet.load(folder)
  assert kb.WordNet.load(folder, strict=False).report.skipped == 1
  monkeypatch.setattr(kb, "MAX_LINE_BYTES", 200)
  folder = _wordnet(tmp_path / "wn2", [WN_DATA[0], WN_DATA[1][:30] + " " * 500 + "| long"],
                    WN_INDEX[:1])
  with pytest.raises(T.TripleFormatError, match="data.noun:3: line longer than 200 bytes"):
    kb.WordNet.load(folder)
  assert list(kb.WordNet.load(folder, strict=False).synsets) == [("n", 1740)]


def test_wordnet_missing_folder_or_file_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="nowhere is not a folder"):
    kb.WordNet.load(tmp_path / "nowhere")
  folder = _wordnet(tmp_path / "wn", WN_DATA, WN_INDEX)
  (folder / "index.noun").unlink()
  with pytest.raises(FileNotFoundError, match="index.noun does not exist"):
    kb.WordNet.load(folder)


@pytest.mark.parametrize("content, why", [
    (b'{"objects": "abc", "predicates": ["on"]}', "'objects' must be a list"),
    (b'{"objects": ["a"], "predicates": ["on"], "counts": [["a", "on", "a", true]]}',
     r"counts\[0\]"),
    (b'{"objects": ["a"], "predicates": ["on"], "counts": [[["a"], "on", "a", 1]]}',
     r"counts\[0\]"),
    (b'{"objects": ["caf\xe9"]}', "not valid UTF-8"),
    (b'{"objects": [', "not a valid JSON"),
])
def test_vg150_files_bad_content_named(tmp_path, content, why):
  path = tmp_path / "vg.json"
  path.write_bytes(content)
  loader = kb.VG150Stats.load if b"counts" in content else kb.load_vg150_vocab
  with pytest.raises(T.TripleFormatError, match=f"vg.json.*{why}"):
    loader(path)


_CN_BAD = st.one_of(
    st.binary(max_size=60),
    st.builds(lambda w: f'/a/[x]\t/r/IsA\t/c/en/cat\t/c/en/pet\t{{"weight": {w}}}'.encode(),
              st.sampled_from(["NaN", "-Infinity", "-2", '"1"', "null", "[1]", "1e999"])))


@hypothesis.given(st.lists(st.one_of(_CN_BAD, st.builds(_cn_good, st.integers(0, 99))),
                           max_size=12))
@hypothesis.settings(max_examples=80, deadline=None)
def test_fuzz_conceptnet_lenient_keeps_every_good_line(tmp_path_factory, lines):
  """Random bytes and bad weights between good assertions: lenient reading keeps exactly the
  good ones, in order, each bad non-blank line counted once; strict reading names the first."""
  lines = [l.replace(b"\n", b" ").replace(b"\r", b" ") for l in lines]
  path = _cn_file(tmp_path_factory.mktemp("cn") / "cn.csv", lines)
  is_good = [l.startswith(b"/a/[x]\t/r/IsA\t/c/en/dog") for l in lines]
  good = [l.split(b"\t")[2].decode()[6:-2] for l, ok in zip(lines, is_good) if ok]
  # Blank as the reader defines it: the decoded line is whitespace (str.strip, so control
  # characters such as \x1c count as whitespace); an undecodable line is never blank.
  bad = [i + 1 for i, (l, ok) in enumerate(zip(lines, is_good))
         if not ok and l.decode("utf-8", "replace").strip()]
  got, report = kb.load_conceptnet(path, strict=False)
  # a random line can only be good by chance if it parses; none of these 60-byte lines does
  assert [t.subject for t in got] == good
  assert report.skipped == len(bad) and report.read == len(good)
  assert all(0 < t.confidence < 1 and math.isfinite(t.confidence) for t in got)
  if bad:
    with pytest.raises(T.TripleFormatError, match=f"cn.csv:{bad[0]}: "):
      kb.load_conceptnet(path)


@hypothesis.given(st.lists(st.one_of(st.sampled_from(WN_DATA), st.text(max_size=50)),
                           max_size=8))
@hypothesis.settings(max_examples=80, deadline=None)
def test_fuzz_wordnet_data_lines(tmp_path_factory, lines):
  """Random text lines never escape as anything but TripleFormatError naming data.noun and a
  line, and lenient reading keeps the good synsets."""
  lines = [l.replace("\n", " ").replace("\r", " ") for l in lines]
  folder = _wordnet(tmp_path_factory.mktemp("wn"), lines, WN_INDEX[:1])
  try:
    kb.WordNet.load(folder)
  except T.TripleFormatError as e:
    assert "data.noun:" in str(e)
  wn = kb.WordNet.load(folder, strict=False)
  for line in lines:
    if line in WN_DATA:
      assert ("n", int(line[:8])) in wn.synsets
