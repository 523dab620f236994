"""Atomic saves: nothing a save writes is visible under its final name until it is complete.

Every writer puts its bytes into a temporary sibling (same folder, so the rename cannot cross a
file system), flushes them to disk, then renames the sibling over the target with `os.replace`.
A full disk, an exception or a `kill -9` therefore leaves the previous good file in place, and a
concurrent reader sees either the old or the new version, never a torn one. A killed writer can
leave a `.tmp-*` sibling behind; nothing ever reads those.

Folders (`atomic_dir`) cannot be replaced in one rename when the target exists: the old folder
is renamed aside first, the new one renamed in, then the old one deleted. If a kill lands
between those two renames, the next `atomic_dir` or `restore_dir` on the same path puts the old
folder back, and readers that find the folder missing can call `restore_dir` themselves.

`save_npz_checked` / `load_npz_checked` add a SHA-256 of the arrays' names, dtypes, shapes and
bytes, so a cache that was truncated or corrupted after it was written (bad disk, a copy cut
short) is detected with an error naming the file instead of being read as wrong numbers.
"""

import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import uuid
import zipfile
from typing import Any, Iterator, Mapping

import numpy as np

PathLike = str | os.PathLike

CHECKSUM_KEY = "__sha256__"


class CorruptArtifactError(ValueError):
  """A saved file is unreadable or does not match its checksum; rebuild it."""


def _sibling(path: pathlib.Path, kind: str) -> pathlib.Path:
  # The target's name stays the suffix, so writers that append an extension (np.save adds
  # ".npy" to names without one) write exactly where they are told.
  return path.with_name(f".{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}-{path.name}")


def _fsync_file(path: pathlib.Path) -> None:
  with open(path, "rb") as f:
    os.fsync(f.fileno())


def _fsync_dir(directory: pathlib.Path) -> None:
  """Makes a rename inside `directory` durable; a no-op where directories cannot be opened."""
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def _remove(path: pathlib.Path) -> None:
  if path.is_dir() and not path.is_symlink():
    shutil.rmtree(path, ignore_errors=True)
  else:
    with contextlib.suppress(FileNotFoundError):
      path.unlink()


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[pathlib.Path]:
  """Yields a temporary sibling of `path` to write; on success it is renamed to `path`.

  On any exception (KeyboardInterrupt included) the temporary file is removed and `path` is
  left as it was. The parent folder is created if needed.
  """
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = _sibling(path, "tmp")
  try:
    yield tmp
    if not tmp.exists():
      raise FileNotFoundError(f"atomic save of {path}: nothing was written to {tmp}")
    _fsync_file(tmp)
    os.replace(tmp, path)
  except BaseException:
    _remove(tmp)
    raise
  _fsync_dir(path.parent)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
  with atomic_path(path) as tmp:
    tmp.write_bytes(data)


def atomic_write_text(path: PathLike, text: str) -> None:
  with atomic_path(path) as tmp:
    tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: PathLike, obj: Any, **dump_kwargs) -> None:
  """`json.dumps(obj, **dump_kwargs)` written atomically (NaN and inf refused: not JSON)."""
  dump_kwargs.setdefault("allow_nan", False)
  atomic_write_text(path, json.dumps(obj, **dump_kwargs) + "\n")


def _aside_folders(path: pathlib.Path) -> list[pathlib.Path]:
  return sorted(path.parent.glob(f".old-*-{path.name}"), key=lambda p: p.stat().st_mtime)


def restore_dir(path: PathLike) -> bool:
  """Puts back a folder that a kill left renamed aside mid-swap; True if it did."""
  path = pathlib.Path(path)
  if path.exists():
    return False
  aside = _aside_folders(path)
  if not aside:
    return False
  os.replace(aside[-1], path)
  _fsync_dir(path.parent)
  return True


def _fsync_tree(root: pathlib.Path) -> None:
  for dirpath, _, filenames in os.walk(root):
    for name in filenames:
      _fsync_file(pathlib.Path(dirpath) / name)
    _fsync_dir(pathlib.Path(dirpath))


@contextlib.contextmanager
def atomic_dir(path: PathLike) -> Iterator[pathlib.Path]:
  """Yields an empty temporary sibling folder to fill; on success it replaces `path`.

  The previous folder at `path` (if any) survives untouched until the new one is complete and
  flushed; on an exception the temporary folder is deleted and `path` is left as it was.
  """
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  restore_dir(path)
  tmp = _sibling(path, "tmp")
  tmp.mkdir()
  try:
    yield tmp
    _fsync_tree(tmp)
  except BaseException:
    _remove(tmp)
    raise
  old = _sibling(path, "old")
  if path.exists():
    os.replace(path, old)
  os.replace(tmp, path)
  _fsync_dir(path.parent)
  _remove(old)
  for stale in _aside_folders(path):  # left by earlier swaps that were killed after the rename in
    _remove(stale)


def _arrays_digest(arrays: Mapping[str, np.ndarray]) -> str:
  h = hashlib.sha256()
  for name in sorted(arrays):
    a = np.ascontiguousarray(arrays[name])
    h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
    h.update(a.tobytes())
  return h.hexdigest()


def save_npz_checked(path: PathLike, arrays: Mapping[str, np.ndarray]) -> None:
  """Saves `arrays` (no object arrays) as an .npz holding their SHA-256, atomically."""
  arrays = {k: np.asarray(v) for k, v in arrays.items()}
  if CHECKSUM_KEY in arrays:
    raise ValueError(f"{path}: the array name {CHECKSUM_KEY!r} is reserved for the checksum")
  for name, a in arrays.items():
    if a.dtype == object:
      raise ValueError(f"{path}: array {name!r} has dtype object, which cannot be saved safely")
  with atomic_path(path) as tmp:
    with open(tmp, "wb") as f:
      np.savez(f, **arrays, **{CHECKSUM_KEY: np.array(_arrays_digest(arrays))})


def load_npz_checked(path: PathLike) -> dict[str, np.ndarray]:
  """The arrays saved by `save_npz_checked`; CorruptArtifactError (naming the file) when the
  file is unreadable, has no checksum or does not match it."""
  path = pathlib.Path(path)
  try:
    with np.load(path, allow_pickle=False) as f:
      arrays = {k: f[k] for k in f.files}
  except FileNotFoundError:
    raise
  except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
    raise CorruptArtifactError(f"{path}: unreadable .npz ({type(e).__name__}: {e}); "
                               "delete it to have it rebuilt") from e
  stored = arrays.pop(CHECKSUM_KEY, None)
  if stored is None:
    raise CorruptArtifactError(f"{path}: no {CHECKSUM_KEY!r} entry; it was not written by "
                               "save_npz_checked (or is from an older version); rebuild it")
  if str(stored) != _arrays_digest(arrays):
    raise CorruptArtifactError(f"{path}: contents do not match the stored SHA-256 checksum "
                               "(truncated or corrupted); delete it to have it rebuilt")
  return arrays
