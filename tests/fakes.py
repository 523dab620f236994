"""Small stand-ins shared by the tests."""

import numpy as np


class HashEmbed:
  """Deterministic fake sentence embedder: unit vectors [16] seeded by the text's bytes, so a
  text always gets the same vector (in any process) and distinct texts nearly orthogonal ones.
  Callable and with `embed`, like the real embedders."""
  model_id = "hash-16"

  def embed(self, texts):
    out = []
    for t in texts:
      rng = np.random.default_rng(int.from_bytes(t.encode()[:64].ljust(8, b"\0")[-8:], "little")
                                  ^ len(t))
      v = rng.standard_normal(16)
      out.append(v / np.linalg.norm(v))
    return np.asarray(out, np.float32)

  __call__ = embed
