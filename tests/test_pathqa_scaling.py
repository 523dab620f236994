"""The scalability pool on PathQuestion (evaluation/pathqa_scaling.py): pool assembly,
distractor order and retrieval scores worked out by hand; WordNet's fact enumeration against
lines of the excerpt read by hand."""

import pathlib

import numpy as np
import pytest

from graphloom_jax.data import pathquestion
from graphloom_jax.evaluation import pathqa_scaling as S
from graphloom_jax.graph import kb
from graphloom_jax.graph.triples import Triple
from graphloom_jax.retrieval import ExactIndex

DATA = pathlib.Path(__file__).parent / "data"


def _t(s, r, o):
  return Triple(s, r, o, 1.0, "kb:test")


def test_pool_holds_every_instance_row_then_distractors_in_a_fixed_order():
  ds = pathquestion.load("PQ-2H", root=DATA / "pathquestion")
  questions = ds.questions
  instance = S.instance_rows(ds, questions)
  keys = [t.key() for t in instance]
  assert len(keys) == len(set(keys))
  assert set(keys) == {t.key() for q in questions for t in ds.instance_triples(q)}
  other = pathquestion.load("PQ-3H", root=DATA / "pathquestion").kb_triples()
  extra = S.distractors([other, other[::-1]], set(keys), seed=3)
  assert not {t.key() for t in extra} & set(keys)
  assert len(extra) == len({t.key() for t in other} - set(keys))
  # The order depends on the seed and the facts, not on the sources' order.
  assert [t.key() for t in S.distractors([other[::-1]], set(keys), seed=3)] == \
      [t.key() for t in extra]
  rows = S.pool(instance, extra, len(instance) + 2)
  assert rows[:len(instance)] == instance and rows[len(instance):] == extra[:2]
  with pytest.raises(ValueError, match=f"cannot hold the {len(instance)} instance rows"):
    S.pool(instance, extra, len(instance) - 1)
  with pytest.raises(ValueError, match=f"{len(extra) + 1} distractors, {len(extra)} are"):
    S.pool(instance, extra, len(instance) + len(extra) + 1)


def test_retrieval_scores_by_hand():
  a, b, c, d = ("a", "r", "x"), ("b", "r", "x"), ("c", "r", "x"), ("d", "r", "x")
  ranked = [[a, b, c, d], [c, d, b] + [("z", "r", str(i)) for i in range(10)], [d, c]]
  gold = [{a, b}, {b}, {a}]
  got = S.retrieval_scores(ranked, gold)
  # R@5: 2/2, 1/1, 0/1; MRR@10: 1, 1/3, 0; Hits@1: 1, 0, 0.
  assert got["recall5"] == pytest.approx(100 * 2 / 3)
  assert got["mrr10"] == pytest.approx(100 * (1 + 1 / 3) / 3)
  assert got["hits1"] == pytest.approx(100 / 3) and got["questions"] == 3


def test_search_all_ranks_rows_by_their_index():
  rows = [_t(f"e{i}", "r", "x") for i in range(6)]
  vectors = np.eye(6, dtype=np.float32)
  queries = np.array([[0, 0, 1, 0.5, 0, 0], [1, 0, 0, 0, 0, 0.2]], np.float32)
  ranked, batched, single = S.search_all(ExactIndex(vectors), rows, queries, k=2)
  assert ranked == [[rows[2].key(), rows[3].key()], [rows[0].key(), rows[5].key()]]
  assert batched >= 0 and single >= 0


def test_wordnet_facts_of_the_excerpt():
  wn = kb.WordNet.load(DATA / "wordnet", "n")
  facts = kb.wordnet_facts(wn)
  keys = [t.key() for t in facts]
  assert keys == sorted(set(keys)) and all(t.source == "kb:wordnet" for t in facts)
  # data.noun, read by hand: 00001930 physical_entity "@ 00001740" (entity) and "~ 00002684"
  # (object, physical_object); 00002137 abstraction / abstract_entity "@ 00001740".
  for key in [("physical entity", "is a", "entity"), ("physical entity", "has kind", "object"),
              ("physical entity", "has kind", "physical object"), ("abstraction", "is a", "entity"),
              ("abstract entity", "is a", "entity")]:
    assert key in keys, key
  # Pointers to synsets the excerpt does not hold (verbs here) give no fact.
  assert not any(k[1] == "is derivationally related to" for k in keys)
