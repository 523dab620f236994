"""GraphLoom's trainable heads around the frozen decoder (slot projection, fusion prefix, router),
and the trained text baselines' adapter (`TunedPrefix`), which has the same interface.

Shapes: B batch, M slots, E text-embedding width, R image items, I image-feature width,
Q evidence items, D model width, F slot features.

`GraphLoomHeads.memory(batch)` turns one batch of host-built features (see
`graphloom_jax.training.data`) into the decoder's `Memory` plus the router's side inputs;
`route_fn` gives the router callable the decoder calls inside its forward pass. Batch keys read
here: slot_keys [B, M, E], slot_values [B, M, E], slot_valid [B, M], slot_is_entity [B, M],
slot_features [B, M, F], slot_reliability [B, M], image [B, R, I], image_mask [B, R],
question_emb [B, E], evidence [B, Q, E], evidence_mask [B, Q]; optional slot_key_tokens
[B, M, W]; slot_value_tokens [B, M, V] when `fusion.token_values` is on; and, for
teacher-forced rows, tokens [B, T] with output_mask [B, T] (the router's output-mention
feature).
"""

import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import load_file, save_file

from graphloom_jax import atomic, defaults, provenance
from graphloom_jax.models import fusion, slots
from graphloom_jax.models import memory as memory_lib
from graphloom_jax.models import router as router_lib


class GraphLoomHeads(nnx.Module):

  def __init__(self, config, model_dim: int, embed_dim: int, image_dim: int,
               num_memory_layers: int, *, rngs: nnx.Rngs):
    """config: the full ml_collections config (sections memory, router)."""
    self.slot_proj = slots.SlotProjection(embed_dim, model_dim, rank=config.fusion.slot_rank,
                                          rngs=rngs)
    per_layer = num_memory_layers if config.fusion.per_layer else 0
    self.fusion = fusion.FusionPrefix(
        image_dim, embed_dim, model_dim, config.memory.prefix_len,
        fusion_dim=config.fusion.dim, num_layers=per_layer, rngs=rngs)
    self.router = router_lib.Router.from_config(config, model_dim, image_dim,
                                                slots.NUM_FEATURES, rngs=rngs)
    self.token_values = bool(config.fusion.token_values)

  def memory(self, batch, dtype=jnp.float32) -> tuple[memory_lib.Memory, router_lib.RouterInputs]:
    keys, values = self.slot_proj(batch["slot_keys"], batch["slot_values"], batch["slot_valid"])
    prefix, prefix_mask = self.fusion(batch["image"], batch["image_mask"], batch["question_emb"],
                                      batch["evidence"], batch["evidence_mask"])
    mem = memory_lib.Memory(prefix=prefix.astype(dtype), prefix_mask=prefix_mask,
                            slot_keys=keys.astype(dtype), slot_values=values.astype(dtype),
                            slot_valid=batch["slot_valid"],
                            slot_key_tokens=batch.get("slot_key_tokens"),
                            slot_value_tokens=(batch["slot_value_tokens"] if self.token_values
                                               else None))
    if "output_mask" in batch:  # teacher-forced rows: mentions of slot names in the answer
      mem = memory_lib.with_output_mentions(mem, batch["tokens"], batch["output_mask"])
    image_mask = batch["image_mask"][..., None].astype(jnp.float32)
    visual = jnp.sum(batch["image"] * image_mask, axis=1) / jnp.maximum(
        jnp.sum(image_mask, axis=1), 1.0)
    inputs = router_lib.RouterInputs(features=batch["slot_features"],
                                     reliability=batch["slot_reliability"], visual=visual,
                                     is_entity=batch["slot_is_entity"])
    return mem, inputs


