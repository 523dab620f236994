"""Answer scoring: multiple choice by length-normalised log-likelihood, MMQA-style EM / F1.

Shapes: B batch, J options, T sequence length, V vocabulary.

Multiple choice (docs/method.md §5): option j of a question is scored
  score_j = (1 / |o_j|) sum_i log p(o_j,i | memory, Q, o_j,<i)
(`pipeline.decode.option_logprob`, where the decoder runs), and the choice is argmax_j
(`choose`: ties go to the lower option index).

Open answers (MMQA): the official MultimodalQA scorer (allenai/multimodalqa,
baselines/evaluate.py), which is DROP's answer-set EM and token F1 plus number words. Each
answer is normalised token by token: split on spaces and hyphens; lowercase; punctuation removed
unless the token is a number; a number is canonicalised by float(), and a token that
word2number reads as a number ("Four", "hundred", even "point") becomes that number; articles
a/an/the removed; whitespace folded. Predicted and gold answer lists are aligned one-to-one by
the Hungarian algorithm on bag-of-token F1 (zero when the gold has numbers and none of them
appears in the prediction); F1 is the mean over the aligned pairs (over the longer list)
rounded to 2 decimals, and EM needs the same set and number of normalised answers.

VQA accuracy (OK-VQA): the official VQA evaluation (GT-Vision-Lab/VQA, vqaEval.py); see
`vqa_accuracy`.
"""

import re
import string
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linear_sum_assignment
from word2number import w2n


# ---------------------------------------------------------------- open answers (DROP / MMQA)

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def _is_number(text: str) -> bool:
  try:
    float(text)
    return True
  except ValueError:
    return False


def _word_number(token: str) -> float | None:
  try:
    return w2n.word_to_num(token)
  except ValueError:
    return None
  except IndexError:  # "million\nthousand" and the like: the official scorer crashes on them
    return None


def _normalize_token(token: str) -> str:
  token = token.lower()
  if not _is_number(token):
    token = "".join(ch for ch in token if ch not in _PUNCT)
  if _is_number(token):
    token = str(float(token))
  elif (number := _word_number(token)) is not None:
    token = str(float(number))
  token = _ARTICLES.sub(" ", token)
  return " ".join(token.split())


def normalize_answer(text: str) -> str:
  parts = [_normalize_token(tok) for tok in re.split(" |-", str(text))]
  return " ".join(p for p in parts if p.strip()).strip()


def _bags(answers: str | Sequence[str]) -> tuple[list[str], list[set[str]]]:
  spans = [answers] if isinstance(answers, str) else list(answers)
  normalized = [normalize_answer(s) for s in spans]
  return normalized, [set(s.split()) for s in normalized]


def _bag_f1(predicted: set[str], gold: set[str]) -> float:
  inter = len(gold & predicted)
  precision = inter / len(predicted) if predicted else 1.0
  recall = inter / len(gold) if gold else 1.0
  if precision == 0.0 and recall == 0.0:
    return 0.0
  return 2 * precision * recall / (precision + recall)


def _numbers_match(gold: set[str], predicted: set[str]) -> bool:
  gold_numbers = {w for w in gold if _is_number(w)}
  return not gold_numbers or bool(gold_numbers & {w for w in predicted if _is_number(w)})


def answer_metrics(predicted: str | Sequence[str], gold: str | Sequence[str]) -> tuple[float, float]:
  """(EM, F1) of one prediction (a string or a list of answers) against the gold answer(s)."""
  pred_spans, pred_bags = _bags(predicted)
  gold_spans, gold_bags = _bags(gold)
  em = float(set(pred_spans) == set(gold_spans) and len(pred_spans) == len(gold_spans))
  scores = np.zeros((len(gold_bags), len(pred_bags)))
  for g, gb in enumerate(gold_bags):
    for p, pb in enumerate(pred_bags):
      if _numbers_match(gb, pb):
        scores[g, p] = _bag_f1(pb, gb)
  best = np.zeros(max(len(gold_bags), len(pred_bags)))
  rows, cols = linear_sum_assignment(-scores)
  for r, c in zip(rows, cols):
    best[r] = max(best[r], scores[r, c])
  # numpy's rounding (as the official scorer applies it to a numpy mean), not Python's.
  return em, float(np.round(np.mean(best), 2)) if best.size else 0.0


def hits_at_1(predicted: str, gold: Sequence[str]) -> float:
  """1.0 when the answer, normalised as `normalize_answer`, equals one of the gold answers
  (alternatives, e.g. a PathQuestion answer set), else 0.0: Hits@1 of a text answer."""
  got = normalize_answer(predicted)
  return float(bool(got) and any(got == normalize_answer(g) for g in gold))


