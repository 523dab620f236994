"""The entailment judges of verification (`Verifier`: `entailment(premise, hypotheses) -> [N]
probabilities in [0, 1]`) and `from_config`, the name -> judge table:
  * `DecoderJudge`: the frozen decoder asked "Is the claim supported by the evidence?",
      P(yes) = sum_{v in yes} p_v / (sum_{v in yes} p_v + sum_{v in no} p_v)
    with p the decoder's next-token softmax at the first answer position and the sums over the
    first tokens of the surface variants of "yes" / "no".
  * `CalibratedJudge`: the decoder judge Platt-scaled, sigmoid(a * logit P(yes) + b), or
      contrastive: sigmoid(a * (logit P(yes | evidence) - logit P(yes | no evidence)) + b).
  * `GraphVerifier`: no model; the answer must be an entity of a premise triple from which a
      path of triples reaches the question's named entity and covers its words.
  * `NLIVerifier`: a Hugging Face sequence-classification NLI model (PyTorch),
      P(entailed) = softmax(logits)[entailment label].
benchmarks/bench_verifier.py (report: benchmarks/verifier.md) measures them on SceneKB
validation.
"""

from __future__ import annotations

import re
from typing import Protocol, Sequence

import numpy as np

from graphloom_jax import optional
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline.prompts import ByteTokenizer

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

  (On SceneKB validation the embedded SmolLM2-135M judge is at chance: ROC AUC 0.54, P(yes)
  about 0.05 for supported and unsupported claims alike; benchmarks/verifier.md.)

  p = softmax of the decoder's logits at the first answer position after the prompt: the chat
  template's user turn PROMPT (when the tokenizer has one), else PROMPT + "\\nAnswer:" as plain
  text (after the begin id for `prompts.ByteTokenizer`, as in `prompts.TextFormat`). The yes set holds
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
                       "(e.g. pipeline.prompts.ByteTokenizer(vocab_size) for a random decoder)")
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
    bos = [ByteTokenizer.bos_id] * isinstance(self.tok, ByteTokenizer)
    return bos + list(self.tok.encode(text + PLAIN_SUFFIX))

  def log_odds(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    """logit P(yes) = log(sum_yes p_v) - log(sum_no p_v) per hypothesis, float64 [N]."""
    return self.log_odds_pairs([premise] * len(hypotheses), hypotheses)

  def log_odds_pairs(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
    """`log_odds` of (premises[i], hypotheses[i]) pairs, batched across premises."""
    if len(premises) != len(hypotheses):
      raise ValueError(f"{len(premises)} premises for {len(hypotheses)} hypotheses")
    rows = [self.prompt_ids(p, h) for p, h in zip(premises, hypotheses)]
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))  # batch similar lengths
    out = np.zeros((len(rows),), np.float64)
    for i in range(0, len(rows), self.batch_size):
      take = order[i:i + self.batch_size]
      out[take] = self._score([rows[j] for j in take])
    return out

  def entailment(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    return _sigmoid(self.log_odds(premise, hypotheses))

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
    # log P(yes) - log P(no) = logsumexp(yes logits) - logsumexp(no logits): the softmax's
    # normaliser cancels.
    lse = lambda x: np.logaddexp.reduce(x, axis=-1)
    return lse(last[:, self.yes_ids]) - lse(last[:, self.no_ids])


def _sigmoid(x: np.ndarray) -> np.ndarray:
  """1 / (1 + exp(-x)) without overflow."""
  return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, np.float64)))


# The contrastive judge's premise when the evidence is withheld.
NO_EVIDENCE = "(none)"


