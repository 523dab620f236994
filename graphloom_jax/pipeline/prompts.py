"""Prompts and token rows: how a question (and, for Flat-RAG, its evidence as text) becomes
decoder tokens, the same way for training, answering and option scoring.

  GraphLoom, no retrieval:  PROMPT with the question (GraphLoom's evidence is in the memory)
  Flat-RAG:                 EVIDENCE_PROMPT with the subgraph verbalised one triple a line

Prompts go through the tokenizer's chat template when it has one; a decoder without a
tokenizer (random weights) uses `ByteTokenizer` (UTF-8 bytes offset by 3) and a plain
"Question: ...\\nAnswer:" layout.

A scored row is [prompt ; answer ; EOS] right-padded to a length S:
  tokens [S], valid [S], targets [S] (the row shifted left by one), loss_mask [S] (positions
  whose target is an answer token or the EOS: the "answer steps"), output_mask [S] (the
  generated part of the row, i.e. loss_mask shifted right by one: what the router's
  output-mention feature sees).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

PROMPT = "Answer the question about the scene in a few words.\nQuestion: {question}"
PLAIN_PROMPT = "Question: {question}\nAnswer:"  # without a chat template (byte-level decoders)
EVIDENCE_PROMPT = ("Answer the question about the scene in a few words.\nEvidence:\n{evidence}\n"
                   "Question: {question}")

# The text modes' prompt styles (config.baseline.prompt), chosen for the prompt baselines on
# validation: "instruct" is PROMPT / EVIDENCE_PROMPT; "terse" asks for a word or two; "fewshot"
# puts three worked examples (made up, in the benchmark's question forms) before the question
# in one prompt; "fewshot_chat" gives them as earlier chat turns (inline without a template).
TERSE = "Answer with one or two words only, no sentence.\n"
_SHOTS = (
    ("What is the woman holding?", ["woman holding umbrella", "woman wearing hat"], "umbrella"),
    ("What kind of thing is the cup?", ["cup is a container", "cup on table"], "container"),
    ("Which thing on the desk is a kind of device?",
     ["lamp on desk", "lamp is a device", "book on desk"], "lamp"),
)
STYLES = ("instruct", "terse", "fewshot", "fewshot_chat")


def _fewshot(with_evidence: bool) -> str:
  parts = []
  for q, ev, a in _SHOTS:
    head = "Evidence:\n" + "\n".join(f"{e}." for e in ev) + "\n" if with_evidence else ""
    parts.append(f"{head}Question: {q}\nAnswer: {a}\n")
  return "\n".join(parts) + "\n"


def styled(style: str, question: str, evidence: Sequence[str] | None = None) -> str:
  """The text-mode prompt of `style` (STYLES) for a question, with evidence lines or None."""
  if style not in STYLES:
    raise ValueError(f"prompt style {style!r}; expected one of {STYLES}")
  if evidence is None:
    body = PROMPT.format(question=question)
  else:
    body = EVIDENCE_PROMPT.format(evidence="\n".join(evidence), question=question)
  if style == "instruct":
    return body
  rest = body.split("\n", 1)[1]  # without the "in a few words" instruction
  if style == "terse":
    return TERSE + rest
  return TERSE + _fewshot(evidence is not None) + rest + "\nAnswer:"


class ByteTokenizer:
  """UTF-8 bytes offset by 3 (0 pad, 1 begin, 2 end): tokenizer-less (random) decoders."""
  pad_id, bos_id, eos_id = 0, 1, 2
  eos_ids = (2,)
  has_chat_template = False

  def __init__(self, vocab_size: int):
    if vocab_size < 259:
      raise ValueError(f"ByteTokenizer needs a vocabulary of at least 259 ids, the decoder has "
                       f"{vocab_size}")

  def encode(self, text: str) -> list[int]:
    return [b + 3 for b in text.encode("utf-8")]

  def decode(self, ids: Sequence[int]) -> str:
    return bytes(i - 3 for i in ids if i >= 3).decode("utf-8", errors="replace")


class TextFormat:
  """Prompt / answer token ids for one tokenizer."""

  def __init__(self, tokenizer):
    self.tok = tokenizer
    self.eos = int(tokenizer.eos_ids[0])
    self.pad = int(getattr(tokenizer, "pad_id", 0))

  @classmethod
  def for_decoder(cls, decoder) -> "TextFormat":
    return cls(decoder.tokenizer or ByteTokenizer(decoder.config.vocab_size))

  def _ids(self, text: str) -> list[int]:
    if self.tok.has_chat_template:
      return list(self.tok.chat_ids(text))
    return [ByteTokenizer.bos_id] * isinstance(self.tok, ByteTokenizer) + self.tok.encode(text)

  def _fewshot_turns(self, question: str, evidence: Sequence[str] | None) -> list[int]:
    """"fewshot_chat" with a chat template: the worked examples as earlier user / assistant turns
    (each user turn in the "terse" form), then the question."""
    turns = []
    for q, ev, a in _SHOTS:
      lines = None if evidence is None else [f"{e}." for e in ev]
      turns += [{"role": "user", "content": styled("terse", q, lines)},
                {"role": "assistant", "content": a}]
    turns.append({"role": "user", "content": styled("terse", question, evidence)})
    return list(self.tok.messages_ids(turns))

  def prompt_ids(self, question: str, style: str = "instruct") -> list[int]:
    if style == "fewshot_chat" and self.tok.has_chat_template:
      return self._fewshot_turns(question, None)
    if style != "instruct":
      return self.text_ids(styled(style, question))
    if self.tok.has_chat_template:
      return self._ids(PROMPT.format(question=question))
    return self._ids(PLAIN_PROMPT.format(question=question))

  def evidence_prompt_ids(self, question: str, evidence: Sequence[str],
                          style: str = "instruct") -> list[int]:
    """Prompt with evidence sentences in the text (Flat-RAG, and the evidence-bound revision)."""
    if style == "fewshot_chat" and self.tok.has_chat_template:
      return self._fewshot_turns(question, list(evidence))
    text = styled(style, question, evidence)
    if style in ("fewshot", "fewshot_chat"):
      return self._ids(text)
    return self._ids(text if self.tok.has_chat_template else text + "\nAnswer:")

  def text_ids(self, text: str) -> list[int]:
    """Any instruction text as a prompt (chat template when there is one)."""
    if text.endswith("Answer:"):
      return self._ids(text)
    return self._ids(text if self.tok.has_chat_template else text + "\nAnswer:")

  def answer_ids(self, answer: str) -> list[int]:
    text = answer if self.tok.has_chat_template else " " + answer
    return self.tok.encode(text) + [self.eos]

  def decode(self, ids: Sequence[int]) -> str:
    return self.tok.decode([i for i in ids if i != self.eos]).strip()


def token_row(ids: Sequence[int], answer_start: int, seq_len: int, pad: int, where: str
              ) -> dict[str, np.ndarray]:
  """One scored row (see the module docstring); `answer_start` = the prompt's length."""
  if len(ids) > seq_len:
    raise ValueError(f"{where}: {len(ids)} tokens exceed the row length {seq_len}")
  tokens = np.full((seq_len,), pad, np.int32)
  tokens[:len(ids)] = ids
  valid = np.arange(seq_len) < len(ids)
  targets = np.concatenate([tokens[1:], [pad]]).astype(np.int32)
  pos = np.arange(seq_len)
  loss_mask = (pos >= answer_start - 1) & (pos < len(ids) - 1)
  return dict(tokens=tokens, valid=valid, targets=targets, loss_mask=loss_mask,
              output_mask=np.concatenate([[False], loss_mask[:-1]]))


def bucket(n: int, multiple: int = 64) -> int:
  """Row lengths rounded up to a multiple, so jitted scoring compiles once per bucket."""
  return max(multiple, -(-n // multiple) * multiple)


def power_bucket(n: int, smallest: int = 64) -> int:
  """Row lengths rounded up to a power of two (at least `smallest`): few shapes, so a jitted
  step over rows of any length compiles a handful of times."""
  length = smallest
  while length < n:
    length *= 2
  return length


def mode_prompt_ids(fmt: TextFormat, mode: str, question: str, evidence: Sequence[str] = (),
                    style: str = "instruct") -> list[int]:
  """The prompt of a mode: Flat-RAG and its trained variant with the evidence lines, GraphLoom,
  no retrieval and its trained variant without (GraphLoom and the trained modes always in the
  "instruct" style they are trained with). Training featurisation and answering both call it."""
  if mode in ("graphloom", "flat_rag_tuned", "no_retrieval_tuned"):
    style = "instruct"
  if mode in ("flat_rag", "routed_text", "flat_rag_tuned"):
    return fmt.evidence_prompt_ids(question, evidence, style)
  return fmt.prompt_ids(question, style)
