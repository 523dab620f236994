"""`convert_to_orbax` (launch.convert): NaN weights are refused before anything is written, a
failed conversion (here: the tokenizer save) leaves no output folder and no partial files, and
a good one round-trips."""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import llama, weights

HF_CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=16,
                 hidden_size=8, intermediate_size=12, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                 tie_word_embeddings=True)


def _source(folder, rng, nan_in=None):
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps(HF_CONFIG))
  shapes = weights._hf_expected_shapes(llama.LlamaConfig.from_hf(HF_CONFIG))
  tensors = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
  if nan_in is not None:
    name = sorted(tensors)[nan_in]
    tensors[name].flat[3] = np.nan
  save_file(tensors, str(folder / "model.safetensors"))
  return tensors


def _entries(folder):
  return sorted(p.name for p in folder.iterdir())


def test_good_conversion_round_trips(tmp_path, rng):
  _source(tmp_path / "src", rng)
  out = decoder_lib.convert_to_orbax(tmp_path / "src", tmp_path / "out")
  assert weights.is_orbax(out)
  _, _, want = weights.load(tmp_path / "src")
  _, got = weights.load_orbax(out)
  assert want.keys() == got.keys()
  assert all(np.array_equal(np.asarray(want[k]), np.asarray(got[k])) for k in want)
  assert _entries(tmp_path) == ["out", "src"]  # no temporary siblings left


@pytest.mark.parametrize("which", [0, -1])
def test_nan_weights_refused_before_writing(tmp_path, rng, which):
  _source(tmp_path / "src", rng, nan_in=which)
  with pytest.raises(weights.WeightsError, match="contain NaN or inf.*refusing to convert"):
    decoder_lib.convert_to_orbax(tmp_path / "src", tmp_path / "out")
  assert _entries(tmp_path) == ["src"]


def test_failed_tokenizer_save_leaves_no_output(tmp_path, rng, monkeypatch):
  _source(tmp_path / "src", rng)

  class FailingTokenizer:
    def save(self, folder):
      folder.mkdir()
      (folder / "tokenizer.json").write_text("{")  # half written
      raise OSError(28, "No space left on device")

  monkeypatch.setattr(decoder_lib, "load_tokenizer", lambda *a: FailingTokenizer())
  with pytest.raises(OSError, match="No space left"):
    decoder_lib.convert_to_orbax(tmp_path / "src", tmp_path / "out")
  assert _entries(tmp_path) == ["src"]
  # an existing empty output folder is left as it was
  (tmp_path / "out").mkdir()
  with pytest.raises(OSError):
    decoder_lib.convert_to_orbax(tmp_path / "src", tmp_path / "out")
  assert _entries(tmp_path) == ["out", "src"] and _entries(tmp_path / "out") == []


def test_non_empty_or_file_output_refused(tmp_path, rng):
  _source(tmp_path / "src", rng)
  (tmp_path / "full").mkdir()
  (tmp_path / "full" / "keep.txt").write_text("mine")
  with pytest.raises(FileExistsError, match="not empty"):
    decoder_lib.convert_to_orbax(tmp_path / "src", tmp_path / "full")
  (tmp_path / "file").write_text("x")
  with pytest.raises(FileExistsError, match="is a file"):
    decoder_lib.convert_to_orbax(tmp_path / "src", tmp_path / "file")
  assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
