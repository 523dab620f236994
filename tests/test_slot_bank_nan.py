"""A slot bank refuses NaN or inf embeddings with an error naming the triple and the slot text
(it would otherwise reach every attention row that routes to the slot)."""

import re

import numpy as np
import pytest

from graphloom_jax.models import slots

TRIPLES = [dict(subject="cup", relation="on", object="table", score=0.9, conf_ext=0.8,
                centrality=0.5),
           dict(subject="dog", relation="near", object="door", score=0.7, conf_ext=0.6,
                centrality=0.4)]


def _embed_with(bad_text, value):
  def embed(texts):
    out = np.stack([np.full(4, len(t), np.float32) for t in texts])
    for j, t in enumerate(texts):
      if t == bad_text:
        out[j, 2] = value
    return out
  return embed


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("text, triple", [("dog", "triple 1: (dog, near, door)"),
                                          ("on table", "triple 0: (cup, on, table)"),
                                          ("near", "triple 1: (dog, near, door)")])
def test_non_finite_embedding_refused_naming_triple(text, triple, value):
  want = re.escape(f"embedding of '{text}' (a slot of {triple}) contains NaN or inf")
  with pytest.raises(ValueError, match=want):
    slots.build_bank(TRIPLES, _embed_with(text, value), bank_size=4)


def test_finite_embeddings_build():
  bank = slots.build_bank(TRIPLES, _embed_with(None, 0.0), bank_size=4)
  assert np.isfinite(bank.keys).all() and np.isfinite(bank.values).all()
  assert bank.valid.all() and list(bank.triple_index) == [0, 1, 0, 1]
