"""H-Rate with an independent verifier: a claim of an answer is a hallucination when the
generator's ground truth does not support it. Nothing here is shared with the pipeline's own
verifier (`pipeline.verify`): no model, no evidence, no retrieval; only the truth.jsonl that
`graphloom_jax.data.build_benchmark --version=2` writes beside the benchmark.

Ground truth of an instance (one scene):
  relations  its real scene relations (the extractor's noise relations are not among them);
  facts      the WordNet facts that hold for the sense each real object has in the scene, and
             the 'is a' facts of that sense's hypernyms (wrong-sense facts are not among them);
  kinds      object -> every hypernym of its sense ('is a', transitively).
A ground atom [s, r, o] holds when (s, r, o) is a real relation or a fact, when r is 'is a' or
'kind of' and o is one of the kinds of s, or, for r in EQUIVALENT_PREDICATES, when the equivalent
relation holds ('wears' = 'wearing', 'lying on' = 'laying on'). Names are compared after
`graph.canonical` normalisation (lowercase, article dropped, singular). The truth is WordNet's
facts of one synset: a fact WordNet records only under another sense is unsupported even when it
is true of the object too ('man has part hand' is recorded for the genus Homo, not for man).

Claims of an answer, two ways:
  * structured: [s, r, o] triples the answer asserts about an instance (e.g. parsed from its
    cited evidence), each one claim;
  * text + question: the question's claims from truth.jsonl, with '?x' bound to the entity the
    answer names. A claim is a list of alternatives, each a conjunction of atoms; other '?'
    variables are existential ("the thing the man holds is made of glass": some y with
    (man, holding, y) real and (y, made of, glass) a fact of y's sense). The entity is the
    answer itself when it is a known name, else the longest known name the answer mentions
    that the question does not (else one it does), else the answer text (a name the truth does
    not know, so its claims fail); a WordNet compound noun is taken whole, never a word of it. An abstention ("unknown", "I don't know", an empty answer)
    makes no claim.
An answer is hallucinated when one of its claims is unsupported; per condition:
  H-Rate = hallucinated answers / answers   (answers without claims count, as not hallucinated)
  claim H-Rate = unsupported claims / claims.

The paper's H-Rate (`assess`, `paper_rates`) asks a different question: is a claim supported by
the evidence the system was given, not whether it is true. An answer's claims are the
question's claims bound to the entity it names, the triples it cites (GraphLoom), and the
triples its text asserts as "subject relation object" sentences over names the truth knows (a
text mode copying an evidence line). Each is checked twice, with the same matcher:
  supported  it holds in the given evidence (the mode's retrieved subgraph; 'kind of' is the
             'is a' closure of that subgraph; a mode given no evidence supports nothing);
  true       it holds in the ground truth above.
Over a condition's answers:
  H-Rate     = unsupported claims / claims,
  falsity    = false claims / claims,
  abstention = abstaining answers / answers (an abstention makes no claim).
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import re
from typing import Iterable, Iterator, Mapping, Sequence

from graphloom_jax.data.mmqa import find_file
from graphloom_jax.graph.canonical import Canonicalizer, normalize
from graphloom_jax.graph.lookup import is_a_closure
from graphloom_jax.graph.triples import iter_jsonl

KIND_OF = "kind of"
ANSWER = "?x"
EQUIVALENT_PREDICATES = {"wears": "wearing", "lying on": "laying on"}
ABSTENTIONS = frozenset({"", "unknown", "none", "no answer", "not sure", "cannot tell",
                         "can't tell", "i don't know", "i do not know", "don't know"})
MAX_NAME_WORDS = 4


@dataclasses.dataclass(frozen=True)
class InstanceTruth:
  relations: frozenset  # {(s, p, o)} real scene relations
  facts: frozenset  # {(s, r, o)} WordNet facts that hold for the scene's senses
  kinds: Mapping[str, frozenset]  # object -> its hypernyms

  def holds(self, atom: tuple[str, str, str]) -> bool:
    """Whether a ground atom holds (its names canonical, see `GroundTruth.atom`)."""
    s, r, o = atom
    if (s, r, o) in self.relations or (s, r, o) in self.facts:
      return True
    return r in ("is a", KIND_OF) and o in self.kinds.get(s, ())

  def triples(self) -> Iterator[tuple[str, str, str]]:
    """Every ground atom that holds, for matching atoms with variables."""
    yield from self.relations
    yield from self.facts
    for s, hs in self.kinds.items():
      for h in hs:
        yield (s, KIND_OF, h)


@dataclasses.dataclass(frozen=True)
class QuestionTruth:
  qid: str
  instance_id: str
  question: str
  claims: tuple  # of alternatives, each a tuple of atoms (s, r, o) with '?' variables


class GroundTruth:
  """The generator's ground truth (truth.jsonl), names canonicalised."""

  def __init__(self, records: Iterable[Mapping], canonicalizer: Canonicalizer | None = None):
    self.canon = canonicalizer or Canonicalizer()
    senses, instances, questions = {}, {}, {}
    for i, r in enumerate(records):
      kind = r.get("kind")
      if kind == "sense":
        senses[(r["name"], r["offset"])] = r
      elif kind == "instance":
        instances[r["instance_id"]] = r
      elif kind == "question":
        questions[r["qid"]] = r
      else:
        raise ValueError(f"truth record {i}: kind {kind!r}; expected sense, instance or question")
    senses = {key: ({self.atom(f) for f in r["facts"]},
                    frozenset(self.name(h) for h in r["kind_of"])) for key, r in senses.items()}
    self.instances: dict[str, InstanceTruth] = {}
    names = set()
    for iid, r in instances.items():
      facts, kinds = set(), {}
      for obj, offset in r["senses"].items():
        if (obj, offset) not in senses:
          raise ValueError(f"truth: instance {iid} reads {obj!r} as synset {offset}, which has no "
                           "sense record")
        facts.update(senses[(obj, offset)][0])
        kinds[self.name(obj)] = senses[(obj, offset)][1]
      relations = {self.atom(x[:3]) for x in r["relations"] if x[4]}
      self.instances[iid] = InstanceTruth(frozenset(relations), frozenset(facts), kinds)
      names.update(x for t in relations | facts for x in (t[0], t[2]))
      names.update(kinds)
      names.update(h for hs in kinds.values() for h in hs)
      names.update(self.name(x[2]) for x in r["relations"])
      names.update(self.name(x[0]) for x in r["relations"])
    self.names = frozenset(names)
    self.questions = {
        qid: QuestionTruth(qid, r["instance_id"], r["question"], tuple(
            tuple(tuple(self.atom(a) for a in alt) for alt in c) for c in r["claims"]))
        for qid, r in questions.items()}

  @classmethod
  def load(cls, root) -> "GroundTruth":
    """truth.jsonl(.gz) in benchmark folder `root`; a line that is not JSON raises ValueError
    naming the file and line."""
    path = find_file(root, "truth")
    if path is None:
      raise FileNotFoundError(f"GroundTruth.load: {pathlib.Path(root) / 'truth.jsonl'} does not "
                              "exist (written by `python -m graphloom_jax.data.build_benchmark "
                              "--version=2` or later)")
    records = [r for _, r in iter_jsonl(path, what="truth record")]
    return cls(records)

  def name(self, text: str) -> str:
    """The canonical name of an entity ('?' variables unchanged)."""
    return text if text.startswith("?") else self.canon(text)

  def is_noun(self, name: str) -> bool:
    """Whether a name is a WordNet noun (known to the canonicaliser's lemma list)."""
    morphy = self.canon.morphy
    return morphy is not None and name.replace(" ", "_") in morphy.lemmas

  def atom(self, atom: Sequence[str]) -> tuple[str, str, str]:
    """[s, r, o] with canonical names and relation (EQUIVALENT_PREDICATES merged)."""
    s, r, o = atom
    r = normalize(r)
    return (self.name(s), EQUIVALENT_PREDICATES.get(r, r), self.name(o))

  def instance(self, instance_id: str) -> InstanceTruth:
    if instance_id not in self.instances:
      raise KeyError(f"ground truth: no instance {instance_id!r} in truth.jsonl")
    return self.instances[instance_id]

  def question(self, qid: str) -> QuestionTruth:
    if qid not in self.questions:
      raise KeyError(f"ground truth: no question {qid!r} in truth.jsonl")
    return self.questions[qid]


