"""Claim verification and the evidence-bound revision prompt (GraphLoom's last stage).

An answer is cut into atomic claims (`claims_for`), each claim is scored by an entailment judge
against the premise "\\n".join(evidence), and a claim is supported iff its probability is at
least `tau_ent` (`verify`). Claims that fail are named in `revision_prompt`, the instruction for
the single evidence-bound revision.

Judges (`Verifier`: `entailment(premise, hypotheses) -> [N] probabilities in [0, 1]`):
  * `DecoderJudge`: the frozen decoder asked "Is the claim supported by the evidence?",
      P(yes) = sum_{v in yes} p_v / (sum_{v in yes} p_v + sum_{v in no} p_v)
    with p the decoder's next-token softmax at the first answer position and the sums over the
    first tokens of the surface variants of "yes" / "no".
  * `NLIVerifier`: a Hugging Face sequence-classification NLI model (PyTorch),
      P(entailed) = softmax(logits)[entailment label].
"""

from __future__ import annotations

import re
from typing import Protocol, Sequence

import numpy as np

from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline.types import Claim
from graphloom_jax.training import data

# ---------------------------------------------------------------------------------------------
# Claims

# Abbreviations whose trailing period never ends a sentence (compared lower-case, without the
# period). Handled apart: "etc." ends a sentence before a capitalised word, "No." unless a
# number follows ("No. 5").
ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof sr jr st mt ft vs e.g i.e cf al approx ca nos fig figs vol pp inc ltd co
    corp dept est jan feb mar apr jun jul aug sep sept oct nov dec
""".split())
# Verb cues for `_is_clause`: auxiliaries, copulas, modals and their contractions.
AUXILIARIES = frozenset("""
    is are was were am be been being has have had do does did can could will would shall should
    may might must isn't aren't wasn't weren't hasn't haven't hadn't doesn't don't didn't can't
    cannot couldn't won't wouldn't shouldn't it's there's that's he's she's they're we're i'm
    you're