def answer_contains(predicted: str, gold: Sequence[str]) -> float:
  """1.0 when one of the gold answers, normalised as `normalize_answer`, occurs in the
  normalised answer as a run of whole words ("the spouse is Michelle Obama" names "Michelle
  Obama"; "female" does not name "male"), else 0.0: the lenient hit of open-answer KG-QA with
  free-form generators, which credits an answer that names the gold inside a sentence."""
  words = normalize_answer(predicted).split()
  for g in gold:
    want = normalize_answer(g).split()
    if want and any(words[i:i + len(want)] == want for i in range(len(words) - len(want) + 1)):
      return 1.0
  return 0.0


def best_answer_metrics(predicted: str, gold: Sequence[str]) -> tuple[float, float]:
  """(EM, F1) against the best-matching one of several alternative gold answers."""
  scores = [answer_metrics(predicted, g) for g in gold]
  return max(s[0] for s in scores), max(s[1] for s in scores)


def open_answer_scores(predicted: str, gold: Sequence[str]) -> dict[str, float]:
  """Hits@1, EM and F1 (percent) of one open answer against its alternative gold answers
  (a PathQuestion answer set): `hits_at_1` and `best_answer_metrics`."""
  em, f1 = best_answer_metrics(predicted, gold)
  return {"hits": 100.0 * hits_at_1(predicted, gold), "em": 100.0 * em, "f1": 100.0 * f1}


def mean_answer_metrics(predictions: Sequence, golds: Sequence) -> dict[str, float]:
  """Mean EM and F1 (in percent) over aligned lists of predictions and gold answers."""
  if len(predictions) != len(golds):
    raise ValueError(f"{len(predictions)} predictions for {len(golds)} gold answers")
  if not golds:
    return {"em": 0.0, "f1": 0.0, "count": 0}
  pairs = [answer_metrics(p, g) for p, g in zip(predictions, golds)]
  return {"em": 100 * float(np.mean([e for e, _ in pairs])),
          "f1": 100 * float(np.mean([f for _, f in pairs])), "count": len(pairs)}


# ---------------------------------------------------------------- VQA accuracy (OK-VQA)

# The official VQA evaluation's tables (GT-Vision-Lab/VQA, vqaEval.py), quirks kept: the map
# turns answer words back into contractions, and "somebody'd" maps to "somebodyd".
_VQA_CONTRACTIONS = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've",
    "couldnt": "couldn't", "couldn'tve": "couldn't've", "couldnt've": "couldn't've",
    "didnt": "didn't", "doesnt": "doesn't", "dont": "don't", "hadnt": "hadn't",
    "hadnt've": "hadn't've", "hadn'tve": "hadn't've", "hasnt": "hasn't", "havent": "haven't",
    "hed": "he'd", "hed've": "he'd've", "he'dve": "he'd've", "hes": "he's", "howd": "how'd",
    "howll": "how'll", "hows": "how's", "Id've": "I'd've", "I'dve": "I'd've", "Im": "I'm",
    "Ive": "I've", "isnt": "isn't", "itd": "it'd", "itd've": "it'd've", "it'dve": "it'd've",
    "itll": "it'll", "let's": "let's", "maam": "ma'am", "mightnt": "mightn't",
    "mightnt've": "mightn't've", "mightn'tve": "mightn't've", "mightve": "might've",
    "mustnt": "mustn't", "mustve": "must've", "neednt": "needn't", "notve": "not've",
    "oclock": "o'clock", "oughtnt": "oughtn't", "ow's'at": "'ow's'at", "'ows'at": "'ow's'at",
    "'ow'sat": "'ow's'at", "shant": "shan't", "shed've": "she'd've", "she'dve": "she'd've",
    "she's": "she's", "shouldve": "should've", "shouldnt": "shouldn't",
    "shouldnt've": "shouldn't've", "shouldn'tve": "shouldn't've", "somebody'd": "somebodyd",
    "somebodyd've": "somebody'd've", "somebody'dve": "somebody'd've",
    "somebodyll": "somebody'll", "somebodys": "somebody's", "someoned": "someone'd",
    "someoned've": "someone'd've", "someone'dve": "someone'd've", "someonell": "someone'll",
    "someones": "someone's", "somethingd": "something'd", "somethingd've": "something'd've",
    "something'dve": "something'd've", "somethingll": "something'll", "thats": "that's",
    "thered": "there'd", "thered've": "there'd've", "there'dve": "there'd've",
    "therere": "there're", "theres": "there's", "theyd": "they'd", "theyd've": "they'd've",
    "they'dve": "they'd've", "theyll": "they'll", "theyre": "they're", "theyve": "they've",
    "twas": "'twas", "wasnt": "wasn't", "wed've": "we'd've", "we'dve": "we'd've",
    "weve": "we've", "werent": "weren't", "whatll": "what'll", "whatre": "what're",
    "whats": "what's", "whatve": "what've", "whens": "when's", "whered": "where'd",
    "wheres": "where's", "whereve": "where've", "whod": "who'd", "whod've": "who'd've",
    "who'dve": "who'd've", "wholl": "who'll", "whos": "who's", "whove": "who've",
    "whyll": "why'll", "whyre": "why're", "whys": "why's", "wont": "won't",
    "wouldve": "would've", "wouldnt": "wouldn't", "wouldnt've": "wouldn't've",
    "wouldn'tve": "wouldn't've", "yall": "y'all", "yall'll": "y'all'll", "y'allll": "y'all'll",
    "yall'd've": "y'all'd've", "y'alld've": "y'all'd've", "y'all'dve": "y'all'd've",
    "youd": "you'd", "youd've": "you'd've", "you'dve": "you'd've", "youll": "you'll",
    "youre": "you're", "youve": "you've",
}
_VQA_NUMBERS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4",
                "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
