"""FLOP accounting of dense vs KG-JSA++ decoding, against hand-computed values and XLA's own
count of the attention einsums."""

import math

import jax
import jax.numpy as jnp
import pytest

from graphloom_jax.ops.flops import (attention_flops, decode_step_cost, kgjsa_keys,
                                     selection_flops)


def test_paper_reduction_at_512():
  cost = decode_step_cost(512, prefix_len=32, active_slots=4, sparse_budget=88)
  assert cost.sparse_keys == 124
  assert cost.reduction == pytest.approx(1 - 124 / 512)
  assert abs(cost.reduction - 0.76) < 0.005


def test_hand_computed_counts_for_smollm2():
  cost = decode_step_cost(8192, num_layers=30, block_size=16)
  assert cost.dense_flops == 30 * 4 * 9 * 64 * 8192
  assert cost.sparse_flops == 30 * 4 * 9 * 64 * 124
  assert cost.selection_flops_full == 30 * (9 * 64 + 4 * 3 * 64 * 8192)
  assert cost.selection_flops_block == 30 * (9 * 64 + 4 * 3 * 64 * 512 + 3 * 64)
  assert decode_step_cost(512, block_size=0).selection_flops_block == 0


def test_short_cache_is_selected_whole():
  assert kgjsa_keys(50) == 32 + 4 + 50
  assert decode_step_cost(50).reduction < 0  # memory keys make a short step dearer
  assert selection_flops(17, block_size=16) == 9 * 64 + 4 * 3 * 64 * math.ceil(17 / 16) + 3 * 64


def test_attention_flops_match_xla_count_of_the_two_einsums():
  n, h, s = 9, 64, 384
  q = jnp.zeros((n, h))
  k = jnp.zeros((s, n, h))

  def attend(q, k, v):
    p = jnp.einsum("NH,SNH->NS", q, k)
    return jnp.einsum("NS,SNH->NH", p, v)

  analysis = jax.jit(attend).lower(q, k, k).compile().cost_analysis()
  analysis = analysis[0] if isinstance(analysis, list) else analysis
  assert analysis["flops"] == attention_flops(s, num_heads=n, head_dim=h)


def test_position_before_the_first_token_is_rejected():
  with pytest.raises(ValueError, match="t must be >= 1"):
    decode_step_cost(0)
