"""Retrieval: vector indexes (exact, ScaNN), bounded subgraph retrieval, GRAIL steering."""

from graphloom_jax.retrieval.index import ExactIndex, Index, ScannIndex, load_index
