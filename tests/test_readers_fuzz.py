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
