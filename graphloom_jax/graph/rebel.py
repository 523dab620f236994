"""REBEL output parsing, extraction confidence, and the model-backed description -> triples path.

REBEL (Babelscape/rebel-large, a BART) writes triples linearised as
  <triplet> HEAD <subj> TAIL <obj> RELATION [<subj> TAIL <obj> RELATION ...] <triplet> ...
the text after <subj> is the object (tail), the text after <obj> the relation, and several
<subj> groups may share one head.

conf_ext of a triple = exp(mean log-probability of the tokens of its span) (our choice; REBEL
gives no score). The span of a triple is its head (from the <triplet> marker on) plus its own
<subj> ... <obj> ... group, markers included: a head shared by several groups counts in each.

The model-backed path (`RebelExtractor`, `describe_and_extract`) runs REBEL with transformers
(PyTorch) from weights the user has locally; nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
from typing import Protocol, Sequence

from graphloom_jax import optional
from graphloom_jax.graph.triples import Provenance, Triple, TripleFormatError

MARKERS = ("<triplet>", "<subj>", "<obj>")
IGNORED = ("<s>", "</s>", "<pad>")


@dataclasses.dataclass(frozen=True)
class RebelTriple:
  head: str
  relation: str
  tail: str
  token_span: tuple[int, ...]  # indices of the tokens that make up the triple's span

  def confidence(self, logprobs: Sequence[float]) -> float:
    """exp(mean log-prob over the span's tokens)."""
    lp = [logprobs[i] for i in self.token_span]
    return math.exp(sum(lp) / len(lp))


def _clean(text: str) -> str:
  return re.sub(r"\s+", " ", text).strip()


def parse_rebel_tokens(tokens: Sequence[str], strict: bool = True,
                       errors: list[str] | None = None) -> list[RebelTriple]:
  """Parses REBEL's decoded output given as token strings (leading spaces kept as decoded).

  Malformed groups (an empty head, tail or relation; <obj> before <subj>; text before the first
  <triplet>) raise TripleFormatError naming the token position (strict), or are skipped and
  described in `errors` (lenient)."""
  out = []
  state, head, head_idx, tail, rel, group_idx = "start", "", [], "", "", []

  def problem(msg):
    if strict:
      raise TripleFormatError(msg)
    if errors is not None:
      errors.append(msg)

  def close(at):
    nonlocal tail, rel, group_idx
    if state == "rel":
      if not _clean(head) or not _clean(tail) or not _clean(rel):
        problem(f"REBEL output token {at}: incomplete triple (head={_clean(head)!r}, "
                f"tail={_clean(tail)!r}, relation={_clean(rel)!r})")
      else:
        out.append(RebelTriple(_clean(head), _clean(rel), _clean(tail),
                               tuple(head_idx + group_idx)))
    tail, rel, group_idx = "", "", []

  for i, tok in enumerate(tokens):
    mark = tok.strip()
    if mark in IGNORED:
      continue
    if mark == "<triplet>":
      close(i)
      state, head, head_idx = "head", "", [i]
    elif mark == "<subj>":
      if state == "start":
        problem(f"REBEL output token {i}: <subj> before any <triplet>")
        continue
      if state == "tail":
        problem(f"REBEL output token {i}: <subj> where <obj> was expected")
      close(i)
      state, group_idx = "tail", [i]
    elif mark == "<obj>":
      if state != "tail":
        problem(f"REBEL output token {i}: <obj> without a preceding <subj>")
        state = "skip"
        continue
      state = "rel"
      group_idx.append(i)
    else:
      if state == "head":
        head += tok
        head_idx.append(i)
      elif state == "tail":
        tail += tok
        group_idx.append(i)
      elif state == "rel":
        rel += tok
        group_idx.append(i)
      elif state == "start" and mark:
        problem(f"REBEL output token {i}: text {mark!r} before the first <triplet>")
  close(len(tokens))
  return out


def parse_rebel(text: str, strict: bool = True) -> list[tuple[str, str, str]]:
  """(head, relation, tail) triples of a decoded REBEL string."""
  for marker in MARKERS:
    text = text.replace(marker, f" {marker} ")
  for marker in IGNORED:
    text = text.replace(marker, " ")
  tokens = [" " + w for w in text.split()]
  return [(t.head, t.relation, t.tail) for t in parse_rebel_tokens(tokens, strict)]


def rebel_triples(tokens: Sequence[str], logprobs: Sequence[float], instance: str = "",
                  text_span: tuple[int, int] | None = None, source: str = "rebel",
                  strict: bool = True) -> list[Triple]:
  """Triples with conf_ext from per-token log-probs (one per token of `tokens`)."""
  if len(tokens) != len(logprobs):
    raise ValueError(f"rebel_triples: {len(tokens)} tokens but {len(logprobs)} log-probs")
  for i, lp in enumerate(logprobs):
    if not (lp <= 0.0) or math.isnan(lp):
      raise ValueError(f"rebel_triples: log-prob {i} is {lp}; expected a value <= 0")
  return [Triple(t.head, t.relation, t.tail, min(1.0, t.confidence(logprobs)), source,
                 Provenance(instance, span=text_span))
          for t in parse_rebel_tokens(tokens, strict)]


class SceneDescriber(Protocol):
  """A vision-language model that writes a scene description for an image."""

  def describe(self, image) -> str:
    ...


class RebelExtractor:
  """REBEL through transformers (PyTorch), from a local folder holding the weights.

  `RebelExtractor(path)` raises FileNotFoundError naming the folder when the weights are absent;
  nothing is downloaded."""

  def __init__(self, path, max_new_tokens: int = 256, num_beams: int = 1):
    path = pathlib.Path(path)
    if not (path / "config.json").exists():
      raise FileNotFoundError(f"RebelExtractor: no REBEL weights at {path} (expected a "
                              f"transformers folder with config.json); nothing is downloaded")
    optional.require("torch", "RebelExtractor")
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    self.model = AutoModelForSeq2SeqLM.from_pretrained(path, local_files_only=True).eval()
    self.max_new_tokens = max_new_tokens
    self.num_beams = num_beams

  def generate(self, texts: list[str]) -> list[tuple[list[str], list[float]]]:
    """Greedy decoding; per example the decoded tokens and their log-probabilities."""
    torch = optional.require("torch", "RebelExtractor")
    enc = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
    with torch.no_grad():
      out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False,
                                num_beams=self.num_beams, output_scores=True,
                                return_dict_in_generate=True)
      scores = self.model.compute_transition_scores(out.sequences, out.scores,
                                                    normalize_logits=True)
    start = out.sequences.shape[1] - scores.shape[1]
    results = []
    pad = self.tokenizer.pad_token_id
    for seq, lp in zip(out.sequences[:, start:], scores):
      toks, lps = [], []
      for tok_id, l in zip(seq.tolist(), lp.tolist()):
        if tok_id == pad:
          continue
        toks.append(self.tokenizer.decode([tok_id], skip_special_tokens=False))
        lps.append(float(l))
      results.append((toks, lps))
    return results

  def extract(self, texts: list[str], instances: list[str] | None = None) -> list[list[Triple]]:
    instances = instances or [""] * len(texts)
    return [rebel_triples(toks, lps, inst, (0, len(text)), strict=False)
            for (toks, lps), text, inst in zip(self.generate(texts), texts, instances)]


def describe_and_extract(describer: SceneDescriber, extractor: RebelExtractor, image,
                         instance: str = "") -> tuple[str, list[Triple]]:
  """The image path of graph construction: description D = describer(image), triples = REBEL(D)."""
  text = describer.describe(image)
  return text, extractor.extract([text], [instance])[0]
