"""The independent H-Rate verifier on hand-made ground truth and claims, and on a generated
SceneKB v2 (every gold answer supported, every distractor a hallucination)."""

import ast
import pathlib

import pytest

from graphloom_jax.data import build_benchmark, scenekb
from graphloom_jax.evaluation import hallucination as H

# One scene: a man holds a glass (a drinking glass: sense 100) that is on a table and wears a hat.
# The extractor also reported "man riding horse" (noise, even with a high confidence).
RECORDS = [
    {"kind": "sense", "name": "glass", "offset": 100, "rank": 2, "senses": 2, "gloss": "",
     "facts": [["glass", "is a", "container"], ["container", "is a", "instrumentality"]],
     "kind_of": ["container", "instrumentality", "artifact"]},
    {"kind": "sense", "name": "glass", "offset": 200, "rank": 1, "senses": 2, "gloss": "",
     "facts": [["glass", "is a", "solid"]], "kind_of": ["solid", "matter"]},
    {"kind": "sense", "name": "man", "offset": 300, "rank": 1, "senses": 1, "gloss": "",
     "facts": [["man", "is a", "male"]], "kind_of": ["male", "person"]},
    {"kind": "sense", "name": "hat", "offset": 400, "rank": 1, "senses": 1, "gloss": "",
     "facts": [["hat", "is a", "headdress"], ["headdress", "is a", "clothing"]],
     "kind_of": ["headdress", "clothing", "covering"]},
    {"kind": "sense", "name": "table", "offset": 500, "rank": 1, "senses": 1, "gloss": "",
     "facts": [["table", "is a", "furniture"]], "kind_of": ["furniture"]},
    {"kind": "instance", "instance_id": "I",
     "relations": [["man", "holding", "glass", 0.4, True], ["man", "wears", "hat", 0.9, True],
                   ["man", "riding", "horse", 0.8, False], ["glass", "on", "table", 0.6, True]],
     "senses": {"man": 300, "glass": 100, "hat": 400, "table": 500}},
    {"kind": "question", "qid": "q1", "instance_id": "I", "question": "What is the man holding?",
     "claims": [[[["man", "holding", "?x"]]]]},
    {"kind": "question", "qid": "q2", "instance_id": "I",
     "question": "What kind of thing is the glass?", "claims": [[[["glass", "is a", "?x"]]]]},
    {"kind": "question", "qid": "q3", "instance_id": "I",
     "question": "What kind of thing is the thing the man is holding?",
     "claims": [[[["man", "holding", "?y"], ["?y", "is a", "?x"]]]]},
    {"kind": "question", "qid": "q4", "instance_id": "I",
     "question": "Which is a kind of clothing: the thing the man is wearing or the thing the "
                 "glass is on?",
     "claims": [[[["man", "wearing", "?x"]], [["glass", "on", "?x"]]],
                [[["?x", "kind of", "clothing"]]]]},
]


@pytest.fixture(scope="module")
def verifier():
  return H.HallucinationVerifier(H.GroundTruth(RECORDS))


@pytest.mark.parametrize("qid,answer,entity,hallucinated", [
    ("q1", "glass", "glass", False),
    ("q1", "a glass", "glass", False),
    ("q1", "glasses", "glass", False),
    ("q1", "The man is holding a glass.", "glass", False),  # 'man' is the question's own word
    ("q1", "horse", "horse", True),  # the extractor's noise, not a real relation
    ("q1", "table", "table", True),
    ("q1", "unicorn", "unicorn", True),  # a name the truth does not know
    ("q2", "container", "container", False),
    ("q2", "instrumentality", "instrumentality", False),  # a farther kind: true, if not gold
    ("q2", "solid", "solid", True),  # the other sense of 'glass'
    ("q3", "container", "container", False),
    ("q3", "solid", "solid", True),
    ("q3", "furniture", "furniture", True),  # the table is furniture, the held glass is not
    ("q4", "hat", "hat", False),  # 'wears' in the scene is 'wearing' in the question
    ("q4", "table", "table", True),  # the glass is on the table, but a table is no clothing
    ("q4", "glass", "glass", True),
])
def test_answers_against_hand_made_truth(verifier, qid, answer, entity, hallucinated):
  v = verifier.check_answer(qid, answer)
  assert v.entity == entity
  assert v.hallucinated == hallucinated
  assert v.claims


@pytest.mark.parametrize("answer", ["", "I don't know", "Unknown.", "not sure"])
def test_abstentions_make_no_claim(verifier, answer):
  v = verifier.check_answer("q1", answer)
  assert v.entity is None and v.claims == [] and not v.hallucinated


def test_structured_claims(verifier):
  v = verifier.check_claims("I", [["man", "wearing", "hats"], ["The man", "wears", "hat"],
                                  ["man", "riding", "horse"], ["glass", "is a", "solid"],
                                  ["glass", "is a", "instrumentality"],
                                  ["hat", "kind of", "covering"], ["table", "on", "glass"]])
  assert [c.supported for c in v.claims] == [True, True, False, False, True, True, False]


