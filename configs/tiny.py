"""A tiny random Llama for tests and CI: every code path, seconds per step on a laptop CPU."""

from graphloom_jax.configs import base


def get_config():
  c = base.get_base_config()
  c.model.weights = "random"
  c.model.max_seq_len = 512
  c.model.arch.vocab_size = 512
  c.model.arch.hidden_size = 64
  c.model.arch.intermediate_size = 128
  c.model.arch.num_hidden_layers = 2
  c.model.arch.num_attention_heads = 4
  c.model.arch.num_key_value_heads = 2
  c.model.arch.head_dim = 16
  c.model.arch.rope_theta = 500000.0
  c.model.arch.rms_norm_eps = 1e-5
  c.model.arch.tie_word_embeddings = True
  c.model.arch.max_position_embeddings = 512
  c.memory.prefix_len = 4
  c.memory.bank_size = 16
  c.memory.recent_tokens = 8
  c.memory.similar_tokens = 4
  c.memory.sink_tokens = 2
  c.train.warmup_steps = 5
  c.train.learning_rate = 3e-3  # 40 steps: a visibly falling loss in CI
  c.train.num_steps = 40
  c.train.batch_size = 4
  c.train.grad_accum = 2
  c.train.log_every = 5
  c.train.eval_every = 20
  c.train.checkpoint_every = 10
  c.train.seq_len = 192  # the longest embedded SceneKB question with its answer is about 162 tokens here
  c.train.max_train_examples = 160
  c.train.eval_examples = 32
  c.router.router_dim = 16
  c.fusion.dim = 32
  c.retrieval.second_round = "template"  # the random decoder has no tokenizer to write queries
  c.decode.max_new_tokens = 8  # a random decoder rarely stops on its own
  c.verify.max_evidence = 4  # byte-level prompts: 4 triples keep verification rows short
  return c
