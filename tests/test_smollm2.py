"""The embedded SmolLM2-135M-Instruct GGUF against transformers' own GGUF loading."""

import numpy as np
import pytest
import torch
import transformers

from graphloom_jax import assets
from graphloom_jax.models import load_decoder

pytestmark = pytest.mark.skipif(not assets.available("smollm2"),
                                reason="embedded SmolLM2 not installed (launch/setup.sh)")

TEXT = ("The Visual Genome dataset connects images to structured knowledge. Each image carries "
        "objects, attributes and relationships, and every relationship links a subject to an "
        "object through a predicate such as 'on', 'holding' or 'wearing'. ")


@pytest.fixture(scope="module")
def decoder():
  return load_decoder("embedded")


def test_logits_match_transformers_gguf(decoder):
  path = assets.smollm2_gguf()
  ref = transformers.AutoModelForCausalLM.from_pretrained(
      str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
  ids = decoder.tokenizer.encode(TEXT * 12)[:512]
  assert len(ids) == 512
  with torch.no_grad():
    expected = ref(torch.as_tensor([ids])).logits.numpy()
  got = decoder.logits(np.asarray([ids], np.int32))
  assert np.array_equal(got.argmax(-1), expected.argmax(-1))
  assert np.max(np.abs(got - expected)) <= 1e-3


def test_answers_paris(decoder):
  answer = decoder.generate(["What is the capital of France?"], max_new_tokens=24)[0]
  assert "Paris" in answer


def test_fewshot_chat_prompt_puts_examples_in_earlier_turns(decoder):
  from graphloom_jax.pipeline import prompts
  fmt = prompts.TextFormat(decoder.tokenizer)
  ids = fmt.evidence_prompt_ids("What is the horse near?", ["horse near fence."], "fewshot_chat")
  text = decoder.tokenizer.decode(ids)
  for question, _, answer in prompts._SHOTS:
    assert question in text and f"assistant\n{answer}" in text
  assert text.rstrip().endswith("assistant") and text.count("What is the horse near?") == 1
  # the inline form keeps every example inside the one user turn
  inline = decoder.tokenizer.decode(fmt.evidence_prompt_ids("Q?", ["a b c."], "fewshot"))
  assert inline.count("\nassistant\n") == 1
  with pytest.raises(ValueError, match="end with a user turn"):
    decoder.tokenizer.messages_ids([{"role": "assistant", "content": "x"}])


def test_tokenizer_without_torch_equals_transformers_gguf_tokenizer(decoder, rng):
  """Tokenizer.from_gguf (metadata read by the gguf package) against transformers'
  AutoTokenizer gguf_file path (which reads it through PyTorch): the same ids for random text
  (ASCII, accents, CJK, emoji, special tokens, whitespace runs), the same special ids, chat
  template and decoding."""
  path = assets.smollm2_gguf()
  ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
  ours = decoder.tokenizer
  alphabet = list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;:!?'\"-_()[]{}\n\t") + \
      list("éèüßñç漢字かな한국어😀🐴") + ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "  ", "\n\n"]
  texts = [TEXT, "", " ", "What is the horse eating?"] + [
      "".join(rng.choice(alphabet, size=int(rng.integers(1, 60)))) for _ in range(200)]
  for text in texts:
    want = ref.encode(text, add_special_tokens=False)
    assert ours.encode(text) == want, repr(text)
    assert ours.decode(want) == ref.decode(want, skip_special_tokens=True), repr(text)
  for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
    assert getattr(ours.hf, name) == getattr(ref, name), name
  assert len(ours.hf) == len(ref) and ours.hf.chat_template == ref.chat_template
  messages = [{"role": "user", "content": "What is the capital of France?"}]
  assert ours.chat_ids(messages[0]["content"]) == ref.encode(ref.apply_chat_template(
      messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False)


def test_tokenizer_from_a_bad_gguf_file_names_it(tmp_path):
  from graphloom_jax.models.tokenizer import Tokenizer
  with pytest.raises(FileNotFoundError, match="no GGUF file"):
    Tokenizer.from_gguf(tmp_path / "missing.gguf")
  bad = tmp_path / "bad.gguf"
  bad.write_bytes(b"GGUF" + b"\x00" * 12)
  with pytest.raises(ValueError, match="bad.gguf"):
    Tokenizer.from_gguf(bad)
