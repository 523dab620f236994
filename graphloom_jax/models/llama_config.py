"""The Llama architecture: `LlamaConfig` (its Hugging Face mapping, `from_hf`), the parameter
layout (`LlamaConfig.model_shapes`: the fused, stacked layout every path shares;
`param_shapes`: a checkpoint's one tensor per projection) and how each parameter is split over
a ("data", "model") mesh (`PARTITIONS`, `param_shardings`). models/llama.py is the forward and
the cache; models/weights.py reads checkpoints into this layout.
"""

import dataclasses
import json
from typing import Any, Mapping

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

LAYER_PARAMS = ("attn_norm", "wqkv", "wo", "mlp_norm", "w_gate_up", "w_down")


# A checkpoint's per-layer tensors (`LlamaConfig.param_shapes`).
CHECKPOINT_LAYER_PARAMS = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up",
                           "w_down")


# How each parameter is split over a ("data", "model") mesh: Megatron's tensor parallelism on
# "model" (column-parallel Q/K/V and gate/up, each device holding whole kv groups and MLP rows;
# row-parallel output and down projections, whose partial sums XLA all-reduces; vocabulary-
# parallel embedding and head), everything replicated over "data".
PARTITIONS = {
    "embed": P("model", None),  # [V, D]
    "attn_norm": P(),  # [L, D]
    "wqkv": P(None, "model"),  # [L, K, G + 2, H, D]
    "wo": P(None, None, "model"),  # [L, D, N, H]
    "mlp_norm": P(),  # [L, D]
    "w_gate_up": P(None, "model"),  # [L, F, 2, D]
    "w_down": P(None, None, "model"),  # [L, D, F]
    "final_norm": P(),  # [D]
    "lm_head": P("model", None),  # [V, D]
}


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rope_theta: float = 10000.0
  rope_scaling: tuple[tuple[str, Any], ...] | None = None  # sorted items, hashable for jit
  rms_norm_eps: float = 1e-5
  tie_word_embeddings: bool = False
  max_position_embeddings: int = 2048
  bos_token_id: int | None = None
  eos_token_ids: tuple[int, ...] = ()

  def __post_init__(self):
    problems = []
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                 "num_kv_heads", "head_dim"):
      if int(getattr(self, name)) <= 0:
        problems.append(f"{name} must be positive, got {getattr(self, name)}")
    if self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads:
      problems.append(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                      f"({self.num_kv_heads})")
    if self.head_dim % 2:
      problems.append(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
    if problems:
      raise ValueError("invalid Llama config: " + "; ".join(problems))

  @property
  def scaling(self) -> dict[str, Any] | None:
    return dict(self.rope_scaling) if self.rope_scaling else None

  @classmethod
  def from_hf(cls, hf: Mapping[str, Any], source: str = "config") -> "LlamaConfig":
    """Builds a config from a Hugging Face `config.json` dictionary."""
    arch = hf.get("architectures") or []
    model_type = hf.get("model_type")
    if model_type not in (None, "llama") or (arch and not any("Llama" in a for a in arch)):
      raise ValueError(f"{source}: unsupported architecture {arch or model_type!r}; "
                       "graphloom_jax loads Llama-family decoders (model_type 'llama')")
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size",
                           "num_hidden_layers", "num_attention_heads") if k not in hf]
    if missing:
      raise ValueError(f"{source}: missing required fields {missing}")
    heads = int(hf["num_attention_heads"])
    eos = hf.get("eos_token_id")
    eos = () if eos is None else tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
    scaling = hf.get("rope_scaling")
    theta = hf.get("rope_theta")
    params = hf.get("rope_parameters")  # transformers 5.x nests rope settings here
    if isinstance(params, Mapping):
      theta = params.get("rope_theta", theta)
      if params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    return cls(
        vocab_size=int(hf["vocab_size"]),
        hidden_size=int(hf["hidden_size"]),
        intermediate_size=int(hf["intermediate_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        head_dim=int(hf.get("head_dim") or int(hf["hidden_size"]) // heads),
        rope_theta=float(theta if theta is not None else 10000.0),
        rope_scaling=tuple(sorted(scaling.items())) if scaling else None,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_ids=eos,
    )

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "LlamaConfig":
    d = dict(d)
    if d.get("rope_scaling"):
      d["rope_scaling"] = tuple(sorted(dict(d["rope_scaling"]).items()))
    d["eos_token_ids"] = tuple(d.get("eos_token_ids") or ())
    return cls(**d)

  def to_json(self) -> str:
    d = dataclasses.asdict(self)
    d["rope_scaling"] = self.scaling
    d["eos_token_ids"] = list(self.eos_token_ids)
    return json.dumps(d, indent=2, sort_keys=True)

  def param_shapes(self) -> dict[str, tuple[int, ...]]:
    """Shapes of every tensor of our checkpoint layout (one per projection; the loaders check
    against these and orbax checkpoints store them)."""
    l, d, n, k, h, f, v = (self.num_layers, self.hidden_size, self.num_heads,
                           self.num_kv_heads, self.head_dim, self.intermediate_size,
                           self.vocab_size)
    shapes = dict(embed=(v, d), attn_norm=(l, d), wq=(l, n, h, d), wk=(l, k, h, d),
                  wv=(l, k, h, d), wo=(l, d, n, h), mlp_norm=(l, d), w_gate=(l, f, d),
                  w_up=(l, f, d), w_down=(l, d, f), final_norm=(d,))
    if not self.tie_word_embeddings:
      shapes["lm_head"] = (v, d)
    return shapes

  def model_shapes(self) -> dict[str, tuple[int, ...]]:
    """Shapes of the model's parameters (the fused layout of the module docstring)."""
    shapes = self.param_shapes()
    l, n, k = self.num_layers, self.num_heads, self.num_kv_heads
    for name in ("wq", "wk", "wv", "w_gate", "w_up"):
      del shapes[name]
    shapes["wqkv"] = (l, k, n // k + 2, self.head_dim, self.hidden_size)
    shapes["w_gate_up"] = (l, self.intermediate_size, 2, self.hidden_size)
    return shapes

  def checkpoint_slots(self) -> dict[str, tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """Checkpoint layer tensor -> (model parameter, start of its slot in one layer of that
    parameter, the shape one layer's tensor takes there)."""
    d, n, k, h, f = (self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim,
                     self.intermediate_size)
    g = n // k
    return {"attn_norm": ("attn_norm", (0,), (d,)), "mlp_norm": ("mlp_norm", (0,), (d,)),
            "wq": ("wqkv", (0, 0, 0, 0), (k, g, h, d)),
            "wk": ("wqkv", (0, g, 0, 0), (k, 1, h, d)),
            "wv": ("wqkv", (0, g + 1, 0, 0), (k, 1, h, d)),
            "wo": ("wo", (0, 0, 0), (d, n, h)),
            "w_gate": ("w_gate_up", (0, 0, 0), (f, 1, d)),
            "w_up": ("w_gate_up", (0, 1, 0), (f, 1, d)),
            "w_down": ("w_down", (0, 0), (d, f))}


def _mesh_axis_size(mesh, axis) -> int:
  names = axis if isinstance(axis, tuple) else (axis,)
  return int(np.prod([mesh.shape[a] for a in names]))


def _split_axes(config: LlamaConfig, mesh) -> dict[str, list[tuple[int, Any, bool]]]:
  """{name: [(dim, mesh axis, divides evenly)]} for every split dimension of PARTITIONS."""
  out = {}
  for name, shape in config.model_shapes().items():
    out[name] = [(dim, axis, shape[dim] % _mesh_axis_size(mesh, axis) == 0)
                 for dim, axis in enumerate(PARTITIONS[name]) if axis is not None]
  return out


def param_shardings(config: LlamaConfig, mesh: jax.sharding.Mesh) -> dict[str, NamedSharding]:
  """Each parameter's `NamedSharding` on `mesh` (axes "data" and "model") as PARTITIONS
  declares it; a dimension the mesh axis does not divide (SmolLM2's 3 kv heads on 4 devices)
  is replicated instead (`uneven_shardings` lists them)."""
  out = {}
  for name, axes in _split_axes(config, mesh).items():
    spec = list(PARTITIONS[name])
    for dim, _, even in axes:
      if not even:
        spec[dim] = None
    out[name] = NamedSharding(mesh, P(*spec))
  return out


def uneven_shardings(config: LlamaConfig, mesh: jax.sharding.Mesh) -> list[str]:
  """The declared splits that `mesh` cannot make evenly (replicated by `param_shardings`)."""
  shapes = config.model_shapes()
  return [f"{name} dim {dim} ({shapes[name][dim]}) over {axis!r} "
          f"({_mesh_axis_size(mesh, axis)} devices)"
          for name, axes in _split_axes(config, mesh).items()
          for dim, axis, even in axes if not even]


def config_from_arch(arch: Mapping[str, Any]) -> LlamaConfig:
  """LlamaConfig from an ml_collections `model.arch` section (HF field names)."""
  return LlamaConfig.from_hf(dict(arch), source="config.model.arch")
