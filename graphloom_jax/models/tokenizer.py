"""Tokenizers for the decoder: a thin layer over a Hugging Face fast tokenizer that knows the
model's end-of-sequence ids and chat template. Built from a model folder (`tokenizer.json`,
`tokenizer_config.json`) or from a GGUF file's metadata (vocabulary, merges, chat template)."""

import os
import pathlib
from typing import Sequence


class Tokenizer:

  def __init__(self, hf_tokenizer, eos_ids: Sequence[int] = ()):
    self.hf = hf_tokenizer
    ids = set(int(i) for i in eos_ids)
    if hf_tokenizer.eos_token_id is not None:
      ids.add(int(hf_tokenizer.eos_token_id))
    self.eos_ids = tuple(sorted(ids))
    pad = hf_tokenizer.pad_token_id
    self.pad_id = int(pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0))

  @classmethod
  def from_folder(cls, folder: str | os.PathLike, eos_ids: Sequence[int] = ()) -> "Tokenizer":
    from transformers import AutoTokenizer
    return cls(AutoTokenizer.from_pretrained(str(folder)), eos_ids)

  @classmethod
  def from_gguf(cls, path: str | os.PathLike, eos_ids: Sequence[int] = ()) -> "Tokenizer":
    from transformers import AutoTokenizer
    path = pathlib.Path(path)
    return cls(AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name), eos_ids)

  @property
  def has_chat_template(self) -> bool:
    return bool(getattr(self.hf, "chat_template", None))

  @property
  def vocab_size(self) -> int:
    return len(self.hf)

  def encode(self, text: str) -> list[int]:
    return list(self.hf.encode(text, add_special_tokens=False))

  def chat_ids(self, prompt: str, system: str | None = None) -> list[int]:
    """Token ids of a single user turn in the model's chat template, ready for the answer."""
    if not self.has_chat_template:
      raise ValueError("this tokenizer has no chat template; call generate(..., chat=False)")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    text = self.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return self.encode(text)

  def messages_ids(self, messages: Sequence[dict]) -> list[int]:
    """Token ids of a conversation ({"role", "content"} dicts, ending with a user turn) in the
    model's chat template, ready for the next assistant turn (few-shot examples as turns)."""
    if not self.has_chat_template:
      raise ValueError("this tokenizer has no chat template")
    if not messages or messages[-1].get("role") != "user":
      raise ValueError("messages must end with a user turn")
    text = self.hf.apply_chat_template(list(messages), tokenize=False,
                                       add_generation_prompt=True)
    return self.encode(text)

  def decode(self, ids: Sequence[int]) -> str:
    return self.hf.decode(list(ids), skip_special_tokens=True)

  def save(self, folder: str | os.PathLike):
    self.hf.save_pretrained(str(folder))