def test_h_rate_per_condition(verifier):
  records = [
      {"condition": "graphloom", "qid": "q1", "answer": "glass"},
      {"condition": "graphloom", "qid": "q2", "answer": "container"},
      {"condition": "graphloom", "qid": "q3", "answer": "solid"},
      {"condition": "graphloom", "qid": "q1", "answer": "I don't know"},
      {"condition": "flat_rag", "qid": "q1", "answer": "horse"},
      {"condition": "flat_rag", "qid": "q4", "answer": "table"},  # 1 of its 2 claims fails
      {"condition": "flat_rag", "instance_id": "I",
       "claims": [["man", "holding", "glass"], ["glass", "is a", "solid"]]},
  ]
  report = H.h_rate(verifier, records)
  assert report["graphloom"] == {"answers": 4, "with_claims": 3, "hallucinated": 1, "claims": 3,
                                 "unsupported_claims": 1, "h_rate": 0.25,
                                 "claim_h_rate": pytest.approx(1 / 3)}
  assert report["flat_rag"] == {"answers": 3, "with_claims": 3, "hallucinated": 3, "claims": 5,
                                "unsupported_claims": 3, "h_rate": 1.0,
                                "claim_h_rate": pytest.approx(3 / 5)}


def test_errors_name_what_is_wrong(verifier):
  with pytest.raises(KeyError, match="q9"):
    verifier.check_answer("q9", "glass")
  with pytest.raises(ValueError, match="expected 'qid' and 'answer'"):
    verifier.check({"qid": "q1"})
  with pytest.raises(ValueError, match="no 'condition'"):
    H.h_rate(verifier, [{"qid": "q1", "answer": "glass"}])
  bad = [dict(RECORDS[5], senses={"man": 999})]
  with pytest.raises(ValueError, match="999"):
    H.GroundTruth(bad)


def test_shares_nothing_with_the_pipeline():
  tree = ast.parse(pathlib.Path(H.__file__).read_text())
  modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + \
      [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
  assert not [m for m in modules if m.startswith(("graphloom_jax.pipeline", "graphloom_jax.models",
                                                  "graphloom_jax.retrieval"))]


def test_generated_options_gold_supported_distractors_hallucinated(tmp_path):
  build_benchmark.build(tmp_path, num_scenes=120, seed=3, version=2)
  verifier = H.HallucinationVerifier(H.GroundTruth.load(tmp_path))
  records = []
  for split in scenekb.SPLITS:
    for q in scenekb.load(split, root=tmp_path).questions:
      for j, option in enumerate(q.extra["options"]):
        records.append({"condition": "gold" if j == q.extra["answer_index"] else "distractor",
                        "qid": q.qid, "answer": option})
  report = H.h_rate(verifier, records)
  assert report["gold"]["answers"] > 500 and report["gold"]["h_rate"] == 0.0
  assert report["distractor"]["h_rate"] == 1.0
  assert report["gold"]["with_claims"] == report["gold"]["answers"]


def test_paper_h_rate_checks_claims_against_the_given_evidence(verifier):
  """Supported (in the given evidence) and true (in the truth) are separate verdicts."""
  evidence = [("man", "holding", "glass"), ("glass", "is a", "container"),
              ("container", "is a", "instrumentality"), ("man", "riding", "horse")]
  # right and in the evidence
  a = H.assess(verifier, "q1", "glass", evidence)
  assert [(c.origin, c.supported, c.true) for c in a.claims] == [("answer", True, True)]
  # true, but the evidence does not hold it: unsupported (the paper's hallucination)
  a = H.assess(verifier, "q1", "glass", [("man", "wears", "hat")])
  assert [(c.supported, c.true) for c in a.claims] == [(False, True)]
  # no evidence given (no retrieval): nothing is supported
  assert not H.assess(verifier, "q2", "container", []).claims[0].supported
  # 'kind of' through the evidence's 'is a' chain; a two-hop claim with an existential
  a = H.assess(verifier, "q3", "container", evidence)
  assert [(c.supported, c.true) for c in a.claims] == [(True, True)]
  # supported by noise in the evidence yet false
  a = H.assess(verifier, "q1", "horse", [("man", "holding", "horse")])
  assert [(c.supported, c.true) for c in a.claims] == [(True, False)]
  # cited triples and asserted evidence lines are claims of their own
  a = H.assess(verifier, "q1", "glass. The man riding horse. glass is a solid.", evidence,
               cited=[("glass", "on", "table")])
  got = {(c.origin, c.alternatives[0][0]): (c.supported, c.true) for c in a.claims}
  assert got[("cited", ("glass", "on", "table"))] == (False, True)
  assert got[("asserted", ("man", "riding", "horse"))] == (True, False)
  assert got[("asserted", ("glass", "is a", "solid"))] == (False, False)  # the other sense
  # abstentions make no claim and count apart
  none = H.assess(verifier, "q1", "I don't know", evidence)
  assert none.abstained and none.claims == []
  rates = H.paper_rates([H.assess(verifier, "q1", "glass", evidence),
                         H.assess(verifier, "q1", "horse", [("man", "holding", "horse")]),
                         H.assess(verifier, "q1", "glass", []), none])
  assert rates == {"answers": 4, "claims": 3, "h_rate": pytest.approx(100 / 3),
                   "falsity": pytest.approx(100 / 3), "abstention": 25.0}
