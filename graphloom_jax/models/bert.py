"""BERT encoder in Flax NNX (the math lives in `graphloom_jax.ops.bert_ops`) and a strict loader
for Hugging Face / sentence-transformers BERT folders (config.json + model.safetensors).

Shapes: B batch, T tokens, D model width, N heads, F MLP width, V vocabulary, P positions.

Weights are kept in (in, out) layout so that `x @ w` applies them; the query, key and value
projections are stored side by side as one [D, 3D] matrix so each layer does one projection
matmul instead of three. The loader checks every tensor of the checkpoint against the shapes the
config implies and raises once with the whole list of problems.
"""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphloom_jax.ops import bert_ops

# Tensors a BertModel checkpoint may carry that the sentence encoder does not use: the
# position-id buffer and the [CLS] pooler (sentence-transformers pools by mean instead).
IGNORED_KEYS = frozenset({"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"})


class WeightLoadError(ValueError):
  """A checkpoint that does not match its config; the message lists every problem."""


@dataclasses.dataclass(frozen=True)
class BertConfig:
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  max_position: int
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @classmethod
  def from_hf(cls, d: dict, source: str = "config") -> "BertConfig":
    """From a Hugging Face BERT config.json dict; `source` names the file in errors."""
    required = {"vocab_size": "vocab_size", "hidden_size": "hidden_size",
                "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
                "intermediate_size": "intermediate_size",
                "max_position": "max_position_embeddings"}
    missing = [k for k in required.values() if k not in d]
    if missing:
      raise ValueError(f"{source}: missing BERT config keys {missing}")
    if d.get("model_type", "bert") != "bert":
      raise ValueError(f"{source}: model_type is {d['model_type']!r}, expected 'bert'")
    if d.get("hidden_act", "gelu") != "gelu":
      raise ValueError(f"{source}: hidden_act is {d['hidden_act']!r}; only exact 'gelu' "
                       "(BERT's default) is implemented")
    if d.get("position_embedding_type", "absolute") != "absolute":
      raise ValueError(f"{source}: position_embedding_type is "
                       f"{d['position_embedding_type']!r}; only 'absolute' is implemented")
    cfg = cls(**{ours: int(d[theirs]) for ours, theirs in required.items()},
              type_vocab_size=int(d.get("type_vocab_size", 2)),
              layer_norm_eps=float(d.get("layer_norm_eps", 1e-12)))
    if cfg.hidden_size % cfg.num_heads:
      raise ValueError(f"{source}: hidden_size {cfg.hidden_size} is not a multiple of "
                       f"num_attention_heads {cfg.num_heads}")
    return cfg


def _param(rngs: nnx.Rngs, shape, scale: float = 0.02):
  return nnx.Param(scale * jax.random.normal(rngs.params(), shape, jnp.float32))


def _ones(shape):
  return nnx.Param(jnp.ones(shape, jnp.float32))


def _zeros(shape):
  return nnx.Param(jnp.zeros(shape, jnp.float32))


LAYER_PARAMS = ("wqkv", "bqkv", "wo", "bo", "ln1_scale", "ln1_bias", "w_in", "b_in", "w_out",
                "b_out", "ln2_scale", "ln2_bias")


class BertLayer(nnx.Module):

  def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
    d, f = cfg.hidden_size, cfg.intermediate_size
    self.num_heads = cfg.num_heads
    self.eps = cfg.layer_norm_eps
    self.wqkv = _param(rngs, (d, 3 * d))
    self.bqkv = _zeros((3 * d,))
    self.wo = _param(rngs, (d, d))
    self.bo = _zeros((d,))
    self.ln1_scale = _ones((d,))
    self.ln1_bias = _zeros((d,))
    self.w_in = _param(rngs, (d, f))
    self.b_in = _zeros((f,))
    self.w_out = _param(rngs, (f, d))
    self.b_out = _zeros((d,))
    self.ln2_scale = _ones((d,))
    self.ln2_bias = _zeros((d,))

  def __call__(self, x, mask):
    """x [B, T, D], mask [B, T] or [B, T, T] bool (see bert_ops) -> [B, T, D]."""
    p = {name: getattr(self, name)[...] for name in LAYER_PARAMS}
    return bert_ops.encoder_layer(x, mask, p, self.num_heads, self.eps)


