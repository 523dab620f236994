"""Claim verification and the evidence-bound revision prompt (GraphLoom's last stage).

An answer is cut into atomic claims (pipeline/claims.py `claims_for`), each claim is scored by
an entailment judge (pipeline/judges.py; `judges.from_config` builds the one config.verify.judge
names) against the premise "\\n".join(evidence), and a claim is supported iff its probability
is at least `tau_ent` (`verify`). Claims that fail are named in `revision_prompt`, the
instruction for the single evidence-bound revision. The claims' and judges' names are
re-exported here, where verification's callers find them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from graphloom_jax.pipeline.claims import claims_for, split_claims
from graphloom_jax.pipeline.judges import (NO_EVIDENCE, PROMPT, VERIFIERS, CalibratedJudge,
                                           DecoderJudge, GraphVerifier, NLIVerifier, Verifier,
                                           check_settings, fit_platt, from_config, graph_content,
                                           graph_tokens, question_readings)
from graphloom_jax.pipeline.types import Claim

__all__ = ["NO_EVIDENCE", "PROMPT", "REVISION_PROMPT", "VERIFIERS", "CalibratedJudge",
           "DecoderJudge", "GraphVerifier", "NLIVerifier", "Verifier", "check_settings",
           "claims_for", "fit_platt", "from_config", "graph_content", "graph_tokens",
           "question_readings", "revision_prompt", "split_claims", "verify"]


def verify(question: str, answer: str, evidence: Sequence[str], verifier: Verifier,
           tau_ent: float) -> list[Claim]:
  """Claims of the answer (`claims_for`) scored against the premise "\\n".join(evidence);
  supported = probability >= tau_ent. A verifier that raises or returns anything but
  len(claims) finite probabilities in [0, 1] is a RuntimeError: verification never skips."""
  if not 0.0 <= tau_ent <= 1.0:  # also rejects NaN
    raise ValueError(f"tau_ent must be in [0, 1], got {tau_ent}")
  claims = claims_for(question, answer)
  if not claims:
    return []
  name = type(verifier).__name__
  try:
    probs = verifier.entailment("\n".join(evidence), claims)
  except Exception as e:
    raise RuntimeError(f"verifier {name} failed on {len(claims)} claims: {e!r}") from e
  probs = np.asarray(probs, dtype=np.float64)
  if probs.shape != (len(claims),):
    raise RuntimeError(f"verifier {name} returned shape {probs.shape} for {len(claims)} claims")
  if not np.all((probs >= 0.0) & (probs <= 1.0)):  # NaN fails too
    raise RuntimeError(f"verifier {name} returned values outside [0, 1] (or NaN): {probs}")
  return [Claim(text=c, probability=float(p), supported=bool(p >= tau_ent))
          for c, p in zip(claims, probs)]


# The one evidence-bound revision: answer again from the evidence alone, in the short answer
# style of the first pass, steering clear of what verification rejected.
REVISION_PROMPT = ("Answer the question about the scene in a few words, using ONLY the evidence "
                   "below.\nEvidence:\n{evidence}\n"
                   "These claims are not supported by the evidence; do not repeat them:\n"
                   "{failed}\nQuestion: {question}")


def revision_prompt(question: str, evidence: Sequence[str], failed: Sequence[str]) -> str:
  """REVISION_PROMPT with the evidence and the unsupported claims as "- " lists ("- (none)"
  when a list is empty)."""
  bullets = lambda xs: "\n".join(f"- {x}" for x in xs) or "- (none)"
  return REVISION_PROMPT.format(evidence=bullets(evidence), failed=bullets(failed),
                                question=question.strip())
