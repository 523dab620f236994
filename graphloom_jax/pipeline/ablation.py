"""Ablation switches of GraphLoom's decoding (config section `ablation`), for the component and
router-feature tables of the SceneKB benchmark.

They act at answering time on a system trained in full (training refuses non-default values):

  ablation.router = "uniform"   -router: every valid slot is active at every step with one equal
                                gate g = 1/2 (score 0, bias log 1/2), instead of the learned top-k
                                over s_p(t)
  ablation.prefix = False       -prefix: the fusion prefix is masked out of the joint attention
                                (prefix_mask = False); slots and the decoder's own cache remain
  ablation.drop_features        -router features, a comma-separated subset of
                                "retrieval_score", "conf_ext", "centrality", "context":
                                the named slot features f_p are replaced, in every bank, by their
                                mean over the bank's valid slots (the router sees no difference
                                between slots on that feature, at its usual magnitude).
                                "conf_ext" also sets the reliability c_p to 1/2, so
                                beta * logit(c_p) = 0; "context" neutralises the question-mention
                                feature and disables the output-mention feature (no slot names to
                                match)
  ablation.corrective = False   -corrective: no retrieval evaluation or corrective action

The other rows of the tables are settings that already exist: -revision / +revision is
verify.revise = False / True (a failed answer is never / once revised), -interleaved is
retrieval.second_round = "none", no KB enrichment graph.kb_hops = 0, -KG-JSA++ the mode
"routed_text" (the slots the router picks at the first answer step verbalised into a Flat-RAG
prompt, no memory).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphloom_jax.models import router as router_lib
from graphloom_jax.models import slots

# The router features -features can drop, and their columns in slot_features (`slots.FEATURES`;
# is_entity, the slot type, is structure rather than evidence and is never dropped).
FEATURES = {name: slots.COLUMN[name] for name in slots.FEATURES if name != "is_entity"}
ROUTERS = ("learned", "uniform")


@dataclasses.dataclass(frozen=True)
class Ablation:
  router: str = "learned"
  prefix: bool = True
  drop_features: tuple[str, ...] = ()
  corrective: bool = True

  @classmethod
  def from_config(cls, config) -> "Ablation":
    a = config.ablation
    drop = tuple(sorted({f.strip() for f in a.drop_features.split(",") if f.strip()}))
    unknown = [f for f in drop if f not in FEATURES]
    if unknown:
      raise ValueError(f"ablation.drop_features: unknown feature(s) {unknown}; expected a "
                       f"comma-separated subset of {sorted(FEATURES)}")
    if a.router not in ROUTERS:
      raise ValueError(f"ablation.router={a.router!r}; expected one of {ROUTERS}")
    return cls(a.router, bool(a.prefix), drop, bool(a.corrective))

  @property
  def is_default(self) -> bool:
    return self == Ablation()

  @property
  def changes_heads(self) -> bool:
    return self.router != "learned" or not self.prefix


def neutralise(arrays: dict[str, np.ndarray], ablation: Ablation) -> dict[str, np.ndarray]:
  """Stacked evidence arrays ([B, M, ...]) with the dropped router features neutralised (see the
  module docstring); the input is not modified."""
  if not ablation.drop_features:
    return arrays
  out = dict(arrays)
  feats = np.array(arrays["slot_features"], np.float32, copy=True)  # [B, M, F]
  valid = np.asarray(arrays["slot_valid"], bool)  # [B, M]
  count = np.maximum(valid.sum(axis=1, keepdims=True), 1)  # [B, 1]
  for name in ablation.drop_features:
    col = FEATURES[name]
    mean = (feats[..., col] * valid).sum(axis=1, keepdims=True) / count  # [B, 1]
    feats[..., col] = np.where(valid, mean, 0.0)
  out["slot_features"] = feats
  if "conf_ext" in ablation.drop_features:
    out["slot_reliability"] = np.where(valid, 0.5, 0.0).astype(np.float32)
  if "context" in ablation.drop_features and "slot_key_tokens" in arrays:
    out["slot_key_tokens"] = np.full_like(arrays["slot_key_tokens"], -1)
  return out


class AblatedHeads(nnx.Module):
  """Trained heads with the -router / -prefix switches applied: the same `memory` and `router`
  interface that `decode.heads_forward` and the generation loop call."""

  def __init__(self, heads, ablation: Ablation):
    self.inner = heads
    self.prefix = ablation.prefix
    self.router = router_lib.UniformRouter() if ablation.router == "uniform" else heads.router

  def memory(self, batch, dtype=jnp.float32):
    """`GraphLoomHeads.memory`, the prefix masked out under -prefix."""
    mem, inputs = self.inner.memory(batch, dtype)
    if not self.prefix:
      mem = mem.replace(prefix_mask=jnp.zeros_like(mem.prefix_mask))
    return mem, inputs