class TunedPrefix(nnx.Module):
  """The adapter of the trained text baselines (modes flat_rag_tuned, no_retrieval_tuned):
  deep prompt tuning through the memory layers (prefix tuning, P-tuning v2). Each memory layer
  attends to its own P learned model-width vectors [L_m, P, D], mapped into its key/value space
  by its frozen projections as GraphLoom's fusion prefix is; there are no slots and nothing is
  routed. Trainable: L_m * P * D scalars (SmolLM2, 15 memory layers, P = 55: 475,200, beside
  the 473,473 of GraphLoom's heads). The evidence, if any, is in the text prompt."""

  def __init__(self, prefix_len: int, model_dim: int, num_memory_layers: int, *,
               rngs: nnx.Rngs):
    if prefix_len < 1 or num_memory_layers < 1:
      raise ValueError(f"TunedPrefix: prefix_len={prefix_len} and num_memory_layers="
                       f"{num_memory_layers} must be >= 1")
    self.prefix = nnx.Param(0.02 * jax.random.normal(
        rngs.params(), (num_memory_layers, prefix_len, model_dim), jnp.float32))
    self.router = router_lib.UniformRouter()

  def memory(self, batch, dtype=jnp.float32) -> tuple[memory_lib.Memory, None]:
    """The memory of a batch: the learned prefix for every example and one empty slot; only the
    batch size B (the leading axis of the batch's arrays) is read."""
    b = next(iter(batch.values())).shape[0]
    l, p, d = self.prefix.shape
    prefix = jnp.broadcast_to(self.prefix[...][:, None], (l, b, p, d)).astype(dtype)
    mem = memory_lib.Memory(prefix=prefix, prefix_mask=jnp.ones((b, p), bool),
                            slot_keys=jnp.zeros((b, 1, d), dtype),
                            slot_values=jnp.zeros((b, 1, d), dtype),
                            slot_valid=jnp.zeros((b, 1), bool))
    return mem, None


# What a heads checkpoint holds: GraphLoom's heads, or a trained text baseline's adapter.
KINDS = ("graphloom", "tuned_prefix")


# config.train.target -> the heads kind it trains.
TARGET_KINDS = {"graphloom": "graphloom", "flat_rag_tuned": "tuned_prefix",
                "no_retrieval_tuned": "tuned_prefix"}


def kind_of_target(target: str) -> str:
  """The heads kind that config.train.target trains."""
  if target not in TARGET_KINDS:
    raise ValueError(f"config.train.target={target!r}; expected one of {sorted(TARGET_KINDS)}")
  return TARGET_KINDS[target]


def build(config, kind: str, model_dim: int, embed_dim: int, image_dim: int,
          num_memory_layers: int, seed: int = 0):
  """Freshly initialised heads of `kind` (GraphLoomHeads or TunedPrefix)."""
  if kind == "graphloom":
    return GraphLoomHeads(config, model_dim, embed_dim, image_dim, num_memory_layers,
                          rngs=nnx.Rngs(seed))
  if kind == "tuned_prefix":
    return TunedPrefix(config.baseline.tuned_prefix_len, model_dim, num_memory_layers,
                       rngs=nnx.Rngs(seed))
  raise ValueError(f"heads kind {kind!r}; expected one of {KINDS}")


def count_params(module: nnx.Module) -> int:
  """Number of trainable (nnx.Param) scalars."""
  state = nnx.state(module, nnx.Param)
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(state)))


# ------------------------------------------------------------------- checkpoints of heads

HEADS_DIR = pathlib.Path(__file__).resolve().parents[1] / "resources" / "heads"
HEADS_FILE, HEADS_META = "heads.safetensors", "heads.json"
# Config sections that shape the heads: a checkpoint only fits a config that agrees on them.
HEAD_SHAPE_KEYS = ("memory.prefix_len", "memory.entity_slots",
                   "memory.relation_slots", "memory.first_layer", "router.router_dim",
                   "router.feature_hidden", "router.calibration", "fusion.dim",
                   "fusion.per_layer", "fusion.slot_rank", "fusion.token_values")
# Shape keys added after heads were first shipped, with the value an older heads.json meant.
SHAPE_KEY_DEFAULTS = {"fusion.token_values": False}
# The same for a trained text baseline's adapter (heads.json "kind": "tuned_prefix").
ADAPTER_SHAPE_KEYS = ("baseline.tuned_prefix_len", "memory.first_layer")
SHAPE_KEYS = {"graphloom": HEAD_SHAPE_KEYS, "tuned_prefix": ADAPTER_SHAPE_KEYS}


# ------------------------------------------------------------------------------ trained heads

def new_heads(config, decoder, embed_dim: int, seed: int = 0,
              kind: str = "graphloom"):
  """Freshly initialised heads of `kind` for this decoder (GraphLoomHeads, or a trained text
  baseline's TunedPrefix; image tokens are text embeddings here)."""
  model = decoder.model
  layers = model.config.num_layers - model.first_memory_layer(config.memory.first_layer)
  return build(config, kind, model.config.hidden_size, embed_dim, embed_dim, layers,
                         seed)


