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
    """From a GGUF file's tokenizer metadata, converted by transformers' own GGUF tokenizer
    converter. The metadata is read with the gguf package: transformers' GGUF reader (behind
    `AutoTokenizer.from_pretrained(..., gguf_file=)`) imports PyTorch, which the default path
    does not install. tests/test_tokenizer.py checks the result against that path."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf import gguf_tokenizer_mapping as mapping
    architecture, tokenizer, config = gguf_tokenizer_fields(path, mapping.GGUF_TOKENIZER_MAPPING)
    backend, extra = mapping.convert_gguf_tokenizer(architecture, tokenizer)
    return cls(PreTrainedTokenizerFast(tokenizer_object=backend, **config, **extra), eos_ids)

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


# Special tokens named by id in a GGUF file's metadata (tokenizer.ggml.<key>).
GGUF_SPECIAL_TOKENS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                       "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}


def gguf_tokenizer_fields(path, renames: dict) -> tuple[str, dict, dict]:
  """(architecture, tokenizer fields, tokenizer config) of a GGUF file, grouped and renamed by
  `renames` (transformers' GGUF_TOKENIZER_MAPPING: group -> {metadata key: field name}), with
  the special tokens as strings and the BOS default llama.cpp applies to files of type "llama"
  that do not say (the same grouping transformers' own GGUF reader makes)."""
  import gguf
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"{path}: no GGUF file")
  try:
    fields = gguf.GGUFReader(str(path)).fields
  except Exception as e:  # the reader raises ValueError / struct.error on damaged files
    raise ValueError(f"{path}: not a readable GGUF file ({e})") from None
  metadata = {k: f.contents() for k, f in fields.items()
              if k.startswith("tokenizer.") or k == "general.architecture"}
  if "general.architecture" not in metadata or "tokenizer.ggml.tokens" not in metadata:
    raise ValueError(f"{path}: the GGUF metadata holds no tokenizer")
  grouped = {group: {name: metadata[f"tokenizer.{key}"] for key, name in keys.items()
                     if f"tokenizer.{key}" in metadata} for group, keys in renames.items()}
  tokenizer, config = grouped["tokenizer"], grouped["tokenizer_config"]
  if tokenizer.get("tokenizer_type") == "llama":
    config.setdefault("add_bos_token", True)
  elif tokenizer.get("tokenizer_type") == "gemma4":
    config["add_bos_token"] = False
  tokens = tokenizer["tokens"]
  for name, key in GGUF_SPECIAL_TOKENS.items():
    token_id = metadata.get(f"tokenizer.ggml.{key}")
    config[name] = tokens[token_id] if token_id is not None and 0 <= token_id < len(tokens) \
        else None
  return metadata["general.architecture"], tokenizer, config
