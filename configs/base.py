"""Shared defaults for every configuration: the package's own (graphloom_jax/defaults.py).

Each concrete config (`tiny.py`, `smollm2.py`, `llama3_8b.py`) starts from `get_base_config()`
and overrides the model section.
"""

from graphloom_jax.defaults import base_config as get_base_config  # noqa: F401
