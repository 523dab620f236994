"""The data that flows through GraphLoom's pipeline, stage by stage.

  question + triples  --instance graph-->  InstanceGraph
                      --bounded retrieval--> retrieval.subgraph.Subgraph
                      --corrective retrieval--> Subgraph (+ Correction or None)
                      --evidence--> Evidence (slot bank and prefix inputs, fixed shapes)
                      --routed KG-JSA++ decoding--> text (+ the routed slots at answer steps)
                      --verification / revision--> Claims
                      --> Answer (text, choice, cited triples with their sources, timings)

Every type here is plain data: numpy arrays and Python values, serialisable with `to_json`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from graphloom_jax.graph.triples import Triple

MODES = ("graphloom", "flat_rag", "no_retrieval")
# The -KG-JSA++ ablation: the slots GraphLoom's router picks at the first answer step, verbalised
# into a Flat-RAG prompt instead of the memory (pipeline/ablation.py).
ABLATION_MODES = ("routed_text",)
# The trained text baselines: Flat-RAG's and no retrieval's prompts read by the frozen decoder
# with a trained adapter (models.heads.TunedPrefix) in its memory layers.
TUNED_MODES = ("flat_rag_tuned", "no_retrieval_tuned")
# The modes that read no evidence: their answers have no retrieval to score or revise from.
NO_EVIDENCE_MODES = ("no_retrieval", "no_retrieval_tuned")
ALL_MODES = MODES + ABLATION_MODES + TUNED_MODES
# Stage names of Answer.timings, in pipeline order.
STAGES = ("instance_graph", "retrieval", "correction", "evidence", "decoding", "options",
          "verification", "revision")


def triple_source(t: Triple) -> dict[str, Any]:
  """Where a triple came from: its source, instance and region / span / reference."""
  p = t.provenance
  out: dict[str, Any] = {"source": t.source, "instance": p.instance}
  if p.region is not None:
    out["box"] = list(p.region)
  if p.span is not None:
    out["span"] = list(p.span)
  if getattr(p, "ref", None):
    out["ref"] = p.ref
  return out


@dataclasses.dataclass
class CitedTriple:
  """A triple the answer rests on: a routed slot at the answer steps with its gate."""
  triple: Triple
  gate: float  # the largest gate g_p of the triple's slots over the answer steps
  slot: str  # "entity" or "relation" (the slot that carried it)
  score: float  # retrieval score (cosine to the question)

  def to_json(self) -> dict[str, Any]:
    return {"subject": self.triple.subject, "relation": self.triple.relation,
            "object": self.triple.object, "confidence": self.triple.confidence,
            "gate": self.gate, "slot": self.slot, "score": self.score,
            **triple_source(self.triple)}


@dataclasses.dataclass
class Claim:
  """An atomic claim of the answer and its entailment by the evidence."""
  text: str
  probability: float  # P(entailed | evidence)
  supported: bool  # probability >= verify.tau_ent

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class Correction:
  """What corrective retrieval did: the evaluator's score, and the action taken (or None when
  the score was at or above tau_eval)."""
  score: float  # evaluator score of the first subgraph
  threshold: float  # correct.tau_eval
  action: str | None  # "expansion_boost", "query_reformulation", "verbalization_repair" or None
  score_after: float | None = None  # evaluator score of the corrected subgraph
  utilities: dict[str, float] = dataclasses.field(default_factory=dict)  # per action, net
  details: dict[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class Answer:
  """GraphLoom's answer to one question, with its provenance."""
  question: str
  mode: str
  text: str
  choice: int | None = None  # index of the chosen option (multiple choice), else None
  option_scores: list[float] | None = None  # length-normalised log-likelihood per option
  evidence: list[CitedTriple] = dataclasses.field(default_factory=list)
  claims: list[Claim] = dataclasses.field(default_factory=list)
  revised: bool = False  # a revision replaced the first answer
  first_text: str | None = None  # the first answer, when a revision was attempted
  revision_text: str | None = None  # a revision the verifier supported less (not adopted)
  correction: Correction | None = None
  retrieved: list[Triple] = dataclasses.field(default_factory=list)  # the final subgraph's edges
  timings: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds per stage
  prompt_tokens: int | None = None  # the answer prompt's length in tokens (before the answer)

  @property
  def supported(self) -> bool:
    """Every claim passed verification (True when there was nothing to verify)."""
    return all(c.supported for c in self.claims)

  def to_json(self) -> dict[str, Any]:
    return {"question": self.question, "mode": self.mode, "text": self.text,
            "choice": self.choice, "option_scores": self.option_scores,
            "evidence": [e.to_json() for e in self.evidence],
            "claims": [c.to_json() for c in self.claims], "supported": self.supported,
            "revised": self.revised, "first_text": self.first_text,
            "revision_text": self.revision_text,
            "correction": self.correction.to_json() if self.correction else None,
            "retrieved": [t.to_json() for t in self.retrieved], "timings": self.timings,
            "prompt_tokens": self.prompt_tokens}
