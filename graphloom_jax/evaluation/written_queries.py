"""Queries the decoder writes: the explicit-rewriting baselines GRAIL's steering is compared with.

Each method turns a question (and, where it reads it, the covered evidence) into a search text;
the text is embedded like a question and searched in the same space as Query-only (GRAIL's
query adapter, covered items skipped), so the rows differ only in what text is embedded:

  closed_book       the decoder sees the question alone and writes a search query for the fact
                    that answers it; the query is what it wrote.
  ircot             IRCoT-style: the decoder sees the question and the covered evidence and
                    writes the next sentence of its reasoning; that sentence is the query (the
                    first query of IRCoT is the question itself; with evidence covered, the
                    next query is the newest reasoning sentence).
  answer_augmented  the decoder sees the question and the covered evidence and answers in a
                    few words; the query is the question followed by that answer.

  write(generate, method, questions, contexts) -> list[str]   the query texts
  decoder_generate(decoder, max_new_tokens) -> generate       a Decoder as `generate`

`generate` maps a list of prompts to a list of completions (greedy decoding in the benchmarks);
contexts are the covered evidence texts of each question (ignored by closed_book).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

METHODS = ("closed_book", "ircot", "answer_augmented")
LABELS = {"closed_book": "Closed-Book (decoder)", "ircot": "IRCoT-style (decoder)",
          "answer_augmented": "Answer-Augmented (decoder)"}
MAX_EVIDENCE_LINES = 8


def _evidence(context: Sequence[str]) -> str:
  lines = [c for c in context if c][:MAX_EVIDENCE_LINES]
  return "\n".join(f"- {c}" for c in lines) if lines else "- (none)"


def prompt(method: str, question: str, context: Sequence[str] = ()) -> str:
  """The instruction the decoder answers for one question."""
  if method == "closed_book":
    return ("Write a short search query for the fact that answers this question. Reply with "
            f"the query only.\nQuestion: {question}")
  if method == "ircot":
    return ("Facts found so far:\n" + _evidence(context) + f"\nQuestion: {question}\n"
            "Write the next step of the reasoning in one sentence: which fact is still needed.")
  if method == "answer_augmented":
    return ("Facts:\n" + _evidence(context) + f"\nQuestion: {question}\n"
            "Answer in a few words.")
  raise ValueError(f"unknown written-query method {method!r}; expected one of {METHODS}")


def first_sentence(text: str) -> str:
  """The first sentence (or line) of a completion, stripped; the whole text when it has none."""
  text = text.strip()
  line = text.split("\n", 1)[0].strip()
  m = re.match(r"(.+?[.!?])(\s|$)", line)
  return (m.group(1) if m else line).strip()


def query_text(method: str, question: str, completion: str) -> str:
  """The search text of one method from the decoder's completion (the question when the
  decoder wrote nothing usable)."""
  sentence = first_sentence(completion)
  if method == "answer_augmented":
    return f"{question} {sentence}".strip()
  if method in ("closed_book", "ircot"):
    return sentence or question
  raise ValueError(f"unknown written-query method {method!r}; expected one of {METHODS}")


def write(generate: Callable[[list[str]], list[str]], method: str, questions: Sequence[str],
          contexts: Sequence[Sequence[str]] | None = None, batch_size: int = 16,
          progress: bool = False) -> list[str]:
  """The query texts of `method` for each question, through `generate` in batches (a progress
  bar over the batches with progress=True)."""
  if method not in METHODS:
    raise ValueError(f"unknown written-query method {method!r}; expected one of {METHODS}")
  contexts = [()] * len(questions) if contexts is None else contexts
  if len(contexts) != len(questions):
    raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
  prompts = [prompt(method, q, c) for q, c in zip(questions, contexts)]
  out = []
  starts = range(0, len(prompts), batch_size)
  if progress:
    import tqdm
    starts = tqdm.tqdm(starts, desc=f"writing {method} queries", unit="batch")
  for i in starts:
    chunk = prompts[i:i + batch_size]
    completions = generate(chunk)
    if len(completions) != len(chunk):
      raise ValueError(f"generate returned {len(completions)} completions for {len(chunk)} "
                       "prompts")
    out += [query_text(method, q, c) for q, c in zip(questions[i:i + batch_size], completions)]
  return out


def decoder_generate(decoder, max_new_tokens: int = 32) -> Callable[[list[str]], list[str]]:
  """Greedy completions from a `models.decoder.Decoder` through its chat template (a decoder
  without a tokenizer reads the prompt as bytes, `pipeline.prompts.ByteTokenizer`)."""
  if decoder.tokenizer is not None:
    return lambda prompts: decoder.generate(list(prompts), max_new_tokens)
  from graphloom_jax.pipeline.prompts import ByteTokenizer
  tok = ByteTokenizer(decoder.config.vocab_size)

  def generate(prompts):
    ids = decoder.generate_ids([tok.encode(p) for p in prompts], max_new_tokens,
                               eos_ids=tok.eos_ids)
    return [tok.decode(o) for o in ids]
  return generate
