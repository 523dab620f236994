"""The paper's setup: Llama-3.1-8B(-Instruct) on an A100, bfloat16 backbone.

`model.weights` must point at a local Hugging Face safetensors folder (nothing is downloaded).
"""

from graphloom_jax.configs import base


def get_config():
  c = base.get_base_config()
  c.model.weights = ""  # required: --config.model.weights=/path/to/Llama-3.1-8B-Instruct
  c.model.dtype = "bfloat16"
  c.model.max_seq_len = 8192
  # Model-parallel: the parameters split over every local device ("model"), batches whole.
  c.mesh.data = 1
  c.mesh.model = 0
  # Architecture, for shape checks with jax.eval_shape when no weights are present.
  c.model.arch.vocab_size = 128256
  c.model.arch.hidden_size = 4096
  c.model.arch.intermediate_size = 14336
  c.model.arch.num_hidden_layers = 32
  c.model.arch.num_attention_heads = 32
  c.model.arch.num_key_value_heads = 8
  c.model.arch.head_dim = 128
  c.model.arch.rope_theta = 500000.0
  c.model.arch.rms_norm_eps = 1e-5
  c.model.arch.tie_word_embeddings = False
  c.model.arch.max_position_embeddings = 131072
  c.model.arch.rope_scaling = dict(
      rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
      original_max_position_embeddings=8192)
  return c
