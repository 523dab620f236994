"""Builds GraphLoom's bounded retriever from a config: one place that maps
`config.retrieval.second_round` to a query writer, so every launcher offers the same choices.

  second_round = "none"      one round only
               = "template"  the configured template (no model)
               = "decoder"   the decoder writes a <= 15-token intermediate query
               = "grail"     GRAIL steers the question vector away from the round-1 evidence
                             (checkpoint in config.grail.checkpoint, from launch.train_grail)
"""

from graphloom_jax.retrieval import subgraph

SECOND_ROUNDS = ("none", "template", "decoder", "grail")


def query_writer(config, decoder=None):
  """The second-round query writer `config` asks for (None for "none")."""
  mode = config.retrieval.second_round
  tokens = config.retrieval.intermediate_query_tokens
  if mode == "none":
    return None
  if mode == "template":
    return subgraph.TemplateQueryWriter(
        config.retrieval.query_template, tokens)
  if mode == "decoder":
    if decoder is None:
      raise ValueError("config.retrieval.second_round='decoder' needs a decoder; pass one or "
                       "choose 'template', 'grail' or 'none'")
    return subgraph.DecoderQueryWriter(decoder, tokens)
  if mode == "grail":
    from graphloom_jax.retrieval import grail
    return grail.second_round_writer(config)
  raise ValueError(f"config.retrieval.second_round={mode!r}; expected one of {SECOND_ROUNDS}")


def bounded_retriever(config, pool: subgraph.TriplePool, embedder, writer=None,
                      decoder=None) -> subgraph.BoundedRetriever:
  """A `BoundedRetriever` over `pool`; `writer` (from `query_writer`) is reused across
  questions when given, else built here."""
  if writer is None and config.retrieval.second_round != "none":
    writer = query_writer(config, decoder)
  return subgraph.BoundedRetriever(pool, embedder, subgraph.SubgraphConfig.from_config(
      config.retrieval), query_writer=writer)