_VQA_ARTICLES = {"a", "an", "the"}
_VQA_PUNCT = [";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<",
              "@", "`", ",", "?", "!"]
# "(?!<=\d)" is a lookahead (the official typo for a lookbehind), so this strips every period
# not followed by a digit.
_VQA_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
_VQA_DIGIT_COMMA = re.compile(r"(\d)(\,)(\d)")


def _vqa_punctuation(text: str) -> str:
  out = text
  for p in _VQA_PUNCT:
    if p + " " in text or " " + p in text or _VQA_DIGIT_COMMA.search(text) is not None:
      out = out.replace(p, "")
    else:
      out = out.replace(p, " ")
  # The official call passes re.UNICODE (32) where `count` goes: at most 32 periods go.
  return _VQA_PERIOD.sub("", out, 32)


def _vqa_digits_articles(text: str) -> str:
  words = [_VQA_NUMBERS.get(w, w) for w in text.lower().split()]
  return " ".join(_VQA_CONTRACTIONS.get(w, w) for w in words if w not in _VQA_ARTICLES)


def _vqa_strip(text: str) -> str:
  return text.replace("\n", " ").replace("\t", " ").strip()


def normalize_vqa_prediction(prediction: str) -> str:
  """The official VQA normalisation of an answer (processPunctuation, then processDigitArticle),
  which the official evaluation applies only when the human answers disagree."""
  return _vqa_digits_articles(_vqa_punctuation(_vqa_strip(prediction)))


def vqa_accuracy(prediction: str, human_answers: Sequence[str]) -> float:
  """Official VQA accuracy of one prediction against the (10) human answers, in [0, 1].

  For each human answer i, acc_i = min(#{j != i : answer_j == prediction} / 3, 1), and the
  result is the mean of acc_i (the leave-one-out average over the 10 subsets of 9; the official
  code drops answer i by comparing answer records, which differ in `answer_id`). As in the
  official code (GT-Vision-Lab/VQA vqaEval.py, `evaluate`), every answer has newlines and tabs
  turned into spaces and is stripped; then, only when the human answers are not all the same,
  the prediction and each human answer are normalised (punctuation, number words to digits,
  articles, contractions). A unanimous list is compared as written, case and punctuation
  included.
  """
  if not human_answers:
    raise ValueError("vqa_accuracy: no human answers")
  pred = _vqa_strip(prediction)
  gold = [_vqa_strip(a) for a in human_answers]
  if len(set(gold)) > 1:
    gold = [normalize_vqa_prediction(a) for a in gold]
    pred = normalize_vqa_prediction(pred)
  accs = []
  for i in range(len(gold)):
    matches = sum(1 for j, a in enumerate(gold) if j != i and a == pred)
    accs.append(min(1.0, matches / 3))
  return sum(accs) / len(accs)


def mean_vqa_accuracy(predictions: Sequence[str],
                      human_answers: Sequence[Sequence[str]]) -> dict[str, float]:
  """Mean VQA accuracy in percent (the official overall number before its 2-decimal rounding)."""
  if len(predictions) != len(human_answers):
    raise ValueError(f"{len(predictions)} predictions for {len(human_answers)} answer lists")
  if not predictions:
    return {"accuracy": 0.0, "count": 0}
  accs = [vqa_accuracy(p, g) for p, g in zip(predictions, human_answers)]
  return {"accuracy": 100 * sum(accs) / len(accs), "count": len(accs)}


# ------------------------------------------------------------- teacher-forced answers

def greedy_match(logits: jax.Array, targets: jax.Array, steps: jax.Array) -> jax.Array:
  """[N] whether greedy decoding would write the target: the argmax of logits [N, T, V] equals
  targets [N, T] at every answer step (steps [N, T], the positions that predict the answer and
  its EOS). Under teacher forcing each step sees the target prefix, which is what free greedy
  decoding has fed back as long as every earlier step matched; so one forward pass scores the
  greedy answer's exact match."""
  right = (jnp.argmax(logits, axis=-1) == targets) | ~steps.astype(bool)
  return jnp.all(right, axis=-1)


def choose(scores: np.ndarray) -> np.ndarray:
  """[B, J] option scores -> [B] chosen option (first maximum)."""
  return np.argmax(np.asarray(scores), axis=-1)
