"""A reading sheet of the paper's H-Rate verdicts: for the first N answers of a SceneKB row, the
question, the answer, the evidence the mode was given and each claim with its automatic verdicts
(supported by that evidence, true per the generator), as markdown, so a person can read the
answers and count how often they agree with the verifier (evaluation/hallucination.py).

  python -m benchmarks.scenekb_claims --root=runs/scenekb_v3 \
    --row=benchmarks/results/scenekb_v3/rows/test-100/seed0/flat_rag.json --num=50 \
    --out=benchmarks/results/scenekb_v3/reading/flat_rag.md

The evidence is rebuilt as the row built it: GraphLoom's retrieved subgraph over the question's
instance graph (the slot bank of GraphLoom, the prompt of Flat-RAG); no evidence for the
no-retrieval modes. Rows under an evidence control are refused (their evidence is another's).
"""

import json
import pathlib

from absl import app, flags

from graphloom_jax import atomic
from graphloom_jax.configs import smollm2
from graphloom_jax.data import scenekb
from graphloom_jax.evaluation import hallucination
from graphloom_jax.evaluation import scenekb_rows as rows_lib
from graphloom_jax.pipeline.types import NO_EVIDENCE_MODES

_ROOT = flags.DEFINE_string("root", None, "benchmark folder (build_benchmark --out)",
                            required=True)
_ROW = flags.DEFINE_string("row", None, "a row's JSON (scenekb_tables output)", required=True)
_NUM = flags.DEFINE_integer("num", 50, "answers to put on the sheet (the row's first ones)")
_OUT = flags.DEFINE_string("out", None, "the markdown sheet to write", required=True)
_EVIDENCE = flags.DEFINE_integer("show_evidence", 10, "evidence triples shown per answer (and, "
                                 "under each claim, every triple naming one of its entities)")


def _claim_text(claim: hallucination.PaperClaim) -> str:
  alternatives = [" & ".join(f"({s}, {r}, {o})" for s, r, o in alt)
                  for alt in claim.alternatives]
  return " OR ".join(alternatives)


def _touching(claim: hallucination.PaperClaim, given) -> list:
  """The evidence triples that name an entity of the claim (its variables aside)."""
  names = {x for alt in claim.alternatives for atom in alt for x in (atom[0], atom[2])
           if not x.startswith("?")}
  return [t for t in given if t[0] in names or t[2] in names]


def sheet(row: dict, questions: dict, evidence: dict, verifier, num: int, shown: int
          ) -> tuple[str, int]:
  """The markdown sheet of the row's first `num` records, and how many of them get verdicts
  other than the row's record (0 when the evidence was rebuilt as the row built it)."""
  body, differ = [], 0
  for i, r in enumerate(row["records"][:num], 1):
    q = questions[r["qid"]]
    given = evidence[r["qid"]]
    cited = r["cited"] if row["mode"] == "graphloom" else ()
    a = hallucination.assess(verifier, r["qid"], r["answer"], given, cited=cited)
    # The rebuilt evidence must give the row's own verdicts.
    differ += (len(a.claims), sum(not c.supported for c in a.claims)) != (
        r["claims"], r["unsupported_claims"])
    body += [f"## {i}. {q.question}", "",
              f"- options: {', '.join(q.extra['options'])}; gold: {', '.join(q.answer_texts)}",
              f"- answer: {r['answer']!r}" + (" (abstained)" if a.abstained else ""),
              f"- evidence ({len(given)} triples): "
              + ("; ".join(f"({s}, {p}, {o})" for s, p, o in given[:shown]) or "none")
              + (" ..." if len(given) > shown else "")]
    for c in a.claims:
      body.append(f"  - [{c.origin}] {_claim_text(c)} [supported={'yes' if c.supported else 'no'}"
                   f", true={'yes' if c.true else 'no'}]")
      near = _touching(c, given)
      if near:
        body.append("    - evidence on its entities: "
                     + "; ".join(f"({s}, {p}, {o})" for s, p, o in near))
    body.append("")
  head = [f"# Reading sheet: {row['name']} ({row['mode']}, seed {row['seed']}, {row['split']})",
          "",
          "Mark each claim: does the evidence listed support it (S), and is it true (T)? "
          "Compare with the verifier's verdicts in brackets.",
          "",
          f"Rebuilt evidence: the verdicts of {num - differ} of {num} answers equal the row's "
          "record (claims and unsupported claims).", ""]
  return "\n".join(head + body), differ


def main(argv):
  del argv
  row = json.loads(pathlib.Path(_ROW.value).read_text())
  if row.get("overrides", {}).get("control"):
    raise app.UsageError(f"--row={_ROW.value}: an evidence-control row; its evidence is not the "
                         "question's own retrieval")
  root = pathlib.Path(_ROOT.value)
  kb = scenekb.load(row["split"], root=root)
  questions = {q.qid: q for q in kb.questions}
  missing = [r["qid"] for r in row["records"] if r["qid"] not in questions]
  if missing:
    raise app.UsageError(f"--row={_ROW.value}: {len(missing)} questions are not in {root} "
                         f"({row['split']}), e.g. {missing[0]}: another benchmark's row")
  records = row["records"][:_NUM.value]
  evidence = {}
  if row["mode"] in NO_EVIDENCE_MODES:
    evidence = {r["qid"]: [] for r in records}
  else:
    system = rows_lib.base_system(smollm2.get_config(), None, root)
    for r in records:
      q = questions[r["qid"]]
      i = q.extra["instance_id"]
      graph = system.instance_graph(kb.scene_graph(i), instance_id=i)
      prepared = system.prepare([q.question], [graph])[0]
      evidence[r["qid"]] = [list(t.key()) for t in prepared.subgraph.edges]
  verifier = hallucination.HallucinationVerifier(hallucination.GroundTruth.load(root))
  text, differ = sheet(row, questions, evidence, verifier, len(records), _EVIDENCE.value)
  out = pathlib.Path(_OUT.value)
  out.parent.mkdir(parents=True, exist_ok=True)
  atomic.atomic_write_text(out, text + "\n")
  print(f"wrote {out} ({len(records)} answers; {differ} differ from the row's verdicts)")


if __name__ == "__main__":
  app.run(main)
