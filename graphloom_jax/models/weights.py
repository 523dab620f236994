"""Weight loaders for the Llama decoder, streaming tensor by tensor.

Every format opens as a `Checkpoint` (`open_checkpoint`): its config, checked together with
every tensor's name, shape and dtype from the file's own index before any tensor data is read
(every missing, unexpected or mis-shaped tensor is collected and reported in one error), and
`tensors(dtype)`, which then reads the tensors one at a time, each transformed into our
checkpoint layout (`LlamaConfig.param_shapes`, one layer's slice at a time: transposes and
llama.cpp's rotary unpermutation applied) and converted to `dtype` as it is read.
`weights.load_params` places each one into the model's (sharded) parameters as it arrives, so a
load holds one tensor on the host besides the model, never the checkpoint in float32.
`load` / `load_safetensors` / ... gather the stream into a flat {name: np.ndarray} dict (for
conversion and tests).

Sources:
  - Hugging Face safetensors folders (`config.json` + `model.safetensors` or the sharded
    `model.safetensors.index.json`), PyTorch (out, in) layout, any float dtype (bfloat16
    included); tensors are read with plain file reads (no memory map), so only the tensor
    being read is resident;
  - Flax msgpack checkpoints as written by transformers 4.x `FlaxLlamaForCausalLM`
    (`flax_model.msgpack`, Linen (in, out) kernels); msgpack has no index, so this one format
    holds the file in memory while it loads;
  - GGUF files (llama.cpp), dequantised tensor by tensor with the `gguf` package, llama.cpp's
    rotary row permutation of the Q/K projections undone;
  - our own orbax checkpoints (`save_orbax` / `load_orbax`), restored one parameter at a time
    straight into the target dtype.

Checkpoint folders are data: a sharded safetensors index may only name shards inside its folder,
and must agree with what the shards hold (each tensor is read from the shard the index maps it
to, and a tensor found anywhere else is an error, not a silent override by file-name order).
Config values are checked (positive integer sizes, positive finite `rope_theta` and
`rms_norm_eps`), and tensors must hold floats. `save_orbax` refuses NaN/inf weights before
writing and builds the folder beside its target (`atomic.atomic_dir`), so a failed save leaves
no partial checkpoint.
"""

import dataclasses
import errno
import functools
import json
import math
import os
import pathlib
import re
from typing import Any, Callable, Iterable, Iterator, Mapping

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graphloom_jax import atomic
from graphloom_jax import sharding as sharding_lib
from graphloom_jax.models.llama import Llama, abstract_model
from graphloom_jax.models.llama_config import (CHECKPOINT_LAYER_PARAMS, LlamaConfig,
                                              param_shardings)
from graphloom_jax.ops import rope

Array = np.ndarray
# (our checkpoint-layout name, layer index or None for a global parameter, the tensor)
Tensor = tuple[str, int | None, Array]

# Our name -> (HF per-layer name, transform from the HF (out, in) tensor to our layout). Our
# projections keep PyTorch's (out, in) orientation, split into heads: a decode step is a
# matrix-vector product per weight, and contracting each weight's minor (contiguous) axis
# streams it at full memory bandwidth on CPU, where contracting its major axis ran ~1.5x slower.
_HF_LAYER = {
    "attn_norm": ("input_layernorm.weight", lambda w, c: w),
    "wq": ("self_attn.q_proj.weight",
           lambda w, c: w.reshape(c.num_heads, c.head_dim, c.hidden_size)),
    "wk": ("self_attn.k_proj.weight",
           lambda w, c: w.reshape(c.num_kv_heads, c.head_dim, c.hidden_size)),
    "wv": ("self_attn.v_proj.weight",
           lambda w, c: w.reshape(c.num_kv_heads, c.head_dim, c.hidden_size)),
    "wo": ("self_attn.o_proj.weight",
           lambda w, c: w.reshape(c.hidden_size, c.num_heads, c.head_dim)),
    "mlp_norm": ("post_attention_layernorm.weight", lambda w, c: w),
    "w_gate": ("mlp.gate_proj.weight", lambda w, c: w),
    "w_up": ("mlp.up_proj.weight", lambda w, c: w),
    "w_down": ("mlp.down_proj.weight", lambda w, c: w),
}
_HF_GLOBAL = {
    "embed": ("model.embed_tokens.weight", lambda w, c: w),
    "final_norm": ("model.norm.weight", lambda w, c: w),
    "lm_head": ("lm_head.weight", lambda w, c: w),
}
# Buffers some checkpoints carry that hold no parameters.
_IGNORED = re.compile(r".*rotary_emb\.inv_freq$")


