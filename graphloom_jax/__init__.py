"""graphloom_jax: GraphLoom (KG-JSA++ joint attention over routed graph evidence) and GRAIL
(gap-aware query steering) in JAX/Flax."""

__version__ = "0.1.0"