class CalibratedJudge:
  """A `DecoderJudge` with Platt scaling:

      P(entailed) = sigmoid(a * x + b),  x = logit P_judge(yes | evidence, claim)

  or, with `contrastive=True`, x = logit P(yes | evidence, claim) - logit P(yes | NO_EVIDENCE,
  claim): how much the evidence moves the judge (twice the decoder calls). (a, b) come from
  `fit_platt` on labelled validation pairs: config.verify.platt and
  verify.contrastive hold the values for the embedded SmolLM2-135M-Instruct, refitted by

      python benchmarks/bench_verifier.py      # last lines: "Fitted on FIT ..."

  (SceneKB validation; the report, benchmarks/verifier.md, finds that judge at chance either
  way, so calibration cannot help it: the fitted a is near 0).
  """

  def __init__(self, judge: DecoderJudge, a: float, b: float, contrastive: bool):
    if not (np.isfinite(a) and np.isfinite(b)):
      raise ValueError(f"Platt parameters must be finite, got a={a!r}, b={b!r}")
    self.judge, self.a, self.b, self.contrastive = judge, float(a), float(b), bool(contrastive)

  def features(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    x = self.judge.log_odds(premise, hypotheses)
    if self.contrastive:
      x = x - self.judge.log_odds(NO_EVIDENCE, hypotheses)
    return x

  def entailment(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    return _sigmoid(self.a * self.features(premise, hypotheses) + self.b)


def fit_platt(x, labels, l2: float = 1e-3, steps: int = 100) -> tuple[float, float]:
  """Platt scaling: (a, b) minimising the mean log loss of sigmoid(a * x + b) against the 0/1
  `labels`, plus l2 * a^2 / 2 (keeps a finite on separable data); Newton's method."""
  x, y = np.asarray(x, np.float64), np.asarray(labels, np.float64)
  if x.shape != y.shape or x.ndim != 1 or not len(x):
    raise ValueError(f"fit_platt: x {x.shape} and labels {y.shape} must be equal 1-d, non-empty")
  if not np.all(np.isfinite(x)) or not np.all((y == 0) | (y == 1)):
    raise ValueError("fit_platt: x must be finite and labels 0 or 1")
  w = np.zeros(2)
  feats = np.stack([x, np.ones_like(x)], 1)
  reg = np.diag([l2, 0.0])
  for _ in range(steps):
    p = _sigmoid(feats @ w)
    grad = feats.T @ (p - y) / len(x) + reg @ w
    hess = (feats * (p * (1 - p))[:, None]).T @ feats / len(x) + reg + 1e-12 * np.eye(2)
    step = np.linalg.solve(hess, grad)
    w -= step
    if np.max(np.abs(step)) < 1e-10:
      break
  return float(w[0]), float(w[1])


# ---------------------------------------------------------------------------------------------
# The structural graph verifier

# Words that carry no content for matching: articles, auxiliaries, wh-words, pronouns and the
# question templates' "kind / type / sort of thing". Spatial prepositions ("on", "near",
# "behind", "in") are kept: in scene graphs they ARE the relation.
GRAPH_STOPWORDS = frozenset("""
    a an the this that these those is are was were be been being am do does did what which who
    whom whose where when why how kind kinds type types sort sorts thing things it its one or
    and of question answer
""".split())
# Irregular forms folded together before suffix stripping.
_IRREGULAR = {"has": "have", "had": "have", "having": "have", "wore": "wear", "worn": "wear",
              "men": "man", "women": "woman", "children": "child", "people": "person"}
_CLAIM = re.compile(r"^\s*Question:\s*(?P<q>.*?)\s*Answer:\s*(?P<a>.*?)\s*$", re.DOTALL)
_TOKEN = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
TAXONOMY = ("is", "a")  # a line holding this bigram is an is-a edge


def _stem(w: str) -> str:
  """Crude suffix folding, so that "wears" / "wearing", "pants" / "pant", "glasses" / "glass"
  and "sitting" / "sits" meet: -ing and -ed (undoubling a final double consonant), -ies -> y,
  -es after s/x/z/ch/sh, -s (not -ss, -us, -is)."""
  w = _IRREGULAR.get(w, w)
  if w.endswith("'s"):
    w = w[:-2]
  for suffix in ("ing", "ed"):
    if w.endswith(suffix) and len(w) > len(suffix) + 2:
      w = w[:-len(suffix)]
      if len(w) > 2 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]
      return w
  if w.endswith("ies") and len(w) > 4:
    return w[:-3] + "y"
  if w.endswith("es") and len(w) > 4 and (w[-3] in "sxz" or w[-4:-2] in ("ch", "sh")):
    return w[:-2]
  if w.endswith("s") and len(w) > 3 and not w.endswith(("ss", "us", "is")):
    return w[:-1]
  return w


def graph_tokens(text: str) -> list[str]:
  """Lower-cased word tokens; stopwords (GRAPH_STOPWORDS) as they are, others folded by
  `_stem`."""
  return [w if w in GRAPH_STOPWORDS else _stem(w) for w in _TOKEN.findall(text.lower())]


def question_readings(tokens: Sequence[str]) -> list[frozenset[str]]:
  """The content-word sets a question asks to cover. Without "or": one, W(question). With
  "or" (segments S1 or S2 or ... Sm, parallel alternatives: "Which is a kind of container: the
  thing the girl is wearing or the thing the girl is carrying?"): one reading per alternative,
  stem + Sk, where S1's alternative is its last len(S2) tokens and the stem the rest of S1; an
  answer needs to satisfy one alternative, not all."""
  cuts = [i for i, t in enumerate(tokens) if t == "or"]
  if not cuts:
    return [graph_content(tokens)]
  bounds = [-1, *cuts, len(tokens)]
  segments = [list(tokens[a + 1:b]) for a, b in zip(bounds, bounds[1:])]
  first, width = segments[0], len(segments[1])
  stem = graph_content(first[:max(0, len(first) - width)])
  alternatives = [first[max(0, len(first) - width):], *segments[1:]]
  return [stem | graph_content(a) for a in alternatives]


def graph_content(tokens: Sequence[str]) -> frozenset[str]:
  return frozenset(t for t in tokens if t not in GRAPH_STOPWORDS)


def _f1(a: frozenset, b: frozenset) -> float:
  common = len(a & b)
  return 2.0 * common / (len(a) + len(b)) if common else 0.0


class _Line:
  """One premise line "subject relation object" as tokens. Its split is not known, so an
  entity is any proper prefix (a subject candidate) or proper suffix (an object candidate),
  an "end" (side, k): the first k tokens (side "head") or the last k ("tail")."""

  def __init__(self, text: str):
    self.tokens = graph_tokens(text)
    self.content = graph_content(self.tokens)
    self.n = len(self.tokens)
    self.taxonomic = any(tuple(self.tokens[i:i + 2]) == TAXONOMY for i in range(self.n - 1))

  def end(self, side: str, k: int) -> frozenset:
    return graph_content(self.tokens[:k] if side == "head" else self.tokens[self.n - k:])

  def ends(self, side: str, limit: int | None = None):
    """(k, content) of this side's proper ends, shortest first, up to `limit` tokens."""
    for k in range(1, min(self.n - 1, limit or self.n) + 1):
      yield k, self.end(side, k)

  def match(self, phrase: frozenset) -> tuple[float, str, int]:
    """The best token F1 of `phrase` with an end of the line, that end's side and length
    (shortest among ties)."""
    best = (0.0, "head", 0)
    for side in ("head", "tail"):
      for k, e in self.ends(side):
        f1 = _f1(phrase, e)
        if f1 > best[0]:
          best = (f1, side, k)
    return best

  def far_ends(self, side: str, k: int) -> list[frozenset]:
    """The non-empty entity candidates at the end opposite the entry end (side, k), shortest
    first, not overlapping it."""
    other = "tail" if side == "head" else "head"
    return [e for _, e in self.ends(other, self.n - k) if e]

  def join(self, ends: list[frozenset]) -> tuple[str, int] | None:
    """The shortest end of this line whose content equals one of `ends` (None: no join)."""
    found = [(k, side) for side in ("head", "tail") for k, e in self.ends(side) if e and e in ends]
    return (min(found)[1], min(found)[0]) if found else None


class GraphVerifier:
  """A structural verifier over the premise's triples, no model. The premise is one triple per
  line, verbalised "subject relation object" (`Triple.verbalize`). Words are lower-cased and
  folded by `_stem`; W(x) is the set of content words of x (outside GRAPH_STOPWORDS). A line's
  split into subject / relation / object is not known, so its entity candidates are its proper
  prefixes (subject side) and proper suffixes (object side), its "ends".

  A claim "Question: Q Answer: A" (`claims_for` of a short answer) scores

      P = max over the readings R of Q (`question_readings`: one, or one per alternative of an
          "X or Y" question) of  sum_{q in R'} credit(q) / |R'|,   R' = R - W(A),

  the mean credit of the question words the answer does not itself supply, where:

  1. Anchors: the answer must be an entity of a premise triple. A line L is an anchor with
       m(L) = max over the ends e of L of token-F1(W(A), W(e))  (> 0),
     entered at that end (the shortest of ties).
  2. Paths: chains of distinct lines L1 ... Ln (n <= `max_hops`), L1 an anchor, each next line
     joined at the far end of the previous one (an end of L(i+1), the shortest, whose content
     equals one of L(i)'s ends opposite L(i)'s entry). A line covers the question words in
     W(L) - W(its entry end). A path is valid when Ln's far end names an entity of the question
     (some far end e with W(e) a subset of R); it stops there (a path never passes through a
     named entity). Its weight is
       w = m(L1) * prod_{i < n} c_i,   c_i = 1 if L(i) is an is-a line or covers a question
                                             word no earlier line did, and L(i+1) repeats no
                                             question word the path already covered;
                                       c_i = decay otherwise,
     so a hop the question asks for (a new relation word, or an is-a step to a category, as
     "what kind of thing ..." asks) is free and a detour costs `decay`.
  3. credit(q) = the largest weight of a valid path with a line covering q (0 if none).

  If R' is empty, P = max m(L). An answer whose words all occur in the question (an echo:
  "pant" for "What is wearing the pant?") scores 0; so does an answer no triple holds, and a
  claim with no content word (yes/no answers always fail: this verifier checks entity answers
  against a graph).

  A sentence claim (no "Question: / Answer:" frame: "The horse is brown.") is scored as if it
  were the question and its best mentioned entity the answer: P = max over line ends e with
  W(e) a non-empty subset of (a reading of) the claim of the score above with Q = the claim,
  A = e, anchored only at ends with the same content as e (F1 = 1: e is read off the premise).
  """

  def __init__(self, *, decay: float, max_hops: int):
    if not 0.0 <= decay <= 1.0:
      raise ValueError(f"GraphVerifier: decay must be in [0, 1], got {decay!r}")
    if int(max_hops) < 1:
      raise ValueError(f"GraphVerifier: max_hops must be >= 1, got {max_hops!r}")
    self.decay, self.max_hops = float(decay), int(max_hops)

  def entailment(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    lines = [_Line(t) for t in premise.split("\n")]
    lines = [l for l in lines if l.n >= 2]
    return np.asarray([self.score(lines, h) for h in hypotheses], np.float64)

  def score(self, lines: list[_Line], claim: str) -> float:
    m = _CLAIM.match(claim)
    if m:
      answer = graph_content(graph_tokens(m["a"]))
      question = graph_tokens(m["q"])
      if answer <= graph_content(question):
        return 0.0  # an echo of the question names nothing the evidence could support
      return max(self._qa(lines, q, answer) for q in question_readings(question))
    readings = question_readings(graph_tokens(claim))
    words = frozenset().union(*readings)
    ends = {e for l in lines for side in ("head", "tail") for _, e in l.ends(side)
            if e and e <= words}
    return max((self._qa(lines, q, e, exact=True) for q in readings for e in ends if e <= q),
               default=0.0)

  def _qa(self, lines: list[_Line], question: frozenset, answer: frozenset,
          exact: bool = False) -> float:
    if not answer:
      return 0.0
    anchors = [(i, l.match(answer)) for i, l in enumerate(lines)]
    anchors = [(i, f1, side, k) for i, (f1, side, k) in anchors
               if f1 > 0 and (f1 == 1.0 or not exact)]
    if not anchors:
      return 0.0
    wanted = question - answer
    if not wanted:
      return max(a[1] for a in anchors)
    credit = dict.fromkeys(wanted, 0.0)

    def walk(path, weight, covered):
      i, side, k = path[-1]
      line = lines[i]
      mine = wanted & (line.content - line.end(side, k))
      justified = line.taxonomic or bool(mine - covered)
      covered = covered | mine
      far = line.far_ends(side, k)
      if any(e <= question for e in far):  # a valid path: it reaches a named entity, and
        for q in covered:                  # ends there (it never passes through one)
          credit[q] = max(credit[q], weight)
        return
      if len(path) == self.max_hops:
        return
      seen = {p[0] for p in path}
      for j, nxt in enumerate(lines):
        if j in seen:
          continue
        entry = nxt.join(far)
        if entry is None:
          continue
        repeats = wanted & (nxt.content - nxt.end(*entry)) & covered
        onward = weight * (1.0 if justified and not repeats else self.decay)
        if onward > 0.0:
          walk(path + [(j, *entry)], onward, covered)

    for i, f1, side, k in anchors:
      walk([(i, side, k)], f1, frozenset())
    return sum(credit.values()) / len(wanted)


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
    optional.require("torch", "NLIVerifier")
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(path), local_files_only=True)
    return cls(model, tok, device, max_length, batch_size)

  def entailment(self, premise: str, hypotheses: Sequence[str]) -> np.ndarray:
    torch = optional.require("torch", "NLIVerifier")
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
# Choosing the judge


def check_settings(verify_cfg) -> None:
  """The `verify` section's thresholds: tau_ent in [0, 1] and max_evidence >= 1."""
  tau, n = verify_cfg.tau_ent, verify_cfg.max_evidence
  if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0.0 <= tau <= 1.0:
    raise ValueError(f"config.verify.tau_ent={tau!r}; expected a probability in [0, 1]")
  if isinstance(n, bool) or not isinstance(n, int) or n < 1:
    raise ValueError(f"config.verify.max_evidence={n!r}; expected an integer >= 1")

VERIFIERS = ("decoder", "decoder_calibrated", "graph", "nli:<folder>")


def from_config(verify_cfg, decoder, tokenizer=None) -> Verifier:
  """The judge `verify_cfg.judge` names (the config's `verify` section, graphloom_jax/defaults.py):

    "decoder"             `DecoderJudge(decoder, tokenizer)`
    "decoder_calibrated"  `CalibratedJudge` of it with (a, b) = verify.platt and
                          verify.contrastive
    "graph"               `GraphVerifier(decay=verify.graph_decay, max_hops=verify.graph_hops)`
                          (no model)
    "nli:<folder>"        `NLIVerifier.from_pretrained(folder)`

  Every setting of the section is read and checked whichever judge is chosen, so a malformed
  value is an error even while it is unused. An unknown name is a ValueError listing these."""
  kind = verify_cfg.judge
  platt = verify_cfg.platt
  contrastive = verify_cfg.contrastive
  decay, hops = verify_cfg.graph_decay, verify_cfg.graph_hops
  check_settings(verify_cfg)
  try:
    a, b = (float(v) for v in platt)
  except (TypeError, ValueError):
    raise ValueError(f"config.verify.platt={platt!r}; expected two numbers (a, b)") from None
  if not (np.isfinite(a) and np.isfinite(b)):
    raise ValueError(f"config.verify.platt={platt!r} must be finite")
  if not isinstance(contrastive, bool):
    raise ValueError(f"config.verify.contrastive={contrastive!r}; expected True/False")
  graph = GraphVerifier(decay=decay, max_hops=hops)  # validates both
  # The judges by name (a new judge is one entry here); "nli:<folder>" carries its argument.
  judges = {
      "graph": lambda _: graph,
      "decoder": lambda _: DecoderJudge(decoder, tokenizer),
      "decoder_calibrated": lambda _: CalibratedJudge(DecoderJudge(decoder, tokenizer), a, b,
                                                      contrastive),
      "nli": NLIVerifier.from_pretrained,
  }
  name, _, arg = kind.partition(":") if isinstance(kind, str) else (None, "", "")
  if name in judges and (name == "nli") == bool(arg.strip()):
    return judges[name](arg.strip())
  raise ValueError(f"config.verify.judge={kind!r}; expected one of "
                   + ", ".join(repr(v) for v in VERIFIERS))
