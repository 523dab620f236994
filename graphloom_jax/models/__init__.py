"""Models: the Llama decoder (frozen backbone), the BERT sentence embedder, and GraphLoom's
trainable memory modules. Public entry points:

  load_decoder(path, dtype="float32") -> Decoder
  load_embedder(path=None, dtype="float32") -> Embedder
  embedder_from_config(config.embedder) -> Embedder
"""


def load_decoder(path: str, dtype: str = "float32", **kwargs):
  from graphloom_jax.models import decoder
  return decoder.load_decoder(path, dtype=dtype, **kwargs)


def load_embedder(path: str | None = None, **kwargs):
  from graphloom_jax.models import embedder
  return embedder.load_embedder(path, **kwargs)


def embedder_from_config(section):
  """The embedder a config's `embedder` section names (path, "" = the embedded MiniLM; dtype)."""
  return load_embedder(section.path or None, dtype=section.dtype)
