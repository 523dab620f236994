"""Atomic saves: an exception or a kill mid-write keeps the previous file; corruption is caught."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from graphloom_jax import atomic


def _siblings(path):
  return sorted(p.name for p in path.parent.iterdir())


def test_write_text_bytes_json_round_trip(tmp_path):
  atomic.atomic_write_text(tmp_path / "a" / "t.txt", "héllo")
  atomic.atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
  atomic.atomic_write_json(tmp_path / "c.json", {"x": [1, 2]}, indent=1)
  assert (tmp_path / "a" / "t.txt").read_text(encoding="utf-8") == "héllo"
  assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
  assert json.loads((tmp_path / "c.json").read_text()) == {"x": [1, 2]}
  assert _siblings(tmp_path / "c.json") == ["a", "b.bin", "c.json"]


def test_json_refuses_nan_and_keeps_old(tmp_path):
  path = tmp_path / "m.json"
  atomic.atomic_write_json(path, {"loss": 1.0})
  with pytest.raises(ValueError):
    atomic.atomic_write_json(path, {"loss": float("nan")})
  assert json.loads(path.read_text()) == {"loss": 1.0}
  assert _siblings(path) == ["m.json"]


def test_exception_mid_write_keeps_old_file_and_removes_temp(tmp_path):
  path = tmp_path / "ids.npy"
  np.save(path, np.arange(3))
  with pytest.raises(RuntimeError, match="disk full"):
    with atomic.atomic_path(path) as tmp:
      assert tmp.parent == path.parent and tmp.name.endswith("ids.npy")
      np.save(tmp, np.arange(10))
      raise RuntimeError("disk full")
  np.testing.assert_array_equal(np.load(path), np.arange(3))
  assert _siblings(path) == ["ids.npy"]


def test_nothing_written_is_an_error_and_keeps_old(tmp_path):
  path = tmp_path / "x.txt"
  path.write_text("old")
  with pytest.raises(FileNotFoundError, match="nothing was written"):
    with atomic.atomic_path(path):
      pass
  assert path.read_text() == "old"


def _run_and_kill(code, tmp_path):
  """Runs `code` in a child that SIGKILLs itself at `KILL()`; returns its exit status."""
  script = tmp_path / "child.py"
  script.write_text("import os, signal\nKILL = lambda: os.kill(os.getpid(), signal.SIGKILL)\n"
                    + textwrap.dedent(code))
  return subprocess.run([sys.executable, str(script)], cwd=tmp_path, timeout=120).returncode


def test_kill_mid_write_keeps_old_file(tmp_path):
  path = tmp_path / "final.json"
  path.write_text('{"good": true}')
  rc = _run_and_kill(f"""
      from graphloom_jax import atomic
      with atomic.atomic_path({str(path)!r}) as tmp:
        with open(tmp, "w") as f:
          f.write('{{"torn')
          f.flush()
          KILL()
  """, tmp_path)
  assert rc == -signal.SIGKILL
  assert json.loads(path.read_text()) == {"good": True}


def test_dir_swap_replaces_and_exception_keeps_old(tmp_path):
  path = tmp_path / "index"
  with atomic.atomic_dir(path) as d:
    (d / "v.txt").write_text("1")
  with atomic.atomic_dir(path) as d:
    (d / "v.txt").write_text("2")
  assert (path / "v.txt").read_text() == "2"
  with pytest.raises(KeyboardInterrupt):
    with atomic.atomic_dir(path) as d:
      (d / "v.txt").write_text("3")
      raise KeyboardInterrupt
  assert (path / "v.txt").read_text() == "2"
  assert sorted(p.name for p in path.iterdir()) == ["v.txt"]
  assert _siblings(path) == ["index"]


def test_dir_kill_mid_fill_keeps_old(tmp_path):
  path = tmp_path / "index"
  with atomic.atomic_dir(path) as d:
    (d / "v.txt").write_text("old")
  rc = _run_and_kill(f"""
      from graphloom_jax import atomic
      with atomic.atomic_dir({str(path)!r}) as d:
        (d / "v.txt").write_text("new, half")
        KILL()
  """, tmp_path)
  assert rc == -signal.SIGKILL
  assert (path / "v.txt").read_text() == "old"


def test_dir_kill_between_renames_is_restored(tmp_path):
  path = tmp_path / "index"
  with atomic.atomic_dir(path) as d:
    (d / "v.txt").write_text("old")
  rc = _run_and_kill(f"""
      import os
      from graphloom_jax import atomic
      real_replace = os.replace
      def replace_then_die(src, dst):
        real_replace(src, dst)
        if ".old-" in str(dst):
          KILL()
      os.replace = replace_then_die
      with atomic.atomic_dir({str(path)!r}) as d:
        (d / "v.txt").write_text("new")
  """, tmp_path)
  assert rc == -signal.SIGKILL
  assert not path.exists()  # the window the kill landed in
  assert atomic.restore_dir(path)
  assert (path / "v.txt").read_text() == "old"
  # The next save also restores first, and leaves no aside folder behind.
  os.replace(path, tmp_path / f".old-1-abc-{path.name}")
  with atomic.atomic_dir(path) as d:
    (d / "v.txt").write_text("newer")
  assert (path / "v.txt").read_text() == "newer"
  assert [n for n in _siblings(path) if n.startswith(".old-")] == []


def test_npz_checked_round_trip(tmp_path, rng):
  arrays = {"x": rng.normal(size=(4, 3)).astype(np.float32), "ids": np.arange(4, dtype=np.int64),
            "names": np.array(["a", "bc"])}
  atomic.save_npz_checked(tmp_path / "f.npz", arrays)
  back = atomic.load_npz_checked(tmp_path / "f.npz")
  assert sorted(back) == sorted(arrays)
  for k in arrays:
    np.testing.assert_array_equal(back[k], arrays[k])
    assert back[k].dtype == arrays[k].dtype


def test_npz_checked_detects_flipped_byte_and_truncation(tmp_path, rng):
  path = tmp_path / "f.npz"
  atomic.save_npz_checked(path, {"x": rng.normal(size=(64, 8)).astype(np.float32)})
  data = bytearray(path.read_bytes())
  flipped = tmp_path / "flipped.npz"
  data[len(data) // 3] ^= 0xFF
  flipped.write_bytes(bytes(data))
  with pytest.raises(atomic.CorruptArtifactError, match="flipped.npz"):
    atomic.load_npz_checked(flipped)
  truncated = tmp_path / "truncated.npz"
  truncated.write_bytes(path.read_bytes()[:500])
  with pytest.raises(atomic.CorruptArtifactError, match="truncated.npz"):
    atomic.load_npz_checked(truncated)


def test_npz_checked_detects_consistent_rewrite_without_checksum(tmp_path):
  # A valid zip whose array changed but whose checksum did not (e.g. an edited copy).
  path = tmp_path / "f.npz"
  atomic.save_npz_checked(path, {"x": np.arange(5.0)})
  with np.load(path) as f:
    stored = f[atomic.CHECKSUM_KEY]
  np.savez(path, x=np.arange(5.0) + 1, **{atomic.CHECKSUM_KEY: stored})
  with pytest.raises(atomic.CorruptArtifactError, match="checksum"):
    atomic.load_npz_checked(path)
  np.savez(path, x=np.arange(5.0))
  with pytest.raises(atomic.CorruptArtifactError, match="no '__sha256__'"):
    atomic.load_npz_checked(path)


def test_npz_checked_refuses_object_arrays_and_pickles(tmp_path):
  with pytest.raises(ValueError, match="dtype object"):
    atomic.save_npz_checked(tmp_path / "o.npz", {"o": np.array([{"a": 1}], dtype=object)})
  np.savez(tmp_path / "p.npz", o=np.array([{"a": 1}], dtype=object))
  with pytest.raises(atomic.CorruptArtifactError, match="p.npz"):
    atomic.load_npz_checked(tmp_path / "p.npz")