def _kind(heads) -> str:
  return "tuned_prefix" if isinstance(heads, TunedPrefix) else "graphloom"


def flat_state(heads) -> dict[str, Any]:
  state = nnx.state(heads)
  leaves, _ = jax.tree_util.tree_flatten_with_path(state)
  return {jax.tree_util.keystr(path): leaf for path, leaf in leaves}


def save_heads(heads, folder, config, meta: dict | None = None) -> pathlib.Path:
  """Writes heads.safetensors (every variable, calibration included) and heads.json (their
  kind, the shape settings of `config` for that kind, and `meta`)."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  arrays = {k: np.asarray(v, np.float32) for k, v in flat_state(heads).items()}
  with atomic.atomic_path(folder / HEADS_FILE) as tmp:
    save_file(arrays, str(tmp))
  kind = _kind(heads)
  atomic.atomic_write_json(folder / HEADS_META, {
      "kind": kind, "config": {k: defaults.lookup(config, k) for k in SHAPE_KEYS[kind]}, **(meta or {}),
      "provenance": provenance.record()})
  return folder


def saved_config(meta: dict) -> dict:
  """The shape keys a heads.json was saved with (its "config"), keys added since read as
  `SHAPE_KEY_DEFAULTS` says an older file meant."""
  keys = SHAPE_KEYS[meta.get("kind", "graphloom")]
  return {**{k: v for k, v in SHAPE_KEY_DEFAULTS.items() if k in keys}, **meta.get("config", {})}


def load_heads(folder, config, decoder, embed_dim: int, kind: str | None = None):
  """Heads saved by `save_heads` (GraphLoomHeads, or a TunedPrefix adapter: heads.json says
  which; `kind` the one the caller needs, None for either); a checkpoint that does not fit
  `config` or the decoder is an error that names what differs."""
  folder = pathlib.Path(folder)
  path, meta_path = folder / HEADS_FILE, folder / HEADS_META
  for p in (path, meta_path):
    if not p.is_file():
      raise FileNotFoundError(f"heads checkpoint {folder}: {p.name} is missing")
  try:
    meta = json.loads(meta_path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{meta_path}: not valid JSON ({e.msg})") from None
  saved_kind = meta.get("kind", "graphloom")  # heads written before adapters existed
  if saved_kind not in SHAPE_KEYS:
    raise ValueError(f"{meta_path}: kind {saved_kind!r}; expected one of {sorted(SHAPE_KEYS)}")
  if kind is not None and saved_kind != kind:
    raise ValueError(f"heads checkpoint {folder} holds {saved_kind!r} heads where {kind!r} are "
                     "needed (GraphLoom's heads for mode graphloom, a TunedPrefix adapter for "
                     "the *_tuned modes)")
  saved = saved_config(meta)
  diff = {k: (saved.get(k), defaults.lookup(config, k)) for k in SHAPE_KEYS[saved_kind]
          if saved.get(k) != defaults.lookup(config, k)}
  if diff:
    raise ValueError(f"heads checkpoint {folder} was trained with other settings: " + ", ".join(
        f"{k}={a!r} (config has {b!r})" for k, (a, b) in sorted(diff.items())))
  heads = new_heads(config, decoder, embed_dim, kind=saved_kind)
  template = flat_state(heads)
  try:
    arrays = load_file(str(path))
  except Exception as e:  # safetensors raises its own error types for corrupt headers
    raise ValueError(f"{path}: unreadable safetensors file ({e})") from None
  problems = [f"missing {k}" for k in template if k not in arrays]
  problems += [f"unexpected {k}" for k in arrays if k not in template]
  problems += [f"{k}: shape {arrays[k].shape}, the model needs {tuple(v.shape)}"
               for k, v in template.items() if k in arrays and arrays[k].shape != v.shape]
  if problems:
    raise ValueError(f"heads checkpoint {path} does not fit decoder {decoder.source} "
                     f"(width {decoder.config.hidden_size}) and embedder width {embed_dim}: "
                     + "; ".join(problems[:8]))
  state = nnx.state(heads)
  leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
  new = [jnp.asarray(arrays[jax.tree_util.keystr(p)], leaf.dtype) for p, leaf in leaves]
  nnx.update(heads, jax.tree_util.tree_unflatten(treedef, new))
  return heads
