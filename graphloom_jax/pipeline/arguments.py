"""Type checks of `GraphLoom.answer` / `answer_batch` arguments, before any work: a bad type is
a TypeError naming the argument and the question, never a silently wrong reading (a string of
options read as its characters, a number read as an empty question)."""

from typing import Any, Sequence


def _is_text_list(x: Any) -> bool:
  return isinstance(x, (list, tuple)) and all(isinstance(o, str) for o in x)


def check_answer_args(questions: Sequence, triples: Sequence | None, *,
                      objects: Sequence | None, options: Sequence | None, mode: Any) -> None:
  """Raises TypeError for arguments of the wrong type; `GraphLoom._items` checks the values
  (empty questions, too few options, mismatched lengths)."""
  if not isinstance(mode, str):
    raise TypeError(f"mode must be a string, got {type(mode).__name__} {mode!r}")
  if isinstance(questions, (str, bytes)) or not isinstance(questions, Sequence):
    raise TypeError(f"questions must be a list of strings, got {type(questions).__name__}; use "
                    "answer() for one question")
  for i, q in enumerate(questions):
    if not isinstance(q, str):
      raise TypeError(f"question {i} must be a string, got {type(q).__name__} {q!r}")
  for name, seq in (("triples", triples), ("objects", objects), ("options", options)):
    if seq is not None and (isinstance(seq, (str, bytes, dict)) or not isinstance(seq, Sequence)):
      raise TypeError(f"{name} must be a list with one entry per question, got "
                      f"{type(seq).__name__}")
  for name, seq in (("options", options), ("objects", objects)):
    for i, entry in enumerate(seq or ()):
      if entry is not None and not _is_text_list(entry):
        kind = "a string" if isinstance(entry, str) else type(entry).__name__
        raise TypeError(f"{name} of question {i} must be a list of strings, got {kind}: "
                        f"{entry!r:.80}")
  for i, t in enumerate(triples or ()):
    if isinstance(t, (str, bytes)):
      raise TypeError(f"triples of question {i} must be Triple records, a scene graph dict or "
                      f"an InstanceGraph, got a string: {t!r:.80}")