class BertEncoder(nnx.Module):
  """Token ids -> final hidden states of every token."""

  def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d = cfg.hidden_size
    self.word = _param(rngs, (cfg.vocab_size, d))
    self.position = _param(rngs, (cfg.max_position, d))
    self.token_type = _param(rngs, (cfg.type_vocab_size, d))
    self.emb_ln_scale = _ones((d,))
    self.emb_ln_bias = _zeros((d,))
    self.layers = nnx.List([BertLayer(cfg, rngs=rngs) for _ in range(cfg.num_layers)])

  def __call__(self, ids, mask, type_ids=None, positions=None):
    """ids [B, T] int; mask [B, T] bool, or [B, T, T] (query, key) for packed rows; type_ids
    [B, T] int or None; positions [B, T] int or None (0..T-1) -> hidden [B, T, D]."""
    if ids.shape[1] > self.cfg.max_position:
      raise ValueError(f"sequence length {ids.shape[1]} exceeds max_position "
                       f"{self.cfg.max_position}")
    x = bert_ops.embed(ids, self.word[...], self.position[...], self.token_type[...],
                       self.emb_ln_scale[...], self.emb_ln_bias[...], self.cfg.layer_norm_eps,
                       type_ids, positions)
    for layer in self.layers:
      x = layer(x, mask)
    return x


def hf_shapes(cfg: BertConfig) -> dict[str, tuple[int, ...]]:
  """Every tensor a Hugging Face BertModel checkpoint must hold, with its (out, in) shape."""
  d, f = cfg.hidden_size, cfg.intermediate_size
  s = {
      "embeddings.word_embeddings.weight": (cfg.vocab_size, d),
      "embeddings.position_embeddings.weight": (cfg.max_position, d),
      "embeddings.token_type_embeddings.weight": (cfg.type_vocab_size, d),
      "embeddings.LayerNorm.weight": (d,),
      "embeddings.LayerNorm.bias": (d,),
  }
  for i in range(cfg.num_layers):
    p = f"encoder.layer.{i}."
    for proj in ("query", "key", "value"):
      s[f"{p}attention.self.{proj}.weight"] = (d, d)
      s[f"{p}attention.self.{proj}.bias"] = (d,)
    s[f"{p}attention.output.dense.weight"] = (d, d)
    s[f"{p}attention.output.dense.bias"] = (d,)
    s[f"{p}attention.output.LayerNorm.weight"] = (d,)
    s[f"{p}attention.output.LayerNorm.bias"] = (d,)
    s[f"{p}intermediate.dense.weight"] = (f, d)
    s[f"{p}intermediate.dense.bias"] = (f,)
    s[f"{p}output.dense.weight"] = (d, f)
    s[f"{p}output.dense.bias"] = (d,)
    s[f"{p}output.LayerNorm.weight"] = (d,)
    s[f"{p}output.LayerNorm.bias"] = (d,)
  return s


def read_config(folder: pathlib.Path) -> BertConfig:
  path = folder / "config.json"
  try:
    d = json.loads(path.read_text())
  except FileNotFoundError:
    raise FileNotFoundError(f"{path}: BERT config.json not found") from None
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: invalid JSON ({e})") from None
  if not isinstance(d, dict):
    raise ValueError(f"{path}: expected a JSON object, got {type(d).__name__}")
  return BertConfig.from_hf(d, source=str(path))