""".split())
# Common -s words that are not verbs (the -s cue of `_is_clause` skips them).
NOT_VERBS = frozenset("this thus always perhaps towards sometimes whereas besides yes".split())
# Connectors that may join two coordinated clauses inside one sentence.
CONNECTORS = re.compile(r";\s+|,\s+(?:and|but)\s+", re.IGNORECASE)
# A sentence-ending candidate: terminal punctuation (or an ellipsis), any closing quotes or
# brackets, whitespace, then what may start a sentence (capital, digit, opening quote/bracket).
_END = re.compile(r"(\.\.\.|…|[.!?]+)([\"'”’)\]]*)\s+(?=[A-Z0-9\"'“‘(\[])")
_WORD_BEFORE = re.compile(r"(\S+)$")


def _inside_quote(text: str, pos: int) -> bool:
  """Whether `pos` is inside an open double quote (straight or curly) of `text`."""
  before = text[:pos]
  return before.count('"') % 2 == 1 or before.count("“") > before.count("”")


def _is_boundary(text: str, m: re.Match) -> bool:
  punct, closing = m.group(1), m.group(2)
  if _inside_quote(text, m.start()) and not closing:
    return False  # a full stop inside a quotation does not end the outer sentence
  if punct != ".":
    return True  # "!", "?", "?!", ellipses
  word = _WORD_BEFORE.search(text[:m.start()])
  word = word.group(1).lstrip("\"'“‘([") if word else ""
  nxt = text[m.end():m.end() + 1]
  if word.lower() == "etc":
    return nxt.isupper()
  if word.lower() == "no":
    return not nxt.isdigit()
  if word.lower() in ABBREVIATIONS:
    return False
  # initials and initialisms: "J. K. Rowling", "U.S. Army" (capitals, dotted), but not "I."
  return word == "I" or not re.fullmatch(r"(?:[A-Z]\.)*[A-Z]", word)


def _sentences(text: str) -> list[str]:
  out, start = [], 0
  for m in _END.finditer(text):
    if _is_boundary(text, m):
      out.append(text[start:m.end()].strip())
      start = m.end()
  out.append(text[start:].strip())
  return [s for s in out if s]


def _words(text: str) -> list[str]:
  return [w.strip(".,;:!?\"'“”‘’()[]").lower() for w in text.split()]


def _is_clause(text: str) -> bool:
  """A heuristic full clause: at least 3 words, no comma (a comma on a side is most often a list
  or a parenthesis: do not split there), and a verb cue: an auxiliary / copula / modal
  anywhere, or a word of 4+ letters ending in -s or -ed (not -ss, -us, -is, nor `NOT_VERBS`)
  that is neither the side's first nor its last word ("the woman wears a hat"; not "three small
  horses", whose -s word is last). Errs towards not splitting: "the dog runs" (verb last, no
  auxiliary) is not recognised, so it stays joined to its neighbour, which is safe."""
  words = _words(text)
  if len(words) < 3 or "," in text:
    return False
  if any(w in AUXILIARIES for w in words):
    return True
  return any(len(w) > 3 and w.endswith(("s", "ed")) and not w.endswith(("ss", "us", "is"))
             and w not in NOT_VERBS for w in words[1:-1])


def _clauses(sentence: str) -> list[str]:
  """Splits a sentence at "; ", ", and ", ", but " where the text on both sides of the connector
  (up to the neighbouring connectors) is a full clause (`_is_clause`); the connector is
  dropped. Left to right: a side that is not a clause stays joined to its neighbour."""
  parts, start = [], 0
  for m in CONNECTORS.finditer(sentence):
    left = sentence[start:m.start()]
    nxt = CONNECTORS.search(sentence, m.end())
    right = sentence[m.end():nxt.start() if nxt else len(sentence)]
    if _is_clause(left) and _is_clause(right):
      parts.append(left.strip())
      start = m.end()
  parts.append(sentence[start:].strip())
  return [p for p in parts if p]


def split_claims(text: str) -> list[str]:
  """Atomic claims of an answer: its sentences, each cut into coordinated full clauses.

  Sentences end at ".", "!", "?" or an ellipsis (with any closing quotes) followed by
  whitespace and a capital, digit or opening quote. A period does not end a sentence after an
  abbreviation (`ABBREVIATIONS`: "Dr.", "e.g.", "No. 5", ...), an initial or dotted initialism
  ("J. K.", "U.S."), inside a double-quoted passage, or inside a number ("3.5 m", "$1,200.50":
  no whitespace follows). "etc." ends a sentence only before a capitalised word. Clauses: see
  `_clauses` (noun lists such as "red and white" or "red, white, and blue" are never split).
  Empty or whitespace-only text gives [].
  """
  return [c for s in _sentences(text.strip()) for c in _clauses(s)]


def claims_for(question: str, answer: str) -> list[str]:
  """The claims of `answer` to verify.

  A sentence answer (more than one claim from `split_claims`, or one claim that is a full
  clause, `_is_clause`: "The horse is in front of a tree.") gives `split_claims(answer)`. A
  short answer without sentence structure ("tree", "two cats", "a wooden fence.") cannot be
  judged alone, so it becomes one self-contained claim
  "Question: {question} Answer: {answer}". An empty answer gives [].
  """
  answer = answer.strip()
  claims = split_claims(answer)
  if len(claims) > 1 or (claims and _is_clause(claims[0])):
    return claims
  return [f"Question: {question.strip()} Answer: {answer}"] if answer else []


# ---------------------------------------------------------------------------------------------
# Judges


class Verifier(Protocol):

  def entailment(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    """float probabilities [len(hypotheses)] in [0, 1] that the premise entails each one."""
    ...


# The decoder-judge prompt; {premise} is the evidence, {claim} the hypothesis.
PROMPT = ("Evidence:\n{premise}\n\nClaim: {claim}\n"
          "Is the claim supported by the evidence? Answer yes or no.")
PLAIN_SUFFIX = "\nAnswer:"  # after PROMPT for a tokenizer without a chat template
YES = ("yes", " yes", "Yes", " Yes")
NO = ("no", " no", "No", " No")


class DecoderJudge:
  """The frozen decoder as an entailment judge:

      P(yes) = sum_{v in yes} p_v / (sum_{v in yes} p_v + sum_{v in no} p_v)

  p = softmax of the decoder's logits at the first answer position after the prompt: the chat
  template's user turn PROMPT (when the tokenizer has one), else PROMPT + "\\nAnswer:" as plain
  text (after the begin id for `data.ByteTokenizer`, as in `data.TextFormat`). The yes set holds
  the first token of each of "yes", " yes", "Yes", " Yes" (deduplicated), the no set likewise.
  A variant whose first token is only whitespace (byte-level " yes" starts with the space byte)
  says nothing about the word and is left out; a token in both sets is an error.

  Batched: the prompts are left-padded to a multiple of `decoder_lib.PROMPT_BUCKET` and the rows
  to a power of two (repeating the first row), so a serving process compiles once per bucket;
  `batch_size` rows go through one `decoder.logits` call (which returns float32 logits at
  every position: batch_size x T x V floats, about 0.4 GB for 8 rows of 256 tokens with
  SmolLM2's 49,152-token vocabulary).
  """

  def __init__(self, decoder, tokenizer=None, prompt: str = PROMPT, batch_size: int = 8):
    self.decoder = decoder
    self.tok = tokenizer if tokenizer is not None else decoder.tokenizer
    if self.tok is None:
      raise ValueError(f"{decoder.source}: the decoder has no tokenizer; pass one "
                       "(e.g. training.data.ByteTokenizer(vocab_size) for a random decoder)")
    self.prompt = prompt
    self.batch_size = int(batch_size)
    self.yes_ids, self.no_ids = self._word_ids(YES), self._word_ids(NO)
    shared = set(self.yes_ids) & set(self.no_ids)
    if shared:
      raise ValueError(f"token ids {sorted(shared)} begin both a 'yes' and a 'no' variant "
                       f"({YES} / {NO}); this tokenizer cannot tell them apart at one position")

  def _word_ids(self, variants) -> list[int]:
    ids = []
    for v in variants:
      toks = self.tok.encode(v)
      if toks and self.tok.decode(toks[:1]).strip() and toks[0] not in ids:
        ids.append(int(toks[0]))
    if not ids:
      raise ValueError(f"no variant of {variants} starts with a non-whitespace token")
    return ids

  def prompt_ids(self, premise: str, claim: str) -> list[int]:
    text = self.prompt.format(premise=premise, claim=claim)
    if self.tok.has_chat_template:
      return list(self.tok.chat_ids(text))
    bos = [data.ByteTokenizer.bos_id] * isinstance(self.tok, data.ByteTokenizer)
    return bos + list(self.tok.encode(text + PLAIN_SUFFIX))

  def entailment(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    rows = [self.prompt_ids(premise, h) for h in hypotheses]
    out = [self._score(rows[i:i + self.batch_size]) for i in range(0, len(rows), self.batch_size)]
    return np.concatenate(out) if out else np.zeros((0,), np.float64)

  def _score(self, rows: list[list[int]]) -> np.ndarray:
    width = decoder_lib._bucket(max(len(r) for r in rows), decoder_lib.PROMPT_BUCKET)
    n = decoder_lib._pow2(len(rows), minimum=1)
    pad = int(getattr(self.tok, "pad_id", 0))
    ids = np.full((n, width), pad, np.int32)
    mask = np.zeros((n, width), bool)
    for i in range(n):
      r = rows[i] if i < len(rows) else rows[0]
      ids[i, width - len(r):], mask[i, width - len(r):] = r, True
    last = self.decoder.logits(ids, mask)[:len(rows), -1].astype(np.float64)
    # P(yes) = sigmoid(logsumexp(yes logits) - logsumexp(no logits)): the softmax's
    # normaliser cancels, and this form cannot overflow.
    lse = lambda x: np.logaddexp.reduce(x, axis=-1)
    return 1.0 / (1.0 + np.exp(lse(last[:, self.no_ids]) - lse(last[:, self.yes_ids])))


def _entailment_index(id2label) -> int:
  """The label whose name contains "entail" and is not a negation ("not_entailment",
  "non-entailment"); exactly one must exist."""
  names = {int(i): str(name).lower() for i, name in id2label.items()}
  found = [i for i, n in names.items() if "entail" in n and not n.startswith(("not", "non"))]
  if len(found) != 1:
    raise ValueError(f"cannot find one entailment label in id2label {dict(id2label)} "
                     "(want exactly one name containing 'entail', negations excluded)")
  return found[0]


class NLIVerifier:
  """A Hugging Face sequence-classification NLI model (PyTorch) as the judge:

      P(entailed | premise, hypothesis) = softmax(logits)[e],
      e = the id2label index whose name contains "entail" (not "not_entailment").

  Pairs are tokenised together (premise first; truncation longest-first to `max_length`) and
  scored `batch_size` at a time.
  """

  def __init__(self, model, tokenizer, device: str = "cpu", max_length: int = 512,
               batch_size: int = 32):
    self.model = model.to(device).eval()
    self.tokenizer = tokenizer
    self.device = device
    self.max_length = int(max_length)
    self.batch_size = int(batch_size)
    self.entail_index = _entailment_index(model.config.id2label)

  @classmethod
  def from_pretrained(cls, path, device: str = "cpu", max_length: int = 512,
                      batch_size: int = 32) -> "NLIVerifier":
    """From a local model folder (never downloads)."""
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(path), local_files_only=True)
    return cls(model, tok, device, max_length, batch_size)

  def entailment(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    import torch
    out = []
    for i in range(0, len(hypotheses), self.batch_size):
      hyp = list(hypotheses[i:i + self.batch_size])
      enc = self.tokenizer([premise] * len(hyp), hyp, padding=True, truncation="longest_first",
                           max_length=self.max_length, return_tensors="pt").to(self.device)
      with torch.no_grad():
        logits = self.model(**enc).logits.float()
      out.append(torch.softmax(logits, -1)[:, self.entail_index].cpu().numpy())
    return np.concatenate(out).astype(np.float64) if out else np.zeros((0,), np.float64)


# ---------------------------------------------------------------------------------------------
# Verification and revision


def verify(question: str, answer: str, evidence: Sequence[str], verifier: Verifier,
           tau_ent: float) -> list[Claim]:
  """Claims of the answer (`claims_for`) scored against the premise "\\n".join(evidence);
  supported = probability >= tau_ent. A verifier that raises or returns anything but
  len(claims) finite probabilities in [0, 1] is a RuntimeError: verification never skips."""
  if not 0.0 <= tau_ent <= 1.0:  # also rejects NaN
    raise ValueError(f"tau_ent must be in [0, 1], got {tau_ent}")
  claims = claims_for(question, answer)
  if not claims:
    return []
  name = type(verifier).__name__
  try:
    probs = verifier.entailment("\n".join(evidence), claims)
  except Exception as e:
    raise RuntimeError(f"verifier {name} failed on {len(claims)} claims: {e!r}") from e
  probs = np.asarray(probs, dtype=np.float64)
  if probs.shape != (len(claims),):
    raise RuntimeError(f"verifier {name} returned shape {probs.shape} for {len(claims)} claims")
  if not np.all((probs >= 0.0) & (probs <= 1.0)):  # NaN fails too
    raise RuntimeError(f"verifier {name} returned values outside [0, 1] (or NaN): {probs}")
  return [Claim(text=c, probability=float(p), supported=bool(p >= tau_ent))
          for c, p in zip(claims, probs)]


# The one evidence-bound revision: answer again from the evidence alone, in the short answer
# style of the first pass, steering clear of what verification rejected.
REVISION_PROMPT = ("Answer the question about the scene in a few words, using ONLY the evidence "
                   "below.\nEvidence:\n{evidence}\n"
                   "These claims are not supported by the evidence; do not repeat them:\n"
                   "{failed}\nQuestion: {question}")


def revision_prompt(question: str, evidence: Sequence[str], failed: Sequence[str]) -> str:
  """REVISION_PROMPT with the evidence and the unsupported claims as "- " lists ("- (none)"
  when a list is empty)."""
  bullets = lambda xs: "\n".join(f"- {x}" for x in xs) or "- (none)"
  return REVISION_PROMPT.format(evidence=bullets(evidence), failed=bullets(failed),
                                question=question.strip())
