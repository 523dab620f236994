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
