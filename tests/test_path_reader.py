"""The non-learned path readers (graphloom_jax.graph.path_reader) on hand-made KBs and the
PathQuestion / WorldCup2014 fixtures: the naive Bayes scores against the formula written out
here, hop-count choice, beam search over the KB, the answer prior, the topic echo, the one-hop
lookup and conjunctive questions."""

import math
import pathlib

import pytest

from graphloom_jax.data import pathqa, pathquestion, wc2014
from graphloom_jax.graph import path_reader
from graphloom_jax.graph.path_reader import Lexicon, PathReader, question_words

DATA = pathlib.Path(__file__).resolve().parent / "data"
KB = [("anna", "mother", "beth"), ("anna", "father", "carl"), ("beth", "born_in", "oslo"),
      ("carl", "born_in", "rome"), ("beth", "job", "poet"), ("carl", "job", "baker"),
      ("dora", "mother", "beth"), ("oslo", "country", "norway")]


def q(text, *path, answers=None):
  path = tuple(path)
  return pathqa.Question(qid=text, question=text, raw_question=text,
                         answers=answers or (path[-1],), answer_ids=answers or (path[-1],),
                         paths=(path,), split="train", line_split="train", line=1)


TRAIN = [q("where was dora 's mum born ?", "dora", "mother", "beth", "born_in", "oslo"),
         q("birthplace of anna 's dad ?", "anna", "father", "carl", "born_in", "rome"),
         q("what does anna 's dad do ?", "anna", "father", "carl", "job", "baker"),
         q("what does dora 's mum do ?", "dora", "mother", "beth", "job", "poet"),
         q("who is dora 's mum ?", "dora", "mother", "beth")]


def test_question_words_drop_the_topic_mention():
  assert question_words("where was ada_lovelace 's father born ?", "ada_lovelace") == \
      ["where", "was", "s", "father", "born"]


def test_hop_scores_are_the_naive_bayes_formula():
  lex = Lexicon.fit(TRAIN, alpha=0.5)
  words = question_words("where was anna 's mum born ?", "anna")
  vocabulary = {w for t in TRAIN for w in question_words(t.raw_question, t.path[0])}
  # relation "mother" at hop 0: in 3 of 5 train paths; its questions' words
  mum_words = [w for t in TRAIN if t.path[1] == "mother"
               for w in question_words(t.raw_question, t.path[0])]
  want = math.log((3 + 0.5) / (5 + 0.5)) + sum(
      math.log((mum_words.count(w) + 0.5) / (len(mum_words) + 0.5 * (len(vocabulary) + 1)))
      for w in words)
  assert lex.hop_score("mother", 0, words) == pytest.approx(want, rel=1e-12)
  assert lex.hop_score("mother", 0, words) > lex.hop_score("father", 0, words)
  # hop counts: 4 questions of 2 hops, 1 of 1
  assert lex.hop_count(words) == 2
  assert lex.hop_count(question_words("who is anna 's mum ?", "anna")) == 1


def test_readers_follow_the_kb():
  reader = PathReader(KB).fit(TRAIN)
  test = q("where was anna 's mum born ?", "anna", "mother", "beth", "born_in", "oslo")
  got = reader.read(test, "lexicon")
  assert got.relations == (("mother", "born_in"),) and got.answer == "oslo"
  assert reader.read(test, "oracle").answer == "oslo"
  job = q("what does anna 's mum do ?", "anna", "mother", "beth", "job", "poet")
  assert reader.read(job, "lexicon").answer == "poet"
  # the prior: the most frequent train answer of the final relation (ties: smallest id)
  assert reader.read(test, "prior").answer == "oslo"
  assert reader.read(job, "prior").answer == "baker"
  assert reader.read(test, "prior").relations == ()
  # the topic reader echoes the entity the question names, without the KB
  assert reader.read(test, "topic").answer == "anna"
  assert PathReader([]).read(test, "topic") == path_reader.Reading("anna", ("anna",), ())
  loop = q("who is the mum of anna 's child ?", "anna", "child", "eve", "mother", "anna")
  assert reader.read(loop, "topic").answer in loop.answer_ids
  # a relation the KB lacks from the topic reaches nothing
  lost = q("where was oslo 's mum born ?", "oslo", "mother", "x", "born_in", "y")
  assert reader.read(lost, "oracle").answer is None
  with pytest.raises(ValueError, match="unknown reader"):
    reader.read(test, "guess")
  with pytest.raises(ValueError, match="fit"):
    PathReader(KB).read(test, "lexicon")


