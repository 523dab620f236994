"""Saves that fail half-way leave the previous artifact: GRAIL checkpoints, triple files and
VG150 statistics."""

import jax
import numpy as np
import pytest

from graphloom_jax.graph import kb, triples
from graphloom_jax.retrieval import grail


def test_failed_grail_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
  cfg = grail.GrailConfig(dim=8, tau=0.3, gate="vector")
  old = grail.init_params(jax.random.key(0), cfg)
  grail.save(tmp_path / "ck", old, cfg)

  def full_disk(*args, **kwargs):
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(grail.json, "dumps", full_disk)
  with pytest.raises(OSError, match="No space left"):
    grail.save(tmp_path / "ck", grail.init_params(jax.random.key(1), cfg), cfg)
  monkeypatch.undo()
  loaded, _ = grail.load(tmp_path / "ck")
  for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(old)):
    np.testing.assert_array_equal(a, b)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_grail_save_refuses_a_folder_of_other_files(tmp_path):
  (tmp_path / "notes.txt").write_text("mine")
  cfg = grail.GrailConfig(dim=8, tau=0.3, gate="vector")
  with pytest.raises(FileExistsError, match="holds other files"):
    grail.save(tmp_path, grail.init_params(jax.random.key(0), cfg), cfg)
  assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("name", ["t.jsonl", "t.json"])
def test_failed_write_triples_keeps_previous_file(tmp_path, monkeypatch, name):
  path = tmp_path / name
  old = [triples.Triple("cup", "on", "table")]
  triples.write_triples(path, old)
  calls = []

  def dumps_then_fail(record):
    calls.append(record)
    if len(calls) == 2:
      raise OSError(28, "No space left on device")
    return "{}"

  monkeypatch.setattr(triples, "dumps", dumps_then_fail)
  with pytest.raises(OSError):
    triples.write_triples(path, [triples.Triple("a", "b", f"c{i}") for i in range(3)])
  monkeypatch.undo()
  assert triples.read_triples(path)[0] == old
  assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_failed_vg150_save_keeps_previous_file(tmp_path, monkeypatch):
  stats = kb.VG150Stats.__new__(kb.VG150Stats)
  path = tmp_path / "vg150.json"
  path.write_text('{"old": true}\n')
  monkeypatch.setattr(kb.VG150Stats, "to_json", lambda self: {"x": object()})
  with pytest.raises(TypeError):
    stats.save(path)
  assert path.read_text() == '{"old": true}\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ["vg150.json"]
