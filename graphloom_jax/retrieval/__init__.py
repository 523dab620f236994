"""Retrieval: vector indexes (exact, ScaNN), bounded subgraph retrieval, GRAIL steering."""

from graphloom_jax.retrieval.index import ExactIndex, Index, ScannIndex, load_index
from graphloom_jax.retrieval.subgraph import (BoundedRetriever, DecoderQueryWriter,
                                              RoundOneContext, Subgraph, SubgraphConfig,
                                              TemplateQueryWriter, TriplePool, bridge_nodes)
