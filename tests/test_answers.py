"""Multiple-choice scoring (vs PyTorch), MMQA/DROP EM-F1 and VQA accuracy (hand-computed
cases from the official definitions)."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from graphloom_jax.evaluation import answers
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import llama
from graphloom_jax.pipeline import decode


@pytest.mark.parametrize("pred,gold,em,f1", [
    ("The Eiffel Tower", "eiffel tower", 1.0, 1.0),
    ("3.0", "3", 1.0, 1.0),
    ("U.S.", "us", 1.0, 1.0),
    ("well-known", "well known", 1.0, 1.0),
    ("red car", "blue car", 0.0, 0.5),
    ("5 apples", "6 apples", 0.0, 0.0),  # gold number missing from the prediction -> F1 0
    (["A", "B"], ["b", "a"], 1.0, 1.0),
    (["a", "a"], ["a"], 0.0, 0.5),  # same set, different count: not EM; F1 averages 2 slots
    # gold x pred F1: london/"london x" = 2/3, the rest 0 -> mean over 2 gold = 0.33
    (["paris", "london x"], ["london", "berlin"], 0.0, 0.33),
    ("", "", 1.0, 1.0),
])
def test_answer_metrics_hand_computed(pred, gold, em, f1):
  assert answers.answer_metrics(pred, gold) == (em, f1)


# Number words, as the official MultimodalQA scorer reads them (word2number, token by token).
@pytest.mark.parametrize("pred,gold,em,f1", [
    ("three", "3", 1.0, 1.0),  # "three" -> 3 -> "3.0" == float("3") -> "3.0"
    ("4", "Four", 1.0, 1.0),
    # gold {"4.0", "teams"}, pred {"4.0"}: P = 1, R = 1/2, F1 = 2/3 -> 0.67
    ("Four", "4 teams", 0.0, 0.67),
    ("teams", "Four teams", 0.0, 0.0),  # the gold's number 4 is missing from the prediction
    # each token alone: "one" -> 1.0, "hundred" -> 100.0; pred {1.0, 100.0} vs gold {100.0}:
    # P = 1/2, R = 1, F1 = 2/3
    ("one hundred", "100", 0.0, 0.67),
    # split on the hyphen first: {20.0, 1.0} has no 21.0 -> F1 0
    ("twenty-one", "21", 0.0, 0.0),
    ("point", "0", 1.0, 1.0),  # word2number reads a lone "point" as 0
    ("The one", "1", 1.0, 1.0),  # article dropped, "one" -> 1.0
    ("an apple", "Apple.", 1.0, 1.0),
    ("state-of-the-art", "state of art", 1.0, 1.0),  # the hyphens split, "the" goes
    ("1,000", "1000", 1.0, 1.0),  # not a number until the comma goes; then 1000.0
    ("3.50", "3.5", 1.0, 1.0),
    ("$5", "5 dollars", 0.0, 0.67),  # "$5" -> "5" -> 5.0; P = 1, R = 1/2
    (["two", "Paris"], ["paris", "2"], 1.0, 1.0),
    # gold [3.0 | "red"], pred ["three", "blue"]: 3.0 pairs with "three" (F1 1), "red" with
    # "blue" (0): mean 0.5
    (["three", "blue"], ["3", "red"], 0.0, 0.5),
])
def test_answer_metrics_number_words(pred, gold, em, f1):
  assert answers.answer_metrics(pred, gold) == (em, f1)


def test_normalize_answer_tokens():
  assert answers.normalize_answer("The Two-Thirds, of  a cup") == "2.0 thirds of cup"
  assert answers.normalize_answer("seven hundred") == "7.0 100.0"


def test_answer_contains_names_the_gold_as_whole_words():
  gold = ["Michelle Obama", "Michelle LaVaughn Robinson Obama"]
  assert answers.answer_contains("His spouse is Michelle Obama.", gold) == 1.0
  assert answers.answer_contains("michelle obama", gold) == 1.0
  assert answers.answer_contains("Michelle LaVaughn Robinson Obama, born 1964", gold) == 1.0
  assert answers.answer_contains("Michelle", gold) == 0.0  # a part of the name
  assert answers.answer_contains("Obama Michelle", gold) == 0.0  # the words out of order
  assert answers.answer_contains("female", ["male"]) == 0.0  # not inside a word
  assert answers.answer_contains("She is female.", ["Female"]) == 1.0
  assert answers.answer_contains("the two-thirds rule", ["2/3", "two thirds"]) == 1.0
  assert answers.answer_contains("anything", ["the"]) == 0.0  # nothing left of the gold
  assert answers.answer_contains("", ["x"]) == 0.0
  # a whole-word match is a hit wherever Hits@1 is one
  for pred in ("hard times", "Hard Times (Live).", "hard"):
    assert answers.answer_contains(pred, ["Hard Times"]) >= answers.hits_at_1(pred, ["Hard Times"])


def test_hits_at_1_over_alternative_answers():
  gold = ["Hard Times (live)", "Hard Times"]
  assert answers.hits_at_1("hard times", gold) == 1.0
  assert answers.hits_at_1("Hard Times (Live).", gold) == 1.0
  assert answers.hits_at_1("hard", gold) == 0.0
  assert answers.hits_at_1("The answer is Hard Times", gold) == 0.0
  assert answers.hits_at_1("", ["the"]) == 0.0  # nothing left after normalisation
  assert answers.best_answer_metrics("hard times live", gold) == (1.0, 1.0)
  em, f1 = answers.best_answer_metrics("hard", gold)
  assert em == 0.0 and f1 == pytest.approx(0.67)  # 2PR/(P+R) with P=1, R=1/2 against "hard times"


def test_mean_metrics():
  m = answers.mean_answer_metrics(["red car", "paris"], ["blue car", "Paris"])
  assert m == {"em": 50.0, "f1": 75.0, "count": 2}
  with pytest.raises(ValueError, match="2 predictions for 1"):
    answers.mean_answer_metrics(["a", "b"], ["a"])


TEN = 10


@pytest.mark.parametrize("pred,humans,acc", [
    # 1 matching human: leaving it out gives 0 matches (acc 0), leaving out any of the other 9
    # gives 1 match (1/3): mean = 9 * (1/3) / 10 = 0.3
    ("Red", ["red"] + ["blue"] * 9, 0.3),
    # 2 matches: the 2 left out see 1 (1/3), the 8 others see 2 (2/3): (2/3 + 16/3) / 10 = 0.6
    ("red", ["red"] * 2 + ["blue"] * 8, 0.6),
    # 3 matches: the 3 left out see 2 (2/3), the 7 others see 3 (1): (2 + 7) / 10 = 0.9,
    # not the 1.0 of min(3 / 3, 1) over all ten
    ("two", ["2"] * 3 + ["3"] * 7, 0.9),  # "two" -> "2"
    ("3", ["2"] * 3 + ["3"] * 7, 1.0),  # 7 matches: every subset of 9 has >= 6
    ("The dog.", ["dog"] * 4 + ["puppy"] * 6, 1.0),  # period and article go: 4 matches
    ("dont know", ["don't know"] * 5 + ["no idea"] * 5, 1.0),  # contraction map
    ("ten", ["10"] * 4 + ["many"] * 6, 1.0),
    ("none", ["0"] * 1 + ["no"] * 9, 0.3),  # "none" -> "0"
    ("Yes!", ["yes"] * 9 + ["Yes"], 1.0),  # mixed: "!" becomes a space, case folds
    ("1,000", ["1000"] * 5 + ["thousand"] * 5, 1.0),  # digit,digit: punctuation removed
    ("3.5", ["3.5"] * 3 + ["4"] * 7, 0.9),  # a period before a digit stays
    # Answers are normalised only when the humans differ: "t-shirt" becomes "t shirt" here,
    # like the prediction (5 matches) ...
    ("T-shirt", ["t-shirt"] * 5 + ["shirt"] * 5, 1.0),
    # ... but a unanimous list and the prediction are compared as written
    ("T-shirt", ["t-shirt"] * TEN, 0.0),
    ("t-shirt", ["t-shirt"] * TEN, 1.0),
    ("Yes!", ["yes"] * TEN, 0.0),
    ("yes", ["Yes"] * TEN, 0.0),
    ("three", ["three"] * TEN, 1.0),
    (" yes\n", ["yes"] * TEN, 1.0),  # newlines and tabs become spaces, then strip
    ("cat", ["dog"] * TEN, 0.0),
])
def test_vqa_accuracy_hand_computed(pred, humans, acc):
  assert answers.vqa_accuracy(pred, humans) == pytest.approx(acc, abs=1e-12)


def test_vqa_normalization_and_mean():
  assert answers.normalize_vqa_prediction("  A  Two-Story\tHouse? ") == "2 story house"
  assert answers.normalize_vqa_prediction("isnt it") == "isn't it"
  # (0.3 + 1.0) / 2 in percent
  m = answers.mean_vqa_accuracy(["red", "3"], [["red"] + ["blue"] * 9, ["3"] * TEN])
  assert m["accuracy"] == pytest.approx(65.0) and m["count"] == 2
  with pytest.raises(ValueError, match="no human answers"):
    answers.vqa_accuracy("x", [])
  with pytest.raises(ValueError, match="2 predictions for 1"):
    answers.mean_vqa_accuracy(["a", "b"], [["a"] * TEN])


def test_option_logprob_matches_torch():
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((5, 9, 11)).astype(np.float32)
  tokens = rng.integers(0, 11, (5, 9))
  mask = rng.uniform(size=(5, 9)) < 0.5
  mask[:, 0] = False
  mask[4] = False
  got = np.asarray(decode.option_logprob(jnp.asarray(logits), jnp.asarray(tokens),
                                         jnp.asarray(mask)))
  logp = torch.log_softmax(torch.tensor(logits), -1)
  for r in range(4):
    pos = np.flatnonzero(mask[r])
    want = np.mean([logp[r, i - 1, tokens[r, i]].item() for i in pos])
    assert got[r] == pytest.approx(want, abs=1e-5)
  assert got[4] == -np.inf


def test_score_options_with_tiny_decoder_matches_per_option_torch():
  cfg = llama.LlamaConfig.from_hf(dict(
      vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
      rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=64))
  dec = decoder_lib.random_decoder(cfg, seed=3)
  rng = np.random.default_rng(2)
  prompts = [list(rng.integers(1, 64, 5)), list(rng.integers(1, 64, 3))]
  options = [[list(rng.integers(1, 64, n)) for n in (1, 3, 2)] for _ in prompts]
  rows = [(p, o) for p, opts in zip(prompts, options) for o in opts]  # [prompt ; option] rows
  tokens = np.zeros((len(rows), 12), np.int32)
  valid, option_mask = np.zeros(tokens.shape, bool), np.zeros(tokens.shape, bool)
  for r, (p, o) in enumerate(rows):
    tokens[r, :len(p) + len(o)], valid[r, :len(p) + len(o)] = p + o, True
    option_mask[r, len(p):len(p) + len(o)] = True
  scores = np.asarray(decode.option_logprob(jnp.asarray(dec.logits(tokens, valid)),
                                            jnp.asarray(tokens), jnp.asarray(option_mask)))
  scores = scores.reshape(len(prompts), -1)
  for b, prompt in enumerate(prompts):
    for j, opt in enumerate(options[b]):
      row = np.asarray([prompt + opt], np.int32)  # unpadded, one at a time
      logp = torch.log_softmax(torch.tensor(dec.logits(row))[0], -1)
      want = np.mean([logp[len(prompt) + i - 1, o].item() for i, o in enumerate(opt)])
      assert scores[b, j] == pytest.approx(want, abs=1e-4)
  np.testing.assert_array_equal(answers.choose(scores), np.argmax(scores, -1))
  assert answers.choose(np.array([[0.5, 0.5, 0.1]]))[0] == 0