class WeightsError(ValueError):
  """A checkpoint cannot be loaded; the message lists every problem found."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  """An opened, checked checkpoint. `tensors(dtype)` reads it: every parameter of our
  checkpoint layout once, layer parameters one layer at a time, each converted to `dtype`."""
  fmt: str
  config: LlamaConfig
  source: str
  tensors: Callable[[Any], Iterator[Tensor]]


def _convert(w, dtype) -> Array:
  return np.ascontiguousarray(w, dtype=dtype)


def _hf_expected_shapes(c: LlamaConfig) -> dict[str, tuple[int, ...]]:
  d, n, k, h, f, v = (c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                      c.intermediate_size, c.vocab_size)
  per_layer = {"input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
               "self_attn.q_proj.weight": (n * h, d), "self_attn.k_proj.weight": (k * h, d),
               "self_attn.v_proj.weight": (k * h, d), "self_attn.o_proj.weight": (d, n * h),
               "mlp.gate_proj.weight": (f, d), "mlp.up_proj.weight": (f, d),
               "mlp.down_proj.weight": (d, f)}
  shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
  if not c.tie_word_embeddings:
    shapes["lm_head.weight"] = (v, d)
  for i in range(c.num_layers):
    for name, shape in per_layer.items():
      shapes[f"model.layers.{i}.{name}"] = shape
  return shapes


def hf_checkpoint(fmt: str, config: LlamaConfig, source: str,
                  shapes: Mapping[str, tuple[int, ...]],
                  read: Callable[[str], Array]) -> Checkpoint:
  """A checkpoint of HF-named tensors (PyTorch layout) given their shapes and a reader of one
  tensor by name; names and shapes are checked here, before anything is read."""
  expected = _hf_expected_shapes(config)
  # Buffers without parameters, and the (identical) head some tied checkpoints still store.
  tolerated = lambda name: bool(_IGNORED.match(name)) or (
      name == "lm_head.weight" and config.tie_word_embeddings)
  problems = shape_problems(expected, shapes, "tensor", tolerated)
  if problems:
    raise WeightsError(f"{source}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))

  def tensors(dtype) -> Iterator[Tensor]:
    for ours, (hf, fn) in _HF_GLOBAL.items():
      if hf in expected:
        yield ours, None, _convert(fn(read(hf), config), dtype)
    for i in range(config.num_layers):
      for ours, (hf, fn) in _HF_LAYER.items():
        yield ours, i, _convert(fn(read(f"model.layers.{i}.{hf}"), config), dtype)

  return Checkpoint(fmt, config, source, tensors)


def gather(checkpoint: Checkpoint, dtype=np.float32) -> dict[str, Array]:
  """The whole checkpoint as a flat {name: array} dict in our (stacked) layout."""
  params = {}
  for name, layer, value in checkpoint.tensors(dtype):
    if layer is None:
      params[name] = value
      continue
    if name not in params:
      params[name] = np.empty((checkpoint.config.num_layers,) + value.shape, value.dtype)
    params[name][layer] = value
  return params


def _require(path: pathlib.Path, what: str) -> pathlib.Path:
  if not path.exists():
    if path.is_symlink():
      try:
        os.stat(path)
      except OSError as e:
        if e.errno == errno.ELOOP:
          raise WeightsError(f"{what} {path} is a symlink loop") from None
      raise FileNotFoundError(f"{what} not found: {path} is a broken symlink")
    raise FileNotFoundError(f"{what} not found: {path}")
  return path


def _read_json_object(path: pathlib.Path) -> dict:
  try:
    obj = json.loads(path.read_text(encoding="utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
    raise WeightsError(f"{path}: not valid JSON ({e})") from None
  if not isinstance(obj, dict):
    raise WeightsError(f"{path}: expected a JSON object, got {type(obj).__name__}")
  return obj


def _positive_int_problems(values: Mapping[str, Any], keys) -> list[str]:
  return [f"{k!r} must be a positive integer, got {values[k]!r}" for k in keys
          if values.get(k) is not None and (isinstance(values[k], bool)
                                            or not isinstance(values[k], int) or values[k] < 1)]


def _positive_float_problems(values: Mapping[str, Any], keys) -> list[str]:
  return [f"{k!r} must be a finite number > 0, got {values[k]!r}" for k in keys
          if values.get(k) is not None and (isinstance(values[k], bool)
                                            or not isinstance(values[k], (int, float))
                                            or not math.isfinite(values[k]) or values[k] <= 0)]


def _raise_problems(source, problems: list[str]):
  if problems:
    raise WeightsError(f"{source}: " + "; ".join(problems))


def check_config(config: LlamaConfig, source: str) -> LlamaConfig:
  """Refuses sizes that are not positive integers and non-positive rope_theta/rms_norm_eps."""
  values = vars(config)
  _raise_problems(source, _positive_int_problems(values, (
      "vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
      "num_kv_heads", "head_dim", "max_position_embeddings")) + _positive_float_problems(
          values, ("rope_theta", "rms_norm_eps")))
  return config


def read_hf_config(folder: str | os.PathLike) -> LlamaConfig:
  path = _require(pathlib.Path(folder) / "config.json", "model config")
  hf = _read_json_object(path)
  # Checked before LlamaConfig.from_hf, whose int() would turn 300.7 into 300 silently.
  _raise_problems(path, _positive_int_problems(hf, (
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"))
                  + _positive_float_problems(hf, ("rope_theta", "rms_norm_eps")))
  return check_config(LlamaConfig.from_hf(hf, source=str(path)), str(path))


def _float_tensor_problems(dtypes: Mapping[str, Any]) -> list[str]:
  """dtypes: {tensor name: numpy dtype}."""
  return [f"tensor {k!r} has dtype {np.dtype(v)}, expected floating point" for k, v in
          sorted(dtypes.items()) if not jnp.issubdtype(v, jnp.floating)]


def _shard_paths(folder: pathlib.Path) -> dict[str, list[str]]:
  """{shard file name: tensor names the index maps to it}; ["model.safetensors"] unsharded."""
  index = folder / "model.safetensors.index.json"
  if not index.exists():
    return {"model.safetensors": None}
  weight_map = _read_json_object(index).get("weight_map")
  if not isinstance(weight_map, dict) or not all(
      isinstance(k, str) and isinstance(v, str) and v for k, v in weight_map.items()):
    raise WeightsError(f"{index}: weight_map must map tensor names to shard file names, got "
                       f"{type(weight_map).__name__}")
  root = folder.resolve()
  problems, shards = [], {}
  for tensor, shard in weight_map.items():
    if os.path.isabs(shard) or not (folder / shard).resolve().is_relative_to(root):
      problems.append(f"shard {shard!r} of tensor {tensor!r} resolves outside the checkpoint "
                      f"folder {folder}")
    shards.setdefault(shard, []).append(tensor)
  if problems:
    raise WeightsError(f"{index}: refusing the weight map: " + "; ".join(problems[:5]))
  return shards


_SAFETENSORS_DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64,
    "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
    "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F32": np.float32, "F64": np.float64}
_MAX_SAFETENSORS_HEADER = 100 << 20


class SafetensorsFile:
  """The index of one safetensors file (8-byte header length, JSON header, raw little-endian
  data), checked against the file's size; `read` reads one tensor with a plain file read, so
  nothing but that tensor becomes resident (a memory map would keep every page it touched
  mapped until closed)."""

  def __init__(self, path: pathlib.Path):
    self.path = path
    size = path.stat().st_size
    with open(path, "rb") as f:
      head = f.read(8)
      if len(head) < 8:
        self._corrupt(f"{size} bytes, shorter than the 8-byte header length")
      n = int.from_bytes(head, "little")
      if n > min(size - 8, _MAX_SAFETENSORS_HEADER):
        self._corrupt(f"header length {n} exceeds the file's {size} bytes")
      try:
        header = json.loads(f.read(n))
      except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        self._corrupt(f"header is not valid JSON ({e})")
    if not isinstance(header, dict):
      self._corrupt(f"header is a JSON {type(header).__name__}, expected an object")
    header.pop("__metadata__", None)
    self._start, data_size = 8 + n, size - 8 - n
    self.entries = {}  # name -> (numpy dtype, shape, byte offset in the data)
    for name, e in header.items():
      try:
        dtype = np.dtype(_SAFETENSORS_DTYPES[e["dtype"]])
        shape = tuple(int(x) for x in e["shape"])
        begin, end = (int(x) for x in e["data_offsets"])
      except (KeyError, TypeError, ValueError) as err:
        self._corrupt(f"tensor {name!r} has a malformed entry {e!r} ({type(err).__name__})")
      if min(shape, default=0) < 0 or not 0 <= begin <= end <= data_size or (
          end - begin != math.prod(shape) * dtype.itemsize):
        self._corrupt(f"tensor {name!r} ({e['dtype']} {list(shape)}) claims bytes "
                      f"[{begin}, {end}) of a data section of {data_size} bytes")
      self.entries[name] = (dtype, shape, begin)

  def _corrupt(self, detail: str):
    raise WeightsError(f"{self.path}: cannot read safetensors file (truncated or corrupt?): "
                       f"{detail}")

  def read(self, name: str) -> Array:
    dtype, shape, begin = self.entries[name]
    count = math.prod(shape)
    with open(self.path, "rb") as f:
      f.seek(self._start + begin)
      out = np.fromfile(f, dtype=dtype.newbyteorder("<"), count=count)
    if out.size != count:
      self._corrupt(f"tensor {name!r} is cut short")
    return out.astype(dtype, copy=False).reshape(shape)


def open_safetensors(folder: str | os.PathLike) -> Checkpoint:
  """A Hugging Face folder with a single or sharded safetensors checkpoint."""
  folder = pathlib.Path(folder)
  config = read_hf_config(folder)
  shards = _shard_paths(folder)
  problems, where = [], {}
  mapped_to = {t: shard for shard, names in shards.items() for t in (names or ())}
  for shard, names in sorted(shards.items()):
    path = _require(folder / shard, "safetensors shard")
    try:
      f = SafetensorsFile(path)
    except OSError as e:
      raise WeightsError(f"{path}: cannot read safetensors file (truncated or corrupt?): "
                         f"{e}") from None
    held = set(f.entries)
    if names is not None:
      problems += [f"tensor {t!r} is in {shard} but the index maps it to "
                   f"{mapped_to.get(t, 'no shard')}" for t in sorted(held - set(names))]
      problems += [f"tensor {t!r} is mapped to {shard}, which lacks it"
                   for t in sorted(set(names) - held)]
    for t in sorted(held if names is None else held & set(names)):
      where[t] = f
  problems += _float_tensor_problems({t: f.entries[t][0] for t, f in where.items()})
  if problems:
    raise WeightsError(f"{folder}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))
  return hf_checkpoint("safetensors", config, str(folder),
                       {t: f.entries[t][1] for t, f in where.items()},
                       lambda t: where[t].read(t))


def open_flax_msgpack(folder: str | os.PathLike) -> Checkpoint:
  """A transformers 4.x `FlaxLlamaForCausalLM` folder (`config.json` + `flax_model.msgpack`)."""
  from flax import serialization, traverse_util

  folder = pathlib.Path(folder)
  config = read_hf_config(folder)
  path = _require(folder / "flax_model.msgpack", "Flax checkpoint")
  try:
    tree = serialization.msgpack_restore(path.read_bytes())
  except Exception as e:  # msgpack raises several unrelated types on corrupt input
    raise WeightsError(f"{path}: cannot read Flax msgpack checkpoint: {e}") from None
  flat = traverse_util.flatten_dict(tree, sep=".")
  if any(k.startswith("params.") for k in flat):
    flat = {k[len("params."):]: v for k, v in flat.items() if k.startswith("params.")}
  flat = {k: np.asarray(v) for k, v in flat.items()}
  problems = _float_tensor_problems({k: v.dtype for k, v in flat.items()})
  if problems:
    raise WeightsError(f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))
  tensors = {}
  for key, value in flat.items():
    if key.endswith(".kernel"):  # Linen Dense kernels are (in, out)
      tensors[key[:-len("kernel")] + "weight"] = value.T
    elif key.endswith(".embedding"):
      tensors[key[:-len("embedding")] + "weight"] = value
    else:
      tensors[key] = value
  return hf_checkpoint("flax_msgpack", config, str(path),
                       {k: v.shape for k, v in tensors.items()}, tensors.__getitem__)


def _gguf_field(reader, key, default=None):
  field = reader.fields.get(key)
  return default if field is None else field.contents()


def _unpermute_rotary(w: Array, n_head: int) -> Array:
  """Undoes llama.cpp's interleaving of Q/K rows for its rotary layout."""
  rows, cols = w.shape
  return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def gguf_config(reader, source: str) -> LlamaConfig:
  arch = _gguf_field(reader, "general.architecture")
  if arch != "llama":
    raise WeightsError(f"{source}: unsupported GGUF architecture {arch!r} (expected 'llama')")
  p = "llama."
  missing = [k for k in ("block_count", "embedding_length", "feed_forward_length",
                         "attention.head_count") if _gguf_field(reader, p + k) is None]
  if missing:
    raise WeightsError(f"{source}: GGUF metadata lacks {[p + k for k in missing]}")
  heads = int(_gguf_field(reader, p + "attention.head_count"))
  width = int(_gguf_field(reader, p + "embedding_length"))
  tokens = _gguf_field(reader, "tokenizer.ggml.tokens")
  vocab = _gguf_field(reader, p + "vocab_size") or (len(tokens) if tokens else None)
  names = {t.name for t in reader.tensors}
  eos = _gguf_field(reader, "tokenizer.ggml.eos_token_id")
  scaling = None
  if _gguf_field(reader, p + "rope.scaling.type") == "linear":
    scaling = (("factor", float(_gguf_field(reader, p + "rope.scaling.factor"))),
               ("rope_type", "linear"))
  return LlamaConfig(
      vocab_size=int(vocab), hidden_size=width,
      intermediate_size=int(_gguf_field(reader, p + "feed_forward_length")),
      num_layers=int(_gguf_field(reader, p + "block_count")), num_heads=heads,
      num_kv_heads=int(_gguf_field(reader, p + "attention.head_count_kv", heads)),
      head_dim=int(_gguf_field(reader, p + "rope.dimension_count", width // heads)),
      rope_theta=float(_gguf_field(reader, p + "rope.freq_base", 10000.0)),
      rope_scaling=scaling,
      rms_norm_eps=float(_gguf_field(reader, p + "attention.layer_norm_rms_epsilon", 1e-5)),
      tie_word_embeddings="output.weight" not in names,
      max_position_embeddings=int(_gguf_field(reader, p + "context_length", 2048)),
      bos_token_id=_gguf_field(reader, "tokenizer.ggml.bos_token_id"),
      eos_token_ids=() if eos is None else (int(eos),))


_GGUF_TO_HF = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_GGUF_LAYER_TO_HF = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def open_gguf(path: str | os.PathLike):
  import gguf

  path = _require(pathlib.Path(path), "GGUF file")
  try:
    return gguf.GGUFReader(str(path))
  except Exception as e:  # the reader raises ValueError/IndexError/struct errors when truncated
    raise WeightsError(f"{path}: cannot read GGUF file (truncated or corrupt?): "
                       f"{type(e).__name__}: {e}") from None


def open_gguf_checkpoint(path: str | os.PathLike) -> Checkpoint:
  """A llama.cpp GGUF file (any quantisation the `gguf` package dequantises)."""
  import gguf

  reader = open_gguf(path)
  config = gguf_config(reader, str(path))
  layer_re = re.compile(r"blk\.(\d+)\.(\w+)\.weight$")
  found = {}  # HF name -> (GGUF tensor, heads to unpermute or 0)
  for t in reader.tensors:
    m = layer_re.match(t.name)
    if m and m.group(2) in _GGUF_LAYER_TO_HF:
      kind = m.group(2)
      heads = {"attn_q": config.num_heads, "attn_k": config.num_kv_heads}.get(kind, 0)
      found[f"model.layers.{m.group(1)}.{_GGUF_LAYER_TO_HF[kind]}.weight"] = (t, heads)
    else:
      found[_GGUF_TO_HF.get(t.name, t.name)] = (t, 0)

  def read(name: str) -> Array:
    t, heads = found[name]
    try:
      w = gguf.quants.dequantize(t.data, t.tensor_type)
    except Exception as e:
      raise WeightsError(f"{path}: cannot dequantise tensor {t.name!r} "
                         f"({t.tensor_type.name}): {e}") from None
    return _unpermute_rotary(w, heads) if heads else w

  # GGUF lists dimensions innermost first.
  shapes = {k: tuple(int(x) for x in reversed(t.shape)) for k, (t, _) in found.items()}
  return hf_checkpoint("gguf", config, str(path), shapes, read)


ORBAX_CONFIG = "llama_config.json"
ORBAX_PARAMS = "params"
ORBAX_TOKENIZER = "tokenizer"


def save_orbax(folder: str | os.PathLike, config: LlamaConfig, params: Mapping[str, Array]):
  """Writes our layout as an orbax checkpoint plus the config (tokenizer saved by the caller)."""
  import orbax.checkpoint as ocp

  folder = pathlib.Path(folder).absolute()
  check_config(config, f"config for {folder}")
  params = {k: np.asarray(v) for k, v in params.items()}
  bad = [k for k, v in sorted(params.items()) if not np.isfinite(v).all()]
  if bad:
    raise WeightsError(f"refusing to save {folder}: parameter(s) {bad[:5]} contain NaN or inf "
                       f"({len(bad)} in all); nothing was written")
  with atomic.atomic_dir(folder) as tmp:
    (tmp / ORBAX_CONFIG).write_text(config.to_json())
    with ocp.StandardCheckpointer() as ckpt:
      ckpt.save(tmp / ORBAX_PARAMS, params, force=True)


def is_orbax(path: str | os.PathLike) -> bool:
  path = pathlib.Path(path)
  return (path / ORBAX_CONFIG).exists() and (path / ORBAX_PARAMS).exists()


def open_orbax(folder: str | os.PathLike) -> Checkpoint:
  """Our own orbax checkpoint; parameters are restored one at a time in the target dtype."""
  import orbax.checkpoint as ocp

  folder = pathlib.Path(folder).absolute()
  config_path = _require(folder / ORBAX_CONFIG, "graphloom_jax config")
  try:
    config = LlamaConfig.from_dict(_read_json_object(config_path))
  except TypeError as e:
    raise WeightsError(f"{config_path}: not a graphloom_jax Llama config ({e})") from None
  check_config(config, str(config_path))
  path = folder / ORBAX_PARAMS
  try:
    metadata = ocp.PyTreeCheckpointer().metadata(path)
    metadata = getattr(metadata, "item_metadata", metadata)
    stored = {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in metadata.items()}
  except Exception as e:  # orbax surfaces tensorstore/OS errors of many kinds
    raise WeightsError(f"{path}: cannot restore orbax checkpoint: {e}") from None
  problems = shape_problems(config.param_shapes(), {k: s for k, (s, _) in stored.items()},
                            "parameter") + [
      p.replace("tensor", "parameter", 1)
      for p in _float_tensor_problems({k: d for k, (_, d) in stored.items()})]
  if problems:
    raise WeightsError(
        f"{folder}: {len(problems)} problem(s) against its own config (projection weights are "
        "stored (out, in); a checkpoint converted by an older graphloom_jax must be converted "
        "again with launch/convert.py):\n  " + "\n  ".join(problems))

  def tensors(dtype) -> Iterator[Tensor]:
    checkpointer = ocp.PyTreeCheckpointer()
    for name in config.param_shapes():
      try:
        value = checkpointer.restore(path, args=ocp.args.PyTreeRestore(
            item={name: 0}, partial_restore=True,
            restore_args={name: ocp.RestoreArgs(restore_type=np.ndarray,
                                                dtype=np.dtype(dtype))}))[name]
      except Exception as e:
        raise WeightsError(f"{path}: cannot restore parameter {name!r}: {e}") from None
      if name in CHECKPOINT_LAYER_PARAMS:
        for i in range(config.num_layers):
          yield name, i, value[i]
      else:
        yield name, None, value

  return Checkpoint("orbax", config, str(folder), tensors)


def detect_format(path: str | os.PathLike) -> str:
  """One of "gguf", "orbax", "safetensors", "flax_msgpack"; a clear error otherwise."""
  path = _require(pathlib.Path(path), "weights")
  if path.is_file():
    if path.suffix == ".gguf":
      return "gguf"
    raise WeightsError(f"{path}: a weights file must be .gguf; folders hold safetensors, "
                       "flax_model.msgpack or orbax checkpoints")
  found = {}
  if is_orbax(path):
    found["orbax"] = f"{ORBAX_CONFIG} + {ORBAX_PARAMS}/"
  for name in ("model.safetensors.index.json", "model.safetensors"):
    if (path / name).exists():
      found.setdefault("safetensors", name)
  if (path / "flax_model.msgpack").exists():
    found["flax_msgpack"] = "flax_model.msgpack"
  ggufs = sorted(p.name for p in path.glob("*.gguf"))
  if ggufs and found:
    raise WeightsError(f"{path}: ambiguous, the folder holds {sorted(found.values())} and GGUF "
                       f"file(s) {ggufs}; pass the folder only without the GGUF files, or the "
                       f"GGUF file itself ({path / ggufs[0]})")
  if ggufs:
    raise WeightsError(f"{path}: the folder holds GGUF file(s) {ggufs}; pass the file itself "
                       f"({path / ggufs[0]})")
  if len(found) > 1:
    raise WeightsError(f"{path}: ambiguous, the folder holds checkpoints in several formats "
                       f"{sorted(found.values())}; keep one")
  if found:
    return next(iter(found))
  raise WeightsError(f"{path}: no model.safetensors(.index.json), flax_model.msgpack or orbax "
                     f"checkpoint ({ORBAX_CONFIG} + {ORBAX_PARAMS}/) in this folder")


OPENERS: dict[str, Callable[[Any], Checkpoint]] = {
    "gguf": open_gguf_checkpoint, "orbax": open_orbax, "safetensors": open_safetensors,
    "flax_msgpack": open_flax_msgpack}


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
  """Any supported checkpoint, opened and checked (nothing but headers read yet)."""
  return OPENERS[detect_format(path)](path)


def load(path: str | os.PathLike) -> tuple[str, LlamaConfig, dict[str, Array]]:
  """The whole checkpoint in float32 as a flat dict (conversion; loading a model streams)."""
  checkpoint = open_checkpoint(path)
  return checkpoint.fmt, checkpoint.config, gather(checkpoint)


def load_safetensors(folder: str | os.PathLike) -> tuple[LlamaConfig, dict[str, Array]]:
  checkpoint = open_safetensors(folder)
  return checkpoint.config, gather(checkpoint)


def load_orbax(folder: str | os.PathLike) -> tuple[LlamaConfig, dict[str, Array]]:
  checkpoint = open_orbax(folder)
  return checkpoint.config, gather(checkpoint)


# ------------------------------------------------------------------ into the model's layout

def _placed(sharding) -> dict[str, Any]:
  return {} if sharding is None else {"out_shardings": sharding}


@functools.cache
def _zeros(shape, dtype, sharding):
  return jax.jit(lambda: jnp.zeros(shape, dtype), **_placed(sharding))


@functools.cache
def _write_slot(sharding):
  """stack, value, start -> stack with value written at start (in place: the stack is
  donated)."""
  return jax.jit(lambda stack, value, start: jax.lax.dynamic_update_slice(stack, value, start),
                 donate_argnums=0, **_placed(sharding))


def load_params(config: LlamaConfig, tensors: Iterable[tuple[str, int | None, Any]],
                dtype=jnp.float32, mesh: jax.sharding.Mesh | None = None,
                source: str = "weights") -> Llama:
  """The model from a stream of `(name, layer or None, array)` in our checkpoint layout (a
  `weights.Checkpoint`'s tensors): each array is checked finite, converted to `dtype` and
  placed with `jax.device_put` under its parameter's sharding (`param_shardings(config, mesh)`;
  the default device without a mesh) as it arrives, a layer's tensor written into its slot of
  the fused stack (`LlamaConfig.checkpoint_slots`) in place, so the host holds one tensor at a
  time besides the model."""
  shapes = config.model_shapes()
  mesh = sharding_lib.auto_axes(mesh)
  shardings = param_shardings(config, mesh) if mesh is not None else dict.fromkeys(shapes)
  slots = config.checkpoint_slots()
  np_dtype = jnp.dtype(dtype)
  params, seen = {}, set()
  for name, layer, value in tensors:
    value = np.asarray(value, dtype=np_dtype)
    if not np.all(np.isfinite(value)):
      where = "" if layer is None else f" (layer {layer})"
      raise ValueError(f"{source}: parameter {name!r} contains NaN or Inf{where}")
    seen.add((name, layer))
    if layer is None:
      params[name] = jax.device_put(value, shardings[name])
      continue
    target, start, shape = slots[name]
    sharding = shardings[target]
    if target not in params:
      params[target] = _zeros(shapes[target], np_dtype, sharding)()
    params[target] = _write_slot(sharding)(
        params[target], jax.device_put(value.reshape((1,) + shape), sharding),
        (layer,) + start)
  expected = {(name, i) for name in config.param_shapes() for i in (
      range(config.num_layers) if name in CHECKPOINT_LAYER_PARAMS else (None,))}
  if expected - seen:
    raise ValueError(f"{source}: no values for {sorted(expected - seen, key=str)[:5]}")
  model = abstract_model(config, dtype)
  for name, value in params.items():
    getattr(model, name).value = value
  inv_freq = rope.inverse_frequencies(config.head_dim, config.rope_theta, config.scaling)
  model.inv_freq.value = (jnp.asarray(inv_freq) if mesh is None else
                          jax.device_put(inv_freq, NamedSharding(mesh, P())))
  return model


def shape_problems(expected: Mapping[str, tuple[int, ...]],
                   shapes: Mapping[str, tuple[int, ...]], kind: str,
                   tolerated=lambda name: False) -> list[str]:
  """Every missing, mis-shaped and unexpected entry of `shapes` against `expected` (both
  {name: shape}); `tolerated(name)` exempts extra entries a checkpoint may carry."""
  problems = []
  for name, shape in expected.items():
    if name not in shapes:
      problems.append(f"missing {kind} {name!r} (expected shape {shape})")
    elif tuple(shapes[name]) != tuple(shape):
      problems.append(f"{kind} {name!r} has shape {tuple(shapes[name])}, "
                      f"config expects {tuple(shape)}")
  problems += [f"unexpected {kind} {name!r}" for name in shapes
               if name not in expected and not tolerated(name)]
  return problems


def from_params(config: LlamaConfig, params: Mapping[str, np.ndarray], dtype=jnp.float32,
                source: str = "weights", mesh: jax.sharding.Mesh | None = None) -> Llama:
  """Builds a model from a flat {name: array} dict in our layout; checks names and shapes and
  reports every problem at once."""
  problems = shape_problems(config.param_shapes(), {k: np.shape(v) for k, v in params.items()},
                            "parameter")
  if problems:
    raise ValueError(f"{source}: {len(problems)} problem(s) loading weights:\n  " +
                     "\n  ".join(problems))

  def tensors():
    for name, value in params.items():
      if name in CHECKPOINT_LAYER_PARAMS:
        yield from ((name, i, value[i]) for i in range(config.num_layers))
      else:
        yield name, None, value

  return load_params(config, tensors(), dtype, mesh, source)