def read_safetensors(path: pathlib.Path, cfg: BertConfig) -> dict[str, np.ndarray]:
  """The checkpoint's tensors (float32, HF names without a `bert.` prefix), checked against
  `cfg`: missing keys, unexpected keys and shape mismatches are all reported in one error."""
  from safetensors import SafetensorError
  from safetensors.numpy import load_file

  if not path.is_file():
    raise FileNotFoundError(f"{path}: model.safetensors not found")
  try:
    raw = load_file(str(path))
  except (SafetensorError, OSError, ValueError) as e:
    raise WeightLoadError(f"{path}: unreadable safetensors file ({e})") from None
  if raw and all(k.startswith("bert.") for k in raw if k not in IGNORED_KEYS):
    raw = {k.removeprefix("bert."): v for k, v in raw.items()}
  expected = hf_shapes(cfg)
  problems = [f"missing key {k} (expected shape {s})" for k, s in expected.items() if k not in raw]
  problems += [f"unexpected key {k} (shape {tuple(v.shape)})" for k, v in raw.items()
               if k not in expected and k not in IGNORED_KEYS]
  problems += [f"shape mismatch for {k}: file has {tuple(raw[k].shape)}, config implies {s}"
               for k, s in expected.items() if k in raw and tuple(raw[k].shape) != s]
  problems += [f"non-float dtype {raw[k].dtype} for {k}" for k in expected
               if k in raw and not np.issubdtype(raw[k].dtype, np.floating)]
  if problems:
    raise WeightLoadError(f"{path}: {len(problems)} problem(s) against {path.parent}/config.json:"
                          "\n  " + "\n  ".join(problems))
  return {k: np.asarray(raw[k], np.float32) for k in expected}


def encoder_from_hf(cfg: BertConfig, t: dict[str, np.ndarray]) -> BertEncoder:
  """Builds a BertEncoder from checked Hugging Face tensors (see read_safetensors)."""
  model = nnx.eval_shape(lambda: BertEncoder(cfg, rngs=nnx.Rngs(0)))

  def put(var, value):
    var.set_value(jnp.asarray(value, jnp.float32))

  put(model.word, t["embeddings.word_embeddings.weight"])
  put(model.position, t["embeddings.position_embeddings.weight"])
  put(model.token_type, t["embeddings.token_type_embeddings.weight"])
  put(model.emb_ln_scale, t["embeddings.LayerNorm.weight"])
  put(model.emb_ln_bias, t["embeddings.LayerNorm.bias"])
  for i, layer in enumerate(model.layers):
    p = f"encoder.layer.{i}."
    a = p + "attention."
    # PyTorch Linear weights are (out, in); ours are (in, out).
    put(layer.wqkv, np.concatenate(
        [t[f"{a}self.{n}.weight"].T for n in ("query", "key", "value")], axis=1))
    put(layer.bqkv, np.concatenate([t[f"{a}self.{n}.bias"] for n in ("query", "key", "value")]))
    put(layer.wo, t[a + "output.dense.weight"].T)
    put(layer.bo, t[a + "output.dense.bias"])
    put(layer.ln1_scale, t[a + "output.LayerNorm.weight"])
    put(layer.ln1_bias, t[a + "output.LayerNorm.bias"])
    put(layer.w_in, t[p + "intermediate.dense.weight"].T)
    put(layer.b_in, t[p + "intermediate.dense.bias"])
    put(layer.w_out, t[p + "output.dense.weight"].T)
    put(layer.b_out, t[p + "output.dense.bias"])
    put(layer.ln2_scale, t[p + "output.LayerNorm.weight"])
    put(layer.ln2_bias, t[p + "output.LayerNorm.bias"])
  return model


def load_bert(folder: str | pathlib.Path) -> BertEncoder:
  """A BertEncoder from a folder holding config.json and model.safetensors."""
  folder = pathlib.Path(folder)
  cfg = read_config(folder)
  return encoder_from_hf(cfg, read_safetensors(folder / "model.safetensors", cfg))
