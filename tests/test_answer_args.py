"""`GraphLoom.answer` / `answer_batch` argument types: each wrong type is a TypeError naming the
argument and the question, raised before any stage runs (options given as one string were read
as a list of its characters)."""

import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import GraphLoom
from graphloom_jax.pipeline.arguments import check_answer_args

from fakes import HashEmbed

TRIPLES = [{"subject": "horse", "relation": "in front of", "object": "fence"}]


@pytest.mark.parametrize("kwargs, match", [
    (dict(questions="What?"), "questions must be a list of strings"),
    (dict(questions=[3]), "question 0 must be a string, got int"),
    (dict(questions=["ok", None]), "question 1 must be a string, got NoneType"),
    (dict(options="abcd"), "options must be a list with one entry per question"),
    (dict(options=["abcd"]), "options of question 0 must be a list of strings, got a string"),
    (dict(options=[["a", 2]]), "options of question 0 must be a list of strings"),
    (dict(objects=["horse"]), "objects of question 0 must be a list of strings, got a string"),
    (dict(objects={"q": ["horse"]}), "objects must be a list"),
    (dict(triples="scene.jsonl"), "triples must be a list"),
    (dict(triples=["scene.jsonl"]), "triples of question 0 must be Triple records"),
    (dict(mode=1), "mode must be a string"),
])
def test_wrong_types_named(kwargs, match):
  args = dict(questions=["What is the horse in front of?"], triples=[TRIPLES], objects=None,
              options=None, mode="graphloom")
  args.update(kwargs)
  questions, triples = args.pop("questions"), args.pop("triples")
  with pytest.raises(TypeError, match=match):
    check_answer_args(questions, triples, **args)


def test_good_arguments_pass():
  check_answer_args(["Why?", "Where?"], [TRIPLES, TRIPLES], objects=[["horse"], None],
                    options=[("a", "b"), None], mode="no_retrieval")


@pytest.fixture(scope="module")
def system():
  cfg = tiny.get_config()
  return GraphLoom(cfg, decoder_lib.from_config(cfg.model), HashEmbed(), None)


@pytest.mark.parametrize("call, match", [
    (lambda s: s.answer(42, TRIPLES, mode="no_retrieval"), "question 0 must be a string"),
    (lambda s: s.answer("Why?", TRIPLES, options="yes,no", mode="no_retrieval"),
     "options of question 0 must be a list of strings, got a string"),
    (lambda s: s.answer("Why?", TRIPLES, objects="horse", mode="no_retrieval"),
     "objects of question 0"),
    (lambda s: s.answer_batch(["Why?"], [TRIPLES], options=[["a", None]],
                              mode="no_retrieval"), "options of question 0"),
])
def test_system_refuses_wrong_types_before_any_stage(system, call, match):
  with pytest.raises(TypeError, match=match):
    call(system)
