"""GRAIL gap-aware query steering as pure functions over padded, masked evidence sets.

Shapes: B batch (queries), E evidence slots per query (padded), D embedding width,
N hard negatives per query (padded).

  context_weights(q [B,D], evidence [B,E,D], mask [B,E], tau)        -> a [B,E]
  context_vector(q, evidence, mask, tau)                             -> h_ctx [B,D]
  gap_gate(params, q [B,D], h_ctx [B,D])                             -> g [B] or [B,D]
  subtractive_steer(q, h_ctx, g)                                     -> q_gap [B,D]
  additive_steer(q, h_ctx)                                           -> [B,D]
  info_nce(queries, positives, hard_negatives, hard_mask, ...)       -> scalar loss

h_ctx = sum_i softmax_i(q . e_i / tau) e_i over the unmasked evidence (docs/method.md §7);
an all-masked row gives h_ctx = 0, and every function here maps h_ctx = 0 to the unsteered query
without producing NaN values or NaN gradients.
"""

import functools

import jax
import jax.numpy as jnp

# Below this squared norm h_ctx is treated as absent: the projection coefficient
# (q . h) / ||h||^2 would otherwise blow up on round-off.
_EPS = 1e-12


@jax.jit
def context_weights(q, evidence, mask, tau):
  """Query-weighted attention over the evidence set; rows with no evidence are all zero."""
  mask = mask.astype(bool)
  logits = jnp.einsum("BD,BED->BE", q, evidence) / tau
  any_valid = jnp.any(mask, axis=-1, keepdims=True)  # [B,1]
  row_max = jnp.max(jnp.where(mask, logits, -jnp.inf), axis=-1, keepdims=True)
  # The max only stabilises the exponent; it carries no gradient in an exact softmax.
  row_max = jax.lax.stop_gradient(jnp.where(any_valid, row_max, 0.0))
  w = jnp.where(mask, jnp.exp(jnp.where(mask, logits - row_max, 0.0)), 0.0)
  denom = jnp.sum(w, axis=-1, keepdims=True)
  return w / jnp.where(denom > 0, denom, 1.0)


@jax.jit
def context_vector(q, evidence, mask, tau):
  """h_ctx [B,D] = sum_i a_i e_i with a = softmax(q . e_i / tau) over unmasked slots."""
  a = context_weights(q, evidence, mask, tau)
  return jnp.einsum("BE,BED->BD", a, evidence)


def init_gate(key, dim: int, kind: str = "scalar", scale: float | None = None):
  """Gate parameters {'w', 'b'}: w [2D] and b [] for a scalar gate, w [2D,D] and b [D] per
  dimension. Small random w and b = 0 start the gate near 0.5."""
  if kind not in ("scalar", "vector"):
    raise ValueError(f"gate kind must be 'scalar' or 'vector', got {kind!r}")
  scale = (2 * dim) ** -0.5 if scale is None else scale
  if kind == "scalar":
    return {"w": scale * jax.random.normal(key, (2 * dim,), jnp.float32),
            "b": jnp.zeros((), jnp.float32)}
  return {"w": scale * jax.random.normal(key, (2 * dim, dim), jnp.float32),
          "b": jnp.zeros((dim,), jnp.float32)}


@jax.jit
def gap_gate(params, q, h_ctx):
  """g = sigmoid(W_gap [q; h_ctx] + b): [B] for a scalar gate (w [2D]), [B,D] for a
  per-dimension gate (w [2D,D])."""
  x = jnp.concatenate([q, h_ctx], axis=-1)  # [B,2D]
  return jax.nn.sigmoid(x @ params["w"] + params["b"])


@jax.jit
def subtractive_steer(q, h_ctx, g):
  """q_gap = q - g * (q . h_ctx / ||h_ctx||^2) * h_ctx; q itself where h_ctx is (near) zero.

  g is [B] (scalar gate) or [B,D] (per-dimension gate)."""
  nrm2 = jnp.sum(h_ctx * h_ctx, axis=-1)  # [B]
  present = nrm2 > _EPS
  # Double where: the division must not see a zero denominator even in the unused branch,
  # or its gradient turns into NaN.
  coef = jnp.where(present, jnp.sum(q * h_ctx, axis=-1) / jnp.where(present, nrm2, 1.0), 0.0)
  if g.ndim == q.ndim - 1:
    g = g[..., None]
  return q - g * coef[..., None] * h_ctx


@jax.jit
def additive_steer(q, h_ctx):
  """The additive baseline q + h_ctx (ranking by cosine is invariant to its norm)."""
  return q + h_ctx


@functools.partial(jax.jit, static_argnames=("axis",))
def l2_normalize(x, axis=-1):
  """x / ||x|| with zero rows left at zero (and finite gradients there)."""
  nrm2 = jnp.sum(x * x, axis=axis, keepdims=True)
  present = nrm2 > _EPS
  return jnp.where(present, x * jax.lax.rsqrt(jnp.where(present, nrm2, 1.0)), 0.0)


@jax.jit
def info_nce(queries, positives, hard_negatives=None, hard_mask=None, temperature=0.05,
             positive_ids=None, example_mask=None):
  """InfoNCE of each query against its positive, with in-batch and hard negatives.

  queries, positives: [B,D]; hard_negatives [B,N,D] with hard_mask [B,N] (True = real
  negative). Both sides are L2-normalised, so logits are cosine / temperature, the same
  ranking the retriever uses. positive_ids [B] (optional): examples whose positives share an
  id are not each other's negatives. example_mask [B] (optional): False marks batch padding,
  which neither contributes a loss term nor serves as a negative. Returns the mean loss over
  real examples.
  """
  b = queries.shape[0]
  qn = l2_normalize(queries)
  pn = l2_normalize(positives)
  if example_mask is None:
    example_mask = jnp.ones((b,), bool)
  example_mask = example_mask.astype(bool)
  in_batch = (qn @ pn.T) / temperature  # [B,B]
  eye = jnp.eye(b, dtype=bool)
  allowed = example_mask[None, :] | eye
  if positive_ids is not None:
    allowed = allowed & ((positive_ids[:, None] != positive_ids[None, :]) | eye)
  in_batch = jnp.where(allowed, in_batch, -jnp.inf)
  logits = in_batch
  if hard_negatives is not None:
    hn = l2_normalize(hard_negatives)
    hard = jnp.einsum("BD,BND->BN", qn, hn) / temperature
    if hard_mask is None:
      hard_mask = jnp.ones(hard.shape, bool)
    hard = jnp.where(hard_mask.astype(bool), hard, -jnp.inf)
    logits = jnp.concatenate([in_batch, hard], axis=-1)
  # The diagonal is always finite, so every row's log-sum-exp is finite.
  lse = jax.nn.logsumexp(logits, axis=-1)
  per_example = lse - jnp.diagonal(in_batch)
  w = example_mask.astype(per_example.dtype)
  return jnp.sum(per_example * w) / jnp.maximum(jnp.sum(w), 1.0)
