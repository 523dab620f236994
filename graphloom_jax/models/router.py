"""The reliability router as an nnx module: produces the decoder's `route(h, memory)` callable.

Shapes: B batch, T query length, M slots, D model width, R router width, F slot features,
V visual width.

  q_t  = W_q h_t / sqrt(R)       h_t: residual stream entering the first memory layer [B, T, D]
  k_p  = W_k P(Emb(key_p))       the projected slot keys of the Memory [B, M, D]
  w_v . v_t                      v: pooled visual context of the example [B, V], the same for all t
  phi(f_p(t))                    2-layer MLP (tanh) on the slot features [B, M, F] plus one
                                 context feature per position: whether the slot's name already
                                 appeared in the generated output (Memory.slot_mentioned)
  c_p  = calibration(conf_ext)   temperature sigmoid(logit(c) / T) or Platt sigmoid(a logit(c) + b)

conf_ext is clipped to [reliability_clip, 1 - reliability_clip] (0.01) before the logit: knowledge
base facts arrive with conf_ext = 1, and an unclipped logit would add beta * 13.8 to their score,
opening their gates whatever the rest of the router says.

The calibration parameters are not trained by gradient: they are fitted on validation data
(`fit_calibration`) and kept in their own variable type so optimisers filtered on nnx.Param
never see them.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphloom_jax.models import memory as memory_lib
from graphloom_jax.ops import routing


class Calibration(nnx.Variable):
  """Post-hoc calibration state (fitted, not trained)."""


class RouterInputs(NamedTuple):
  """What the router needs besides the decoder state: the per-example slot side information."""
  features: jax.Array  # [B, M, F]
  reliability: jax.Array  # [B, M] raw conf_ext
  visual: jax.Array  # [B, V]
  is_entity: jax.Array  # [B, M] bool


class Router(nnx.Module):

  def __init__(self, model_dim: int, visual_dim: int, num_features: int, *, router_dim: int = 64,
               feature_hidden: int = 32, beta: float = 2.0, bias: float = -1.0,
               epsilon: float = 0.3, entity_k: int = 2, relation_k: int = 2,
               calibration: str = "temperature", reliability_clip: float = 0.01,
               rngs: nnx.Rngs):
    if calibration not in ("temperature", "platt"):
      raise ValueError(f"router calibration={calibration!r}; expected 'temperature' or 'platt'")
    self.q_proj = nnx.Linear(model_dim, router_dim, use_bias=False, rngs=rngs)
    self.k_proj = nnx.Linear(model_dim, router_dim, use_bias=False, rngs=rngs)
    self.w_v = nnx.Linear(visual_dim, 1, use_bias=False, rngs=rngs)
    self.phi_hidden = nnx.Linear(num_features + 1, feature_hidden, rngs=rngs)
    self.phi_out = nnx.Linear(feature_hidden, 1, rngs=rngs)
    self.temperature = Calibration(jnp.ones((), jnp.float32))
    self.platt = Calibration(jnp.array([1.0, 0.0], jnp.float32))
    self.router_dim = router_dim
    self.beta, self.bias, self.epsilon = beta, bias, epsilon
    self.entity_k, self.relation_k = entity_k, relation_k
    self.calibration = calibration
    self.reliability_clip = reliability_clip

  @classmethod
  def from_config(cls, config, model_dim: int, visual_dim: int, num_features: int,
                  rngs: nnx.Rngs) -> "Router":
    """Build from a full config (sections `router` and `memory`)."""
    mem, r = config.memory, config.router
    if mem.entity_slots + mem.relation_slots != mem.active_slots:
      raise ValueError(
          f"config.memory: entity_slots ({mem.entity_slots}) + relation_slots "
          f"({mem.relation_slots}) must equal active_slots ({mem.active_slots})")
    return cls(model_dim, visual_dim, num_features, router_dim=r.router_dim,
               feature_hidden=r.feature_hidden, beta=r.beta, bias=r.bias, epsilon=r.epsilon,
               entity_k=mem.entity_slots, relation_k=mem.relation_slots,
               calibration=r.calibration, reliability_clip=r.reliability_clip, rngs=rngs)

  def _logit(self, reliability: jax.Array) -> jax.Array:
    c = self.reliability_clip
    return routing.safe_logit(jnp.clip(reliability, c, 1.0 - c))

  def calibrate(self, reliability: jax.Array) -> jax.Array:
    """c_p from raw reliabilities [..., M]."""
    z = self._logit(reliability)
    if self.calibration == "temperature":
      return routing.apply_temperature(z, self.temperature[...])
    a, b = self.platt[...]
    return routing.apply_platt(z, a, b)

  def fit_calibration(self, reliability: jax.Array, utility: jax.Array,
                      mask: jax.Array | None = None) -> None:
    """Fit the calibration of c_p on validation slots: raw reliabilities vs 0/1 utility, [N].

    NaN or inf in a valid slot's reliability or utility is an error (the fit would silently
    come out NaN); masked-out slots may hold anything."""
    for name, x in (("reliability", reliability), ("utility", utility)):
      host = np.asarray(x)
      bad = ~np.isfinite(host) & (True if mask is None else np.asarray(mask, bool))
      if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"fit_calibration: {name} has NaN/inf in {int(bad.sum())} valid "
                         f"slot(s), first at slot {first}; expected finite values in [0, 1]")
    z = self._logit(reliability.reshape(-1))
    y = utility.reshape(-1)
    w = None if mask is None else mask.reshape(-1)
    if self.calibration == "temperature":
      self.temperature.value = routing.fit_temperature(z, y, w)
    else:
      a, b = routing.fit_platt(z, y, w)
      self.platt.value = jnp.stack([a, b])

  def feature_term(self, features: jax.Array, mentioned: jax.Array) -> jax.Array:
    """phi(f_p(t)): static features [B, M, F] and mention flags [B, T, M] -> [B, T, M]."""
    b, t, m = mentioned.shape
    f = jnp.broadcast_to(features[:, None].astype(jnp.float32), (b, t, m, features.shape[-1]))
    f = jnp.concatenate([f, mentioned[..., None].astype(jnp.float32)], axis=-1)
    return self.phi_out(jnp.tanh(self.phi_hidden(f)))[..., 0]

  def __call__(self, h: jax.Array, slot_keys: jax.Array, slot_valid: jax.Array,
               inputs: RouterInputs, mentioned: jax.Array | None = None) -> routing.Routing:
    """Routing for residual-stream states h [B, T, D] over the projected slot keys [B, M, D];
    `mentioned` [B, T, M] (None: no slot mentioned yet)."""
    b, t = h.shape[:2]
    m = slot_keys.shape[1]
    if mentioned is None:
      mentioned = jnp.zeros((b, t, m), bool)
    elif mentioned.shape != (b, t, m):
      raise ValueError(f"slot_mentioned has shape {mentioned.shape}; the router is scoring "
                       f"{(b, t, m)} (batch, positions, slots)")
    h = h.astype(jnp.float32)
    q = self.q_proj(h) / math.sqrt(self.router_dim)
    k = self.k_proj(slot_keys.astype(jnp.float32))
    visual = self.w_v(inputs.visual.astype(jnp.float32))[:, 0]  # [B]
    visual = jnp.broadcast_to(visual[:, None], h.shape[:2])
    return routing.route(
        q, k, visual, self.feature_term(inputs.features, mentioned),
        self.calibrate(inputs.reliability),
        slot_valid, inputs.is_entity, beta=self.beta, bias=self.bias, entity_k=self.entity_k,
        relation_k=self.relation_k, epsilon=self.epsilon)

  def route_fn(self, inputs: RouterInputs, record: list | None = None) -> memory_lib.Router:
    """The decoder's router callable. When `record` is a list, each call's Routing is appended
    to it (the losses need the scores the forward pass used; the list is filled while tracing)."""
    return route_fn(self, inputs, record)


def route_fn(router, inputs: RouterInputs, record: list | None = None) -> memory_lib.Router:
  """`route(h, memory) -> (active, bias)` for any module with the Router call signature
  (`router(h, slot_keys, slot_valid, inputs, mentioned) -> Routing`); see Router.route_fn."""

  def route(h: jax.Array, memory: memory_lib.Memory):
    r = router(h, memory.slot_keys, memory.slot_valid, inputs, memory.slot_mentioned)
    if record is not None:
      record.append(r)
    return r.active, r.bias.astype(h.dtype)

  return route


class BoundRouter(nnx.Module):
  """A Router with one batch's side inputs attached: the `router(h, memory) -> (active, bias)`
  module that `Decoder.logits` / `Decoder.generate` accept, so the active set is recomputed at
  every decoding step inside the jitted loop."""

  def __init__(self, router: Router, inputs: RouterInputs):
    self.router = router
    self.features = nnx.Variable(jnp.asarray(inputs.features))
    self.reliability = nnx.Variable(jnp.asarray(inputs.reliability))
    self.visual = nnx.Variable(jnp.asarray(inputs.visual))
    self.is_entity = nnx.Variable(jnp.asarray(inputs.is_entity))

  def __call__(self, h: jax.Array, memory: memory_lib.Memory):
    inputs = RouterInputs(self.features[...], self.reliability[...], self.visual[...],
                          self.is_entity[...])
    r = self.router(h, memory.slot_keys, memory.slot_valid, inputs, memory.slot_mentioned)
    return r.active, r.bias.astype(h.dtype)


class UniformRouter(nnx.Module):
  """The Router interface (`__call__`, `route_fn`) with every valid slot active and equal gates
  1/2 at every position, and no parameters: the -router ablation, and the router of heads
  that have no slots (`heads.TunedPrefix`)."""

  def __call__(self, h, slot_keys, slot_valid, inputs, mentioned=None) -> routing.Routing:
    b, t, m = h.shape[0], h.shape[1], slot_keys.shape[1]
    active = jnp.broadcast_to(slot_valid[:, None, :], (b, t, m))
    zeros = jnp.zeros((b, t, m), jnp.float32)
    return routing.Routing(active=active, bias=zeros + jnp.log(0.5), gates=zeros + 0.5,
                           scores=zeros)

  def route_fn(self, inputs, record: list | None = None):
    return route_fn(self, inputs, record)


def bound_router(router, inputs):
  """The per-batch router module the decoder's generation loop calls, for a Router or a
  UniformRouter."""
  if isinstance(router, UniformRouter):
    return _BoundUniform(router)
  return BoundRouter(router, inputs)


class _BoundUniform(nnx.Module):

  def __init__(self, router: UniformRouter):
    self.router = router

  def __call__(self, h, memory):
    r = self.router(h, memory.slot_keys, memory.slot_valid, None, memory.slot_mentioned)
    return r.active, r.bias.astype(h.dtype)
