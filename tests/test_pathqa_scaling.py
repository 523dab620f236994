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


def test_pool_rows_are_named_and_filtered_as_an_instance_graph():
  from graphloom_jax.configs import tiny
  from graphloom_jax.pipeline import instance

  cfg = tiny.get_config()
  cfg.graph.singularize = False
  cfg.graph.tau_edge = 0.5
  rows = instance.pool_rows([
      Triple("Barack_Obama", "place_of_birth", "Honolulu", 1.0, "kb:a"),
      Triple("the  cat", "on", "Mat.", 0.4, "scene"),  # extracted, below tau_edge: dropped
      Triple("barack obama", "place_of_birth", "honolulu", 1.0, "kb:b"),  # same key: first wins
      Triple("Dog", "near", "the Mat", 0.9, "scene"),
  ], config=cfg)
  assert [t.key() for t in rows] == [("barack obama", "place_of_birth", "honolulu"),
                                     ("dog", "near", "mat")]
  assert rows[0].source == "kb:a"


@pytest.fixture(scope="module")
def tiny_system():
  from fakes import tiny_open_answer_system

  return tiny_open_answer_system()


def test_answers_from_a_shared_pool(tiny_system, monkeypatch):
  """A pool of exactly the question's instance rows answers as its own graph does; a pool with
  distractors about the question's topic is what retrieval reads, and the prefix keeps the
  question's own objects."""
  from graphloom_jax.evaluation import pathqa_rows
  from graphloom_jax.pipeline import instance
  from graphloom_jax.retrieval.subgraph import TriplePool

  system = tiny_system
  ds = pathquestion.load("PQ-2H", root=DATA / "pathquestion")
  q = ds.questions[0]
  own = pathqa_rows.system_row(system, ds, [q], "graphloom", batch=1, log=lambda *_: None)
  rows = instance.pool_rows(ds.instance_triples(q), config=system.config)
  same = TriplePool(rows, embedder=system.embedder)
  got = pathqa_rows.system_row(system, ds, [q], "graphloom", batch=1, log=lambda *_: None,
                               pool=same)
  for k in ("answer", "hits", "recall5", "prompt_tokens"):
    assert got[0][k] == own[0][k], k

  topic = system.instance_graph(ds.instance_triples(q)).objects
  extra = [Triple(q.topic, f"distractor_{i}", f"thing {i}", 1.0, "kb:noise") for i in range(40)]
  rows = instance.pool_rows(list(ds.instance_triples(q)) + extra, config=system.config)
  pool = TriplePool(rows, embedder=system.embedder)
  seen = []
  answer_batch = system.answer_batch

  def spy(questions, graphs, **kw):
    out = answer_batch(questions, graphs, **kw)
    seen.extend(zip(graphs, out))
    return out

  monkeypatch.setattr(system, "answer_batch", spy)
  pathqa_rows.system_row(system, ds, [q], "graphloom", batch=1, log=lambda *_: None, pool=pool)
  (graph, answer), = seen
  assert graph.pool is pool and graph.objects == topic
  keys = {t.key() for t in rows}
  assert all(t.key() in keys for t in answer.retrieved)
  noise = {t.key() for t in instance.pool_rows(extra, config=system.config)}
  assert any(t.key() in noise for t in answer.retrieved)  # the distractors are in reach


def test_answer_report_pairs_each_pool_with_the_own_graph_run(tmp_path):
  import json

  def put(pool, seed, hits, seconds=1.0, retrieval=0.002):
    recs = [dict(qid=str(i), hits=h, em=h, f1=h, recall5=50.0, seconds=seconds,
                 retrieval_seconds=retrieval) for i, h in enumerate(hits)]
    path = tmp_path / pool / f"seed{seed}" / "graphloom.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(dict(row="graphloom", pool=pool, seed=seed, records=recs)))

  put("instance", 0, [100.0, 100.0, 0.0, 100.0])
  put("instance", 1, [100.0, 0.0, 0.0, 100.0])
  put("1000000", 0, [0.0, 100.0, 0.0, 100.0], seconds=2.0, retrieval=0.004)
  put("1000000", 1, [0.0, 0.0, 0.0, 100.0], seconds=2.0, retrieval=0.004)
  put("10000", 0, [100.0, 100.0, 0.0, 100.0])
  lines = S.answer_report(tmp_path)
  table = [x for x in lines if x.startswith("| graphloom")]
  assert [x.split(" | ")[1] for x in table] == ["own instance graph", "10,000", "1,000,000"]
  # own graph: mean over both seeds' 8 records = 5 / 8
  assert table[0].startswith("| graphloom | own instance graph | 2 | 62.5 | 62.5 | 62.5 | 50.0 "
                             "| 1.00 | 2.0 | - |")
  # 1M against own, seeds averaged per question: q0 0 - 100 = -100, others 0: mean -25
  assert "| 1,000,000 | 2 | 37.5 |" in table[2] and "| 2.00 | 4.0 | -25.0 [" in table[2]
  # 10k ran seed 0 only: paired with seed 0 of the own graph, identical
  assert table[1].endswith("| +0.0 [+0.0, +0.0] |")