@dataclasses.dataclass
class Claim:
  alternatives: tuple  # ground or partly variable atoms; the claim holds if one alternative does
  supported: bool


@dataclasses.dataclass
class Verdict:
  entity: str | None  # the entity the answer names (None: structured claims or an abstention)
  claims: list[Claim]

  @property
  def hallucinated(self) -> bool:
    return any(not c.supported for c in self.claims)


def _is_var(x: str) -> bool:
  return x.startswith("?")


def _solve(truth: InstanceTruth, atoms: Sequence[tuple], binding: dict) -> bool:
  """Whether some values of the atoms' variables (extending `binding`) make every atom hold."""
  if not atoms:
    return True
  atom = tuple(binding.get(x, x) for x in atoms[0])
  if not any(_is_var(x) for x in atom):
    return truth.holds(atom) and _solve(truth, atoms[1:], binding)
  s, r, o = atom
  for t in truth.triples():
    if t[1] != r and not (r == "is a" and t[1] == KIND_OF):
      continue
    new = dict(binding)
    if all(new.setdefault(x, v) == v if _is_var(x) else x == v
           for x, v in ((s, t[0]), (o, t[2]))):
      if _solve(truth, atoms[1:], new):
        return True
  return False


def supported(truth: InstanceTruth, alternatives: Sequence[Sequence[tuple]]) -> bool:
  return any(_solve(truth, list(alt), {}) for alt in alternatives)


