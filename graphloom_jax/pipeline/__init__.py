"""GraphLoom end to end (see `pipeline.graphloom` for the stages, top to bottom).

  from graphloom_jax.pipeline import GraphLoom
  gl = GraphLoom.from_pretrained("embedded")
  answer = gl.answer("What is the horse in front of?", scene_graph, options=[...])
  answer.text, answer.choice, answer.evidence, answer.claims, answer.timings
"""

from graphloom_jax.pipeline.graphloom import GraphLoom, Prepared, load_heads, save_heads
from graphloom_jax.pipeline.types import MODES, STAGES, Answer, CitedTriple, Claim, Correction

__all__ = ["GraphLoom", "Prepared", "load_heads", "save_heads", "MODES", "STAGES", "Answer",
           "CitedTriple", "Claim", "Correction"]
