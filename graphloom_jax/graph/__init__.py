"""Graph construction (docs/method.md §1): the triple schema and its IO, REBEL parsing, scene
graphs, canonicalisation, the instance graph, knowledge-base loaders and enrichment
(`graphloom_jax.graph.enrich.enrich`)."""

from graphloom_jax.graph.canonical import Canonicalizer, Morphy, canonicalize, merge_duplicates
from graphloom_jax.graph.enrich import KnowledgeSource
from graphloom_jax.graph.instance_graph import build_instance_graph, filter_edges, graph_triples
from graphloom_jax.graph.kb import (TripleKB, VG150Stats, WordNet, load_conceptnet,
                                    load_vg150_vocab)
from graphloom_jax.graph.rebel import (RebelExtractor, describe_and_extract, parse_rebel,
                                       parse_rebel_tokens, rebel_triples)
from graphloom_jax.graph.scene_graph import read_scene_graphs, scene_graph_triples
from graphloom_jax.graph.triples import (Provenance, ReadReport, Triple, TripleFormatError,
                                         read_triples, write_triples)