class HallucinationVerifier:
  """Checks answers against the ground truth (see the module docstring)."""

  def __init__(self, truth: GroundTruth):
    self.truth = truth

  def _mentions(self, text: str) -> list[tuple[int, int, str]]:
    """(-words, position, name) for every known name among the n-grams of `text`."""
    words = normalize(text).split()
    out = []
    for n in range(min(MAX_NAME_WORDS, len(words)), 0, -1):
      for i in range(len(words) - n + 1):
        name = self.truth.name(" ".join(words[i:i + n]))
        if name in self.truth.names:
          out.append((-n, i, name))
    return sorted(out)

  def entity(self, answer: str, question: str) -> str | None:
    """The entity an answer names (None for an abstention)."""
    text = normalize(answer)
    if text in ABSTENTIONS or re.match(r"(i )?(do not|don't|cannot|can't) (know|tell)", text):
      return None
    whole = self.truth.name(answer)
    if whole in self.truth.names or (" " in whole and self.truth.is_noun(whole)):
      return whole  # a compound noun names itself, not its last word ("heavier-than-air craft")
    mentioned = self._mentions(answer)
    asked = {name for _, _, name in self._mentions(question)}
    new = [m for m in mentioned if m[2] not in asked]
    if new or mentioned:
      return (new or mentioned)[0][2]
    return whole

  def check_answer(self, qid: str, answer: str) -> Verdict:
    """The claims an answer text makes about its question (truth.jsonl) and their support."""
    q = self.truth.question(qid)
    entity = self.entity(answer, q.question)
    if entity is None:
      return Verdict(None, [])
    inst = self.truth.instance(q.instance_id)
    claims = []
    for alternatives in q.claims:
      bound = tuple(tuple(tuple(entity if x == ANSWER else x for x in atom) for atom in alt)
                    for alt in alternatives)
      claims.append(Claim(bound, supported(inst, bound)))
    return Verdict(entity, claims)

  def check_claims(self, instance_id: str, triples: Iterable[Sequence[str]]) -> Verdict:
    """Structured claims: every [s, r, o] triple is one claim about the instance."""
    inst = self.truth.instance(instance_id)
    claims = []
    for t in triples:
      atom = self.truth.atom(t)
      claims.append(Claim(((atom,),), supported(inst, ((atom,),))))
    return Verdict(None, claims)

  def check(self, record: Mapping) -> Verdict:
    """One answer record: {"qid", "answer"} or {"instance_id", "claims": [[s, r, o], ...]}
    (a record with both a qid and claims checks the claims on the question's instance)."""
    if "claims" in record:
      inst = record.get("instance_id") or self.truth.question(record["qid"]).instance_id
      return self.check_claims(inst, record["claims"])
    if "qid" in record and "answer" in record:
      return self.check_answer(record["qid"], record["answer"])
    raise ValueError(f"answer record {dict(record)!r}: expected 'qid' and 'answer', or 'claims' "
                     "with 'instance_id' or 'qid'")


