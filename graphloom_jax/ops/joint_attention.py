"""KG-JSA++ joint attention: one softmax over [prefix; routed slots; selected self tokens].

Shapes: B batch, T query length, N query heads, K kv heads, G = N // K query heads per kv
head (query head n reads kv head n // G, as Llama's `repeat_kv`), H head dim, P prefix length,
M slots, S self keys (the full or the selectively gathered decoder cache), I a generic key
count.

    out[b, t, n] = sum_j softmax_j(score_j) v_j over j in [prefix; slots; self]
    score_j      = scale * q[b, t, n] . k_j  (+ slot_bias for slot keys, e.g. log g_p)

Masks are bool (True = the key takes part). By rank they mean:
    rank 2  [B, I]        a key padding mask, the same for every query and kv head
    rank 3  [B, T, I]     per query position, shared by all kv head groups
    rank 4  [B, K, T, I]  per kv head group (the sparse cache picks tokens per group)
and any axis may be 1 to broadcast. A float bias follows the same ranks. A query row with no
valid key at all gets 0 (finite, no NaN in values or gradients).

Two equivalent forms:
  impl="dense"      concatenate all keys, then one masked softmax (the test oracle);
  impl="blockwise"  a partial softmax per key set giving (out, logsumexp), merged exactly
                    (MaxText's attention_op style), so the memory keys are never concatenated
                    with the long self cache.
"""

import functools

import jax
import jax.numpy as jnp

_IMPLS = ("dense", "blockwise")


def _check_qkv(q, k, v, name):
  if q.ndim != 4:
    raise ValueError(f"q must be [B, T, N, H]; got shape {q.shape}")
  if k.ndim != 4 or k.shape != v.shape:
    raise ValueError(
        f"{name}_k and {name}_v must both be [B, S, K, H]; got {k.shape} and {v.shape}")
  b, _, n, h = q.shape
  if k.shape[0] != b or k.shape[3] != h:
    raise ValueError(
        f"{name}_k {k.shape} does not match q {q.shape}: expected batch {b} and head dim {h}")
  if k.shape[2] == 0 or n % k.shape[2]:
    raise ValueError(
        f"{name}_k has {k.shape[2]} kv heads; the {n} query heads must be a multiple of it")


def _as_5d(x, name, num_keys):
  """Mask or bias of rank 2/3/4 (see module docstring) -> [B, K, 1, T, I] (axes may be 1)."""
  x = jnp.asarray(x)
  if x.ndim == 2:
    x = x[:, None, None, None, :]
  elif x.ndim == 3:
    x = x[:, None, None, :, :]
  elif x.ndim == 4:
    x = x[:, :, None, :, :]
  else:
    raise ValueError(
        f"{name} must have rank 2 [B, I], 3 [B, T, I] or 4 [B, K, T, I]; got shape {x.shape}")
  if x.shape[-1] not in (1, num_keys):
    raise ValueError(f"{name} has {x.shape[-1]} keys on its last axis; expected {num_keys}")
  return x