def test_one_hop_reader_finds_a_direct_fact_equal_to_the_path():
  # p's club's country is also p's own "nation" fact for p1 and p2 (a one-hop shortcut), and
  # "league" only for p1; p3's nation is not its club's country
  kb = [("p1", "club", "c1"), ("c1", "country", "es"), ("p1", "nation", "es"),
        ("p1", "league", "es"), ("p2", "club", "c2"), ("c2", "country", "fr"),
        ("p2", "nation", "fr"), ("p2", "age", "30"), ("p3", "club", "c3"),
        ("c3", "country", "it"), ("p3", "nation", "de"), ("c1", "city", "bilbao")]
  train = [q("where is p1 's club ?", "p1", "club", "c1", "country", "es"),
           q("where is p2 's club ?", "p2", "club", "c2", "country", "fr"),
           q("which city is p1 's club in ?", "p1", "club", "c1", "city", "bilbao")]
  reader = PathReader(kb).fit(train)
  # country: nation reaches only gold twice, league once, club and age never; city: none
  assert reader.one_hop == {"country": "nation"}
  got = reader.read(q("where is p3 's club ?", "p3", "club", "c3", "country", "it"), "one_hop")
  assert got == path_reader.Reading("de", ("de",), (("nation",),))  # the shortcut can be wrong
  assert reader.read(train[1], "one_hop").answer == "fr"
  assert reader.read(train[2], "one_hop") == path_reader.Reading(None, (), ())
  # a topic without the chosen relation reaches nothing
  assert reader.read(q("where is c1 's club ?", "c1", "club", "x", "country", "y"),
                     "one_hop").answer is None
  # ties go to the smallest relation name
  tied = PathReader(kb).fit(train[:1])
  assert tied.one_hop == {"country": "league"}


def test_reached_entities_keep_kb_order_and_conjunctions_meet():
  kb = [("x", "r", "b"), ("x", "r", "a"), ("y", "s", "a")]
  conj = pathqa.Question(qid="c", question="", raw_question="r x s y", answers=("a",),
                         answer_ids=("a",), paths=(("x", "r", "a"), ("y", "s", "a")),
                         split="test", line_split="test", line=1)
  got = PathReader(kb).read(conj, "oracle")
  assert got.answer == "a" and got.reached == ("a",)
  single = pathqa.Question(qid="s", question="", raw_question="r x", answers=("a",),
                           answer_ids=("a",), paths=(("x", "r", "a"),), split="test",
                           line_split="test", line=1)
  assert PathReader(kb).read(single, "oracle").reached == ("b", "a")


@pytest.mark.parametrize("name,module,root", [("PQ-2H", pathquestion, "pathquestion"),
                                              ("PQ-3H", pathquestion, "pathquestion"),
                                              ("PQL-2H", pathquestion, "pathquestion"),
                                              ("WC-M", wc2014, "wc2014"),
                                              ("WC-C", wc2014, "wc2014")])
def test_oracle_answers_every_fixture_question_and_lexicon_its_train_set(name, module, root):
  ds = module.load(name, root=DATA / root)
  reader = PathReader(ds.kb).fit(ds.questions)
  for question in ds.questions:
    assert reader.read(question, "oracle").answer in question.answer_ids
  right = sum(reader.read(x, "lexicon").answer in x.answer_ids for x in ds.questions)
  assert right >= 0.5 * len(ds.questions)
  assert set(path_reader.READERS) == {"oracle", "lexicon", "prior", "topic", "one_hop"}


def test_tables_on_the_fixtures():
  from graphloom_jax.evaluation import intervals, pathqa_tables
  ds = pathquestion.load("PQ-3H", root=DATA / "pathquestion")
  got = pathqa_tables.evaluate(ds, resamples=200)
  for protocol, entry in got["protocols"].items():
    stats = entry["statistics"]
    assert sum(stats["questions"].values()) == 4
    if protocol == "path":
      assert stats["test_path_in_train"] in (0.0, None)
    for reader, splits in entry["readers"].items():
      for split, r in splits.items():
        questions = ds.split(split, protocol)
        assert r["questions"] == len(questions)
  text = pathqa_tables.report({"PQ-3H": got})
  assert "| PQ-3H |" in text and "QAGCN 90.6" in text
  table = [l for l in text.split("## Split statistics")[0].splitlines() if l.startswith("|")]
  assert "topic entity" in table[0]
  assert len({l.count("|") for l in table}) == 1  # every row fills every column
  for protocol, entry in got["protocols"].items():
    for split, r in entry["readers"]["topic"].items():
      questions = ds.split(split, protocol)
      assert r["hits_at_1"] == round(100.0 * sum(
          any(p[0] in q.answer_ids for p in q.paths) for q in questions) / len(questions), 1)
  lo, hi = intervals.bootstrap_interval(__import__("numpy").array([0.0, 100.0] * 50), 500)
  assert lo < 50.0 < hi
