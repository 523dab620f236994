"""Per-step attention cost of dense decoding vs KG-JSA++ (docs/method.md §4).

Counting convention (one decoding step, one query token, per layer):
  - t is the number of keys dense causal attention reads at that step: the cache length
    including the current token.
  - A key costs 4 * N * H FLOPs: the score q . k (H multiply-adds = 2H FLOPs) and its share of
    the weighted value sum (2H FLOPs), for each of the N query heads. Softmax exponentials,
    scaling and masking (O(N) per key) and the q/k/v/o projections (independent of t) are not
    counted, so the reduction is a ratio of key counts.
  - Dense reads t keys; KG-JSA++ reads L_p prefix + |A_t| slots + |I_t| selected cache tokens,
    with |I_t| = min(t, budget) (a short cache is selected whole).

    reduction(t) = 1 - (L_p + |A_t| + min(t, |I_t|)) / t
    t = 512, L_p = 32, |A_t| = 4, |I_t| = 88:  1 - 124 / 512 = 75.8%  (the paper's "about 76%")

  (negative below t = 124: a short cache is cheaper dense than with the memory added.)

Choosing the similar tokens is counted separately, per kv head (K of them), with the query
summary (mean of the G = N / K heads of a group, N * H FLOPs) added once:
  full cosine   every remaining key is scored: dot (2H) + key norm (2H) per key and kv head,
                bounded by 4 * K * H * t, which is still O(t).
  block summary ceil(t / block_size) block sums are scored (4 * K * H each) and the new key
                is added to its block (K * H), so the step cost is O(t / block_size).
Sink/recent bookkeeping (a cumsum over t booleans, no floating point) is not counted.
"""

import dataclasses
import math


def attention_flops(num_keys, *, num_heads, head_dim):
  """FLOPs of one query token attending `num_keys` keys in one layer (see convention)."""
  return 4 * num_heads * head_dim * num_keys


def kgjsa_keys(t, *, prefix_len=32, active_slots=4, sparse_budget=88):
  """Keys one KG-JSA++ step reads at cache length t: L_p + |A_t| + min(t, |I_t|)."""
  return prefix_len + active_slots + min(t, sparse_budget)


def selection_flops(t, *, num_heads=9, num_kv_heads=3, head_dim=64, block_size=0):
  """FLOPs of choosing the similar tokens at cache length t in one layer (see convention)."""
  summary = num_heads * head_dim
  if block_size > 0:
    return summary + 4 * num_kv_heads * head_dim * math.ceil(t / block_size) + (
        num_kv_heads * head_dim)
  return summary + 4 * num_kv_heads * head_dim * t


@dataclasses.dataclass(frozen=True)
class StepCost:
  t: int
  dense_keys: int
  sparse_keys: int
  dense_flops: int  # summed over layers
  sparse_flops: int  # attention only, summed over layers
  reduction: float  # 1 - sparse_flops / dense_flops
  selection_flops_full: int  # per-token cosine selection, summed over layers
  selection_flops_block: int  # block-summary selection, summed over layers (0: no blocks)


def decode_step_cost(t, *, prefix_len=32, active_slots=4, sparse_budget=88, num_heads=9,
                     num_kv_heads=3, head_dim=64, num_layers=1, block_size=16):
  """Dense vs KG-JSA++ attention FLOPs of one decoding step at cache length t.

  Defaults are the budgets of docs/method.md §4 and SmolLM2-135M's attention shapes (9 heads,
  3 kv heads, head dim 64); pass num_layers=30 for the whole SmolLM2 stack.
  """
  if t < 1:
    raise ValueError(f"t must be >= 1 (the current token is in the cache); got {t}")
  sparse_keys = kgjsa_keys(t, prefix_len=prefix_len, active_slots=active_slots,
                           sparse_budget=sparse_budget)
  dense = num_layers * attention_flops(t, num_heads=num_heads, head_dim=head_dim)
  sparse = num_layers * attention_flops(sparse_keys, num_heads=num_heads, head_dim=head_dim)
  shapes = dict(num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim)
  return StepCost(
      t=t, dense_keys=t, sparse_keys=sparse_keys, dense_flops=dense, sparse_flops=sparse,
      reduction=1.0 - sparse / dense,
      selection_flops_full=num_layers * selection_flops(t, **shapes),
      selection_flops_block=(num_layers * selection_flops(t, block_size=block_size, **shapes)
                             if block_size > 0 else 0))