@jax.jit
def partial_attention(q, k, v, mask=None, bias=None, *, scale=None):
  """Softmax attention of q over one key set, also returning its log-normaliser.

  Args:
    q: [B, T, N, H] queries.
    k, v: [B, S, K, H] keys and values.
    mask: bool of rank 2/3/4 over S (see module docstring); None = all keys valid.
    bias: float of rank 2/3/4 over S added to the scores; None = no bias.
    scale: score scale; default 1 / sqrt(H).

  Returns:
    out: [B, T, N, H] attention output normalised within this key set (0 for empty rows).
    lse: [B, T, N] float32 logsumexp of the scores of the valid keys (-inf for empty rows).
  """
  _check_qkv(q, k, v, "partial")
  b, t, n, h = q.shape
  s, kv = k.shape[1], k.shape[2]
  if s == 0:
    return jnp.zeros_like(q), jnp.full((b, t, n), -jnp.inf, jnp.float32)
  if scale is None:
    scale = h ** -0.5
  qg = q.reshape(b, t, kv, n // kv, h)  # [B, T, K, G, H]
  mask5 = None if mask is None else _as_5d(mask, "mask", s)  # [B, K|1, 1, T|1, S]
  if mask5 is not None:
    # Keys and values no query may read are selected away, not weighted by exp(-inf) = 0:
    # 0 * NaN is NaN, and padding may hold anything (gradients included).
    used = jnp.broadcast_to(jnp.any(mask5, axis=(2, 3)), (b, kv, s)).transpose(0, 2, 1)
    k = jnp.where(used[..., None], k, 0)  # [B, S, K, H]
    v = jnp.where(used[..., None], v, 0)
  scores = jnp.einsum("BTKGH,BSKH->BKGTS", qg, k,
                      preferred_element_type=jnp.float32) * scale
  if bias is not None:
    scores = scores + _as_5d(bias, "bias", s).astype(jnp.float32)
  if mask5 is not None:
    scores = jnp.where(mask5, scores, -jnp.inf)
  # Softmax is shift invariant: the max only guards exp against overflow, so it carries no
  # gradient; an all-masked row has max -inf and is shifted by 0 instead.
  m = jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
  m = jnp.where(jnp.isfinite(m), m, 0.0)
  p = jnp.exp(scores - m)  # masked keys: exp(-inf) = 0, with zero gradient
  denom = jnp.sum(p, axis=-1, keepdims=True)
  nonempty = denom > 0
  safe_denom = jnp.where(nonempty, denom, 1.0)
  out = jnp.einsum("BKGTS,BSKH->BTKGH", p / safe_denom, v.astype(jnp.float32))
  lse = jnp.where(nonempty, m + jnp.log(safe_denom), -jnp.inf)[..., 0]  # [B, K, G, T]
  lse = lse.transpose(0, 3, 1, 2).reshape(b, t, n)
  return out.reshape(b, t, n, h).astype(q.dtype), lse


@jax.jit
def merge_partials(parts):
  """Exact softmax over the union of disjoint key sets from their partial results.

  Args:
    parts: a sequence of (out [B, T, N, H], lse [B, T, N]) from `partial_attention`.

  Returns:
    [B, T, N, H]: sum_i exp(lse_i - lse) out_i with lse = logsumexp_i lse_i; rows where every
    part is empty get 0.
  """
  parts = list(parts)
  if not parts:
    raise ValueError("merge_partials needs at least one (out, lse) pair; got none")
  lses = jnp.stack([lse for _, lse in parts])  # [parts, B, T, N]
  m = jax.lax.stop_gradient(jnp.max(lses, axis=0))
  m = jnp.where(jnp.isfinite(m), m, 0.0)
  w = jnp.exp(lses - m)  # empty parts: exp(-inf) = 0
  total = jnp.sum(w, axis=0)
  w = w / jnp.where(total > 0, total, 1.0)
  out = sum(w_i[..., None] * o.astype(jnp.float32) for w_i, (o, _) in zip(w, parts))
  return out.astype(parts[0][0].dtype)


@functools.partial(jax.jit, static_argnames=("impl",))
def joint_attention(q, prefix_k, prefix_v, prefix_mask, slot_k, slot_v, slot_mask,
                    self_k, self_v, self_mask, *, slot_bias=None, scale=None,
                    impl="blockwise"):
  """One softmax over [prefix; slots; self] keys (KG-JSA++), GQA aware.

  Args:
    q: [B, T, N, H] queries (after rotary).
    prefix_k, prefix_v: [B, P, K, H]; prefix_mask: [B, P] bool (None = all valid).
    slot_k, slot_v: [B, M, K, H]; slot_mask: bool [B, M], [B, T, M] or [B, K, T, M]
      (the active set A_t; None = all valid).
    self_k, self_v: [B, S, K, H]; self_mask: bool [B, S], [B, T, S] (e.g. causal, shared by
      all kv heads) or [B, K, T, S] (the per-group sparse selection); None = all valid.
    slot_bias: float broadcastable like slot_mask, added to the slot scores (log g_p).
    scale: score scale; default 1 / sqrt(H).
    impl: "blockwise" (partial softmaxes merged exactly) or "dense" (concatenate, softmax).
    Any of the three key sets may be empty (P, M or S = 0), or given as k = v = None.

  Returns:
    [B, T, N, H]; rows with no valid key are 0.
  """
  if impl not in _IMPLS:
    raise ValueError(f"impl must be one of {_IMPLS}; got {impl!r}")
  sets = []
  for name, k, v, mask, bias in (("prefix", prefix_k, prefix_v, prefix_mask, None),
                                 ("slot", slot_k, slot_v, slot_mask, slot_bias),
                                 ("self", self_k, self_v, self_mask, None)):
    if k is None and v is None:
      continue
    _check_qkv(q, k, v, name)
    if sets and k.shape[2] != sets[0][0].shape[2]:
      raise ValueError(f"{name}_k has {k.shape[2]} kv heads; the earlier key sets have "
                       f"{sets[0][0].shape[2]}")
    s = k.shape[1]
    if mask is not None:
      mask = _as_5d(mask, f"{name}_mask", s)
    if bias is not None:
      bias = _as_5d(bias, f"{name}_bias", s)
    sets.append((k, v, mask, bias))
  sets = [s for s in sets if s[0].shape[1]]
  if not sets:
    return jnp.zeros_like(q)
  if impl == "blockwise":
    return merge_partials(
        [_partial_5d(q, k, v, mask, bias, scale) for k, v, mask, bias in sets])
  return _dense(q, sets, scale)


def _partial_5d(q, k, v, mask, bias, scale):
  # Masks here are already [B, K, 1, T, I]; drop the G axis so partial_attention's rank-4
  # reading ([B, K, T, I]) restores exactly this layout.
  return partial_attention(q, k, v, None if mask is None else mask[:, :, 0],
                           None if bias is None else bias[:, :, 0], scale=scale)


def _dense(q, sets, scale):
  """Concatenate every key set along the key axis, then a single masked softmax."""
  b, t = q.shape[:2]
  kv = sets[0][0].shape[2]
  lead = (b, kv, 1, t)
  k = jnp.concatenate([s[0] for s in sets], axis=1)
  v = jnp.concatenate([s[1] for s in sets], axis=1)
  masks, biases = [], []
  for k_i, _, mask, bias in sets:
    n_i = k_i.shape[1]
    masks.append(jnp.ones(lead + (n_i,), bool) if mask is None
                 else jnp.broadcast_to(mask, lead + (n_i,)))
    biases.append(jnp.zeros(lead + (n_i,), jnp.float32) if bias is None
                  else jnp.broadcast_to(bias, lead + (n_i,)).astype(jnp.float32))
  mask = jnp.concatenate(masks, axis=-1)[:, :, 0]
  bias = jnp.concatenate(biases, axis=-1)[:, :, 0]
  return partial_attention(q, k, v, mask, bias, scale=scale)[0]