def h_rate(verifier: HallucinationVerifier, records: Iterable[Mapping]) -> dict[str, dict]:
  """H-Rate per condition over answer records (each with a "condition" besides what
  `HallucinationVerifier.check` reads)."""
  tally = collections.defaultdict(collections.Counter)
  for record in records:
    if "condition" not in record:
      raise ValueError(f"answer record {dict(record)!r}: no 'condition'")
    v = verifier.check(record)
    c = tally[record["condition"]]
    c["answers"] += 1
    c["with_claims"] += bool(v.claims)
    c["hallucinated"] += v.hallucinated
    c["claims"] += len(v.claims)
    c["unsupported_claims"] += sum(not x.supported for x in v.claims)
  return {cond: {**dict(c), "h_rate": c["hallucinated"] / c["answers"],
                 "claim_h_rate": c["unsupported_claims"] / c["claims"] if c["claims"] else 0.0}
          for cond, c in sorted(tally.items())}


def evidence_truth(truth: GroundTruth, triples: Iterable[Sequence[str]]) -> InstanceTruth:
  """Given evidence ([s, r, o] triples, e.g. a retrieved subgraph) as an InstanceTruth: its
  atoms hold, and 'kind of' is the transitive closure of its 'is a' atoms."""
  atoms = frozenset(truth.atom(t) for t in triples)
  kinds = is_a_closure((s, o) for s, r, o in atoms if r == "is a")
  return InstanceTruth(atoms, frozenset(), kinds)


@dataclasses.dataclass
class PaperClaim:
  alternatives: tuple
  origin: str  # "answer" (the bound question claim), "cited" or "asserted"
  supported: bool  # holds in the given evidence
  true: bool  # holds in the ground truth


@dataclasses.dataclass
class Assessment:
  abstained: bool
  claims: list[PaperClaim]


def _sentences(text: str) -> list[str]:
  return [normalize(x) for x in re.split(r"[.;\n]+", text) if normalize(x)]


def asserted_triples(truth: GroundTruth, text: str, relations: Iterable[str]
                     ) -> list[tuple[str, str, str]]:
  """The "subject relation object" sentences of `text` whose subject is a name the truth knows,
  whose relation is one of `relations` (longest relation first) and whose object has at most
  MAX_NAME_WORDS words (a name the truth does not know makes a false claim)."""
  rels = sorted({normalize(r) for r in relations}, key=lambda r: (-len(r), r))
  out = []
  for sentence in _sentences(text):
    for r in rels:
      m = re.fullmatch(rf"(.+?) {re.escape(r)} (.+)", sentence)
      if m:
        s, o = truth.name(m.group(1)), truth.name(m.group(2))
        if s in truth.names and 0 < len(o.split()) <= MAX_NAME_WORDS:
          out.append(truth.atom((s, r, o)))
        break
  return out


def assess(verifier: HallucinationVerifier, qid: str, answer: str,
           evidence: Iterable[Sequence[str]], cited: Iterable[Sequence[str]] = ()
           ) -> Assessment:
  """The paper's claims of one answer, each checked against the given evidence and the truth
  (module docstring)."""
  truth = verifier.truth
  q = truth.question(qid)
  inst = truth.instance(q.instance_id)
  evidence = list(evidence)
  given = evidence_truth(truth, evidence)
  verdict = verifier.check_answer(qid, answer)
  if verdict.entity is None:
    return Assessment(True, [])
  claims = [PaperClaim(c.alternatives, "answer", supported(given, c.alternatives),
                       c.supported) for c in verdict.claims]
  relations = {t[1] for t in given.relations | inst.relations | inst.facts} | {"is a"}
  seen = set()
  for origin, atoms in (("cited", [truth.atom(t) for t in cited]),
                        ("asserted", asserted_triples(truth, answer, relations))):
    for atom in atoms:
      if atom in seen:
        continue
      seen.add(atom)
      alt = ((atom,),)
      claims.append(PaperClaim(alt, origin, supported(given, alt), supported(inst, alt)))
  return Assessment(False, claims)


def paper_rates(assessments: Sequence[Assessment]) -> dict:
  """H-Rate, falsity and abstention (in %) over a condition's answers, and the counts."""
  claims = [c for a in assessments for c in a.claims]
  n = len(claims)
  return {"answers": len(assessments), "claims": n,
          "h_rate": 100.0 * sum(not c.supported for c in claims) / n if n else 0.0,
          "falsity": 100.0 * sum(not c.true for c in claims) / n if n else 0.0,
          "abstention": 100.0 * sum(a.abstained for a in assessments) / len(assessments)
          if assessments else 0.0}
