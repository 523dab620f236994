"""Evidence files for the decoder: text or triples JSONL, with clear errors for bad files."""

import json

import pytest

from graphloom_jax.data import evidence


def test_reads_text_and_triples(tmp_path):
  text = tmp_path / "evidence.txt"
  text.write_text("The horse is in front of the tree.\n")
  assert evidence.read_evidence(str(text)) == "The horse is in front of the tree."
  triples = tmp_path / "evidence.jsonl"
  triples.write_text(json.dumps(dict(subject="horse", relation="in front of", object="tree",
                                     confidence=0.9, source="scene")) + "\n")
  assert evidence.read_evidence(str(triples)) == "- horse in front of tree"


def test_bad_evidence_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="missing.txt"):
    evidence.read_evidence(str(tmp_path / "missing.txt"))
  (tmp_path / "empty.txt").write_text("  \n")
  with pytest.raises(ValueError, match="empty.txt is empty"):
    evidence.read_evidence(str(tmp_path / "empty.txt"))
  (tmp_path / "bad.jsonl").write_text('{"subject": "horse"}\n')
  with pytest.raises(ValueError, match="bad.jsonl"):
    evidence.read_evidence(str(tmp_path / "bad.jsonl"))
