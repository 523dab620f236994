"""No library default points outside the project: the VG150 vocabulary ships with the package,
and MMQA paths must be given (with an error that names the setting)."""

import json
import pathlib

import pytest

from graphloom_jax.data import build_benchmark
from graphloom_jax.retrieval import grail_data

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_vg150_vocab_ships_with_the_package():
  vocab = build_benchmark.DEFAULT_VOCAB.resolve()
  assert vocab.is_relative_to(ROOT / "graphloom_jax")
  data = json.loads(vocab.read_text())
  assert len(data["objects"]) == 150 and len(data["predicates"]) == 50
  assert "man" in data["objects"] and "riding" in data["predicates"]
  assert data["objects"] == sorted(data["objects"])


def test_mmqa_evidence_set_needs_a_folder():
  with pytest.raises(ValueError, match=r"needs mmqa_dir.*--config\.grail\.mmqa_dir"):
    grail_data.load_evidence_set("mmqa")
