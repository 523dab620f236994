"""SceneKB v3: the parts of the generator that differ from v2 (`build_benchmark --version=3`).

v2 could be solved without reading its scenes: a "which is a kind of H" question had one option
that WordNet calls an H, the gold of a KB question was often the only option in the instance
graph, questions restated their gold triple word for word ("What is the lady eating?"), some
named one of their own options, noise relations were random swaps whose confidence was drawn
apart from their content, and WordNet facts scored 1 / sense rank, so tau_KB switched whole
senses on or off. v3 changes each:

  noise      plausible extractor errors, 6-10 a scene: 70% relabel the object or subject of a
             real relation with a class of the same category, three times as often one that
             shares a hypernym (the man holding a cup is also reported holding a bowl); 15% are
             drawn from the co-occurrence of real (subject category, predicate, object
             category) triples over all scenes; 15% stay random swaps. Confidence depends on
             plausibility pi (the triple's category count over the most frequent one for its
             subject category and predicate): Beta(2 + 2.5 pi, 4.5 - 2 pi), so plausible noise
             overlaps the real relations' Beta(3.5, 2) around tau_edge and implausible noise
             stays low;
  KB scores  graded by WordNet's sense frequency (`graph.kb.WordNet`, score="frequency": tag
             count + 1 over the most frequent sense's + 1), senses in WordNet's real order, so
             a secondary sense the scene uses (a drinking glass, 0.57) can fall below tau_KB
             while a wrong dominant sense passes it;
  options    distractors that fail the question where a lookup would look: kinds of H that are
             in the scene but not in the question's relation (compare, intersect), objects of
             the question's relation for other entities of the scene and of wrong senses (kb,
             compose), the objects of confusable noise relations (scene, compose), else objects
             of the gold's category; no option is named in its question;
  wording    several paraphrase templates per family and predicate, none using the gold
             triple's predicate or KB relation words ("the thing the lady is snacking on"),
             relative clauses written so that a symmetric predicate (near) never reads both
             ways;
  selection  with probability PREFER (0.9) a question is drawn among the candidates of its
             scene that the noise makes confusable (a noise relation mimics its scene relation;
             for "kind of H" questions, the scene holds other kinds of H), else among all.

Every question also carries its structured query (`query`: the claims of truth.jsonl), which
the symbolic reader `graph.lookup` answers over the instance graph; `shortcut_statistics`
scores that reader and the shortcut heuristics for statistics.json.
"""

from __future__ import annotations

import collections
import random
import re

from graphloom_jax.graph import instance_graph, lookup
from graphloom_jax.graph.canonical import normalize
from graphloom_jax.graph.kb import TripleKB, WordNet, read_sense_counts, SENSE_COUNTS
from graphloom_jax.graph.scene_graph import scene_graph_triples
from graphloom_jax.models.slots import mentioned

# Relative clauses for "the thing {clause}": FORWARD[p] names o of (s, p, o) from s, BACKWARD[p]
# names s from o. None uses the predicate's own words.
FORWARD = {
    "wearing": ("the {s} is clad in", "the {s} is dressed in"),
    "holding": ("the {s} keeps in hand", "the {s} is gripping"),
    "carrying": ("the {s} is bringing along", "the {s} is lugging around"),
    "using": ("the {s} is making use of", "the {s} is operating"),
    "riding": ("the {s} is travelling on", "the {s} sits astride"),
    "has": ("visible on the {s}'s body", "the {s} shows"),
    "eating": ("the {s} is snacking on", "the {s} is having for a meal"),
    "on": ("beneath the {s}", "supporting the {s}"),
    "laying on": ("the {s} is stretched out upon", "the {s} rests upon"),
    "sitting on": ("the {s} is seated upon", "the {s} perches upon"),
    "walking on": ("the {s} is strolling along", "the {s} treads upon"),
    "standing on": ("the {s} stands upright upon", "under the {s}'s feet"),
    "near": ("the {s} is close to", "the {s} is beside"),
    "behind": ("the {s} is at the rear of", "the {s} is concealed by"),
    "in front of": ("the {s} is placed ahead of", "the {s} stands before"),
    "mounted on": ("the {s} is attached to", "the {s} is fixed to"),
    "hanging from": ("the {s} is suspended from", "the {s} dangles from"),
    "looking at": ("the {s} is gazing toward", "the {s} is eyeing"),
    "watching": ("the {s} keeps an eye on", "the {s} is observing"),
}
FORWARD["wears"] = FORWARD["wearing"]
BACKWARD = {
    "wearing": ("dressed in the {o}", "clad in the {o}"),
    "holding": ("gripping the {o}", "keeping the {o} in hand"),
    "carrying": ("bringing the {o} along", "lugging the {o} around"),
    "using": ("making use of the {o}", "operating the {o}"),
    "riding": ("travelling on the {o}", "sitting astride the {o}"),
    "eating": ("snacking on the {o}", "having the {o} for a meal"),
    "on": ("resting upon the {o}", "placed atop the {o}"),
    "laying on": ("stretched out upon the {o}", "lying down upon the {o}"),
    "sitting on": ("seated upon the {o}", "perched upon the {o}"),
    "walking on": ("strolling along the {o}", "treading upon the {o}"),
    "standing on": ("standing upright upon the {o}", "planted upon the {o}"),
    "behind": ("at the rear of the {o}", "concealed by the {o}"),
    "in front of": ("placed ahead of the {o}", "standing before the {o}"),
    "mounted on": ("attached to the {o}", "fixed to the {o}"),
    "hanging from": ("suspended from the {o}", "dangling from the {o}"),
    "looking at": ("gazing toward the {o}", "eyeing the {o}"),
    "watching": ("keeping an eye on the {o}", "observing the {o}"),
}
# "near" reads both ways in English: no question names a thing as "near" from its object side,
# and a forward "near" reference must be unique over both directions.
SYMMETRIC = frozenset({"near"})
SCENE_TEMPLATES = ("What is the thing {ref}?", "Name the thing {ref}.",
                   "Which object is the one {ref}?")
KB_TEMPLATES = {
    "is a": ("{X} falls under which broader class?", "What category does {x} belong to?",
             "What sort of thing is {x}?"),
    "part of": ("{X} forms a portion of what?", "What larger whole includes {x}?",
                "Of what whole is {x} a piece?"),
    "made of": ("What material is {x} composed of?", "What substance makes up {x}?",
                "From what stuff is {x} formed?"),
    "member of": ("{X} belongs to which group?", "What group counts {x} among its members?",
                  "Which collection includes {x}?"),
}
COMPARE_TEMPLATES = ("Which is a kind of {h}: {a} or {b}?",
                     "{A} or {b}: which one is a type of {h}?",
                     "Between {a} and {b}, which counts as a sort of {h}?")
INTERSECT_TEMPLATES = ("Of the things {clause}, which is a kind of {h}?",
                       "Which of the things {clause} is a type of {h}?",
                       "Among the things {clause}, which counts as a sort of {h}?")
# Noise: share of confusions (a wrong object for a real (subject, predicate)), of relations
# drawn from the class co-occurrence, and of random swaps; how many a scene gets.
NOISE_MIX = (0.7, 0.15, 0.15)
NOISE_COUNTS = (6, 7, 8, 9, 10)
# A "kind of H" question is asked only when at least this many other objects are kinds of H,
# so that its distractors can be kinds of H too.
MIN_KINDS = 3
PREFER = 0.9
REAL_CONFIDENCE = ("beta", 3.5, 2.0)


def capital(text: str) -> str:
  return text[0].upper() + text[1:]


def categories(pools: dict[str, tuple]) -> dict[str, str]:
  """object -> its category: the first of `pools` (name -> objects) that holds it."""
  out = {}
  for name, objects in pools.items():
    for o in objects:
      out.setdefault(o, name)
  return out


def noise_confidence(rng: random.Random, plausibility: float) -> float:
  return round(rng.betavariate(2.0 + 2.5 * plausibility, 4.5 - 2.0 * plausibility), 3)


class Cooccurrence:
  """Counts of real (subject category, predicate, object category) over all scenes."""

  def __init__(self, scenes, category: dict[str, str]):
    self.category = category
    self.counts = collections.Counter()
    for scene in scenes:
      for s, p, o in scene.true_relations:
        self.counts[(self.cat(s), p, self.cat(o))] += 1
    self.by_subject = collections.defaultdict(list)
    self.best = collections.Counter()
    for (cs, p, co), n in sorted(self.counts.items()):
      self.by_subject[cs].append((p, co, n))
      self.best[(cs, p)] = max(self.best[(cs, p)], n)
    self.members = collections.defaultdict(list)
    for o, c in sorted(category.items()):
      self.members[c].append(o)

  def cat(self, x: str) -> str:
    return self.category.get(x, "other")

  def plausibility(self, s: str, p: str, o: str) -> float:
    best = self.best.get((self.cat(s), p), 0)
    return self.counts.get((self.cat(s), p, self.cat(o)), 0) / best if best else 0.0


def add_noise(scene, rng: random.Random, co: Cooccurrence, vocab_objects, vocab_predicates,
              kinds) -> None:
  """Adds v3's noise relations to `scene` (module docstring); deterministic given `rng`.
  `kinds(name)` is the set of an object's hypernyms within two hops in the scene."""
  real = scene.true_relations
  subjects = sorted({s for s, _, _ in real})
  have = {r[:3] for r in scene.relations}
  for _ in range(rng.choice(NOISE_COUNTS)):
    kind = rng.choices(("confusion", "cooccurrence", "swap"), weights=NOISE_MIX)[0]
    if kind == "confusion":
      # A detection labelled with a similar class: same category, and three times as likely
      # when the two share a hypernym (a cup seen as a bowl, both containers).
      s, p, o = rng.choice(real)
      side = rng.randrange(2)  # relabel the object or the subject
      wrong = (s, o)[1 - side]
      pool = [m for m in co.members.get(co.cat(wrong), ()) if m not in (s, o)]
      if not pool:
        continue
      near = kinds(wrong)
      label = rng.choices(pool, weights=[3.0 if kinds(m) & near else 1.0 for m in pool])[0]
      s, o = (s, label) if side == 0 else (label, o)
    elif kind == "cooccurrence":
      s = rng.choice(subjects)
      options = co.by_subject[co.cat(s)]
      if not options:
        continue
      p, cat, _ = rng.choices(options, weights=[n for *_, n in options])[0]
      o = _pick_object(rng, scene, co.members.get(cat, vocab_objects), {s})
    else:
      s, p, o = rng.choice(real)
      if rng.random() < 0.5:
        o = rng.choice([x for x in vocab_objects if x not in scene.objects])
      else:
        p = rng.choice([x for x in vocab_predicates if x != p])
    if o is None or s == o or (s, p, o) in have:
      continue
    have.add((s, p, o))
    for x in (s, o):
      scene._add_object(x)
      scene.boxes.setdefault(x, [rng.randrange(0, 560), rng.randrange(0, 400),
                                 rng.randrange(24, 200), rng.randrange(24, 200)])
    scene.relations.append((s, p, o, noise_confidence(rng, co.plausibility(s, p, o)), True))


def _pick_object(rng, scene, members, exclude) -> str | None:
  """An object of the category: one already in the scene with probability 0.6 when there is
  one, else any."""
  pool = [m for m in members if m not in exclude]
  if not pool:
    return None
  inside = [m for m in pool if m in scene.objects]
  if inside and rng.random() < 0.6:
    return rng.choice(inside)
  return rng.choice(pool)


def frequency_wordnet(wn: WordNet, folder) -> WordNet:
  """The excerpt with WordNet's real sense order and frequency scores (sense_counts.tsv)."""
  counts = read_sense_counts(folder / SENSE_COUNTS)
  index = dict(wn.index)
  for lemma, by_offset in list(counts.items()):
    # A class named apart from its lemma (pant: trouser) keeps the excerpt's sense and scores
    # as monosemous: the counts of the word "pant" are not about trousers.
    if set(wn.index.get(("n", lemma), ())) <= set(by_offset):
      index[("n", lemma)] = tuple(by_offset)
    else:
      del counts[lemma]
  return WordNet(wn.synsets, index, wn.report, score="frequency", counts=counts)


def _words(text: str) -> str:
  return " " + re.sub(r"[^a-z' ]+", " ", text.lower()) + " "


def named_in(question: str, names) -> list[str]:
  """The names the question mentions as whole words."""
  q = _words(question)
  return sorted(n for n in names if f" {normalize(n)} " in q)


class Phrasing:
  """v3's question wording: relative clauses and templates, picked with the question's rng."""

  def __init__(self, rng: random.Random):
    self.rng = rng

  def forward(self, s: str, p: str) -> str:
    return self.rng.choice(FORWARD[p]).format(s=s)

  def backward(self, p: str, o: str) -> str:
    return self.rng.choice(BACKWARD[p]).format(o=o)

  def ref(self, s: str, p: str) -> str:
    return f"the thing {self.forward(s, p)}"

  def kb(self, relation: str, x: str) -> str:
    t = self.rng.choice(KB_TEMPLATES[relation])
    return t.format(x=x, X=capital(x))


def shortcut_statistics(questions: dict, scenes, kb_triples, config) -> dict:
  """The shortcut scores of a v3 build (multiple-choice accuracy, 0-100, per family and over
  all questions of each split): the symbolic reader over each scene's instance graph
  (`graph.lookup`: "lookup" and "confidence"), the best options-only rule per family, the
  only-option-in-graph heuristic, and the precision of the question-mention feature for gold
  triples. `config` holds tau_edge, tau_kb, kb_hops, kb_max_per_entity (graphloom_jax/defaults.py)."""
  source = TripleKB(kb_triples, "kb:wordnet", subject_only=True)
  by_id = {s.id: s for s in scenes}
  graphs = {}

  def graph_of(instance_id):
    if instance_id not in graphs:
      extracted = scene_graph_triples(by_id[instance_id].scene_graph(), instance_id)
      g, canon = instance_graph.build(
          extracted, tau_edge=config["tau_edge"], tau_kb=config["tau_kb"],
          kb_hops=config["kb_hops"], kb_max_per_entity=config["kb_max_per_entity"],
          kb_sources=[source], instance_id=instance_id)
      triples = instance_graph.graph_triples(g)
      graphs[instance_id] = (triples, lookup.TripleIndex(triples, name=canon), canon)
    return graphs[instance_id]

  kinds, fillers = _kb_kinds(kb_triples), _fillers(kb_triples, scenes)
  prior = collections.Counter()
  for q in questions["train"]:
    prior[(q["metadata"]["family"], q["options"][q["answer_index"]])] += 1

  rows = collections.defaultdict(lambda: collections.defaultdict(list))
  flagged = collections.Counter()
  for split, qs in questions.items():
    for q in qs:
      fam, gold, options = q["metadata"]["family"], q["answer_index"], q["options"]
      triples, index, canon = graph_of(q["instance_id"])
      choice = lookup.choose(q["query"], options, index)
      r = rows[(split, fam)]
      r["lookup"].append(choice.expected_correct(gold, "lookup"))
      r["confidence"].append(choice.expected_correct(gold, "confidence"))
      present = [i for i, o in enumerate(options) if canon(o) in index.entities]
      r["only_option_in_graph"].append(_uniform(present, gold, len(options)))
      h = _kind_target(q["query"])
      r["options_kind"].append(_uniform(
          [i for i, o in enumerate(options) if h is not None and h in kinds.get(o, ())],
          gold, len(options)))
      rels = _answer_relations(q["query"])
      r["options_type"].append(_uniform(
          [i for i, o in enumerate(options) if any(o in fillers[x] for x in rels)],
          gold, len(options)))
      own = lambda i: int(split == "train" and i == gold)  # leave the question itself out
      scores = [prior[(fam, o)] - own(i) for i, o in enumerate(options)]
      r["options_prior"].append(_uniform(
          [i for i, s in enumerate(scores) if s == max(scores)], gold, len(options)))
      gold_keys = {tuple(canon(x) if k != 1 else normalize(x) for k, x in enumerate(g))
                   for g in q["gold_triples"]}
      for t in triples:
        if mentioned(t.subject, q["question"]) or mentioned(t.relation, q["question"]):
          flagged[(split, "flagged")] += 1
          flagged[(split, "gold")] += t.key() in gold_keys
  return _shortcut_summary(questions, rows, flagged)


def _fillers(kb_triples, scenes) -> dict:
  """(relation key, "subject" | "object") -> the names the KB and the scenes' true relations
  put there."""
  fillers = collections.defaultdict(set)
  for t in kb_triples:
    fillers[(lookup.relation_key(t.relation), "object")].add(t.object)
    fillers[(lookup.relation_key(t.relation), "subject")].add(t.subject)
  for scene in scenes:
    for s, p, o in scene.true_relations:
      fillers[(lookup.relation_key(p), "object")].add(o)
      fillers[(lookup.relation_key(p), "subject")].add(s)
  return fillers


def _shortcut_summary(questions: dict, rows, flagged) -> dict:
  """Per split: each family's scores in points, the options-only rule chosen on train, and
  the overall figures weighted by family size."""
  rules = ("options_kind", "options_type", "options_prior")
  best_rule = {fam: max(rules, key=lambda k: _mean(rows[("train", fam)][k]))
               for fam in sorted({f for _, f in rows})}
  out = {}
  for split in questions:
    fams = sorted(f for s, f in rows if s == split)
    per = {}
    for fam in fams:
      r = rows[(split, fam)]
      per[fam] = {k: round(100 * _mean(v), 1) for k, v in sorted(r.items())}
      per[fam]["options_only"] = per[fam][best_rule[fam]]
      per[fam]["questions"] = len(r["lookup"])
    n = sum(per[f]["questions"] for f in fams)
    overall = {k: round(sum(per[f][k] * per[f]["questions"] for f in fams) / n, 1)
               for k in ("lookup", "confidence", "only_option_in_graph", "options_only")}
    overall["questions"] = n
    overall["question_mention_precision"] = round(
        flagged[(split, "gold")] / max(flagged[(split, "flagged")], 1), 4)
    out[split] = {"overall": overall, "families": per}
  out["options_only_rule"] = best_rule
  return out


def _mean(v) -> float:
  return sum(v) / len(v) if v else 0.0


def _uniform(pool, gold: int, n: int) -> float:
  """Expected accuracy of a uniform pick among `pool` (all n options when it is empty)."""
  pool = list(pool) or list(range(n))
  return float(gold in pool) / len(pool)


def _kb_kinds(kb_triples) -> dict[str, frozenset]:
  """name -> every h it is a kind of in any sense (the 'is a' closure of the KB file, no
  threshold)."""
  return lookup.is_a_closure((t.subject, t.object) for t in kb_triples if t.relation == "is a")


def _kind_target(query) -> str | None:
  for claim in query:
    for alternative in claim:
      for s, r, o in alternative:
        if s == lookup.ANSWER and r == lookup.KIND_OF:
          return o
  return None


def _answer_relations(query) -> set[str]:
  """The relations of the atoms that name ?x in the first claim's alternatives (all of them:
    the question text names each alternative, so an options-only rule may use any)."""
  return {lookup.relation_key(r) for alternative in query[0] for s, r, o in alternative
            if lookup.ANSWER in (s, o) and r != lookup.KIND_OF}


def unnamed_pools(made: dict) -> dict:
  """The question's distractor pools without the names its text mentions (no option is named
  in its question)."""
  q = made["question"]
  keep = lambda pool: ({x: w for x, w in pool.items() if not named_in(q, [x])}
                       if isinstance(pool, dict) else [x for x in pool if not named_in(q, [x])])
  return {**made, "pools": tuple(keep(p) for p in made["pools"])}


def fill_options(rng: random.Random, answer: str, excluded, pools) -> tuple[list[str], int]:
  """Up to 3 distractors taken from `pools` in turn, none in `excluded` or equal to the answer;
  returns the shuffled options and the answer's index. A pool is a collection (taken in random
  order) or a mapping item -> weight (taken in a weighted random order, so a frequent item comes
  first as often as it is frequent: a distractor is as likely as a gold answer to be a common
  word)."""
  distractors = []
  for pool in pools:
    if isinstance(pool, dict):
      key = {x: rng.random() ** (1.0 / pool[x]) for x in sorted(pool)}
      order = sorted(key, key=lambda x: -key[x])
    else:
      order = rng.sample(sorted(pool), len(pool))
    for x in order:
      if x not in excluded and x != answer and x not in distractors and len(distractors) < 3:
        distractors.append(x)
  options = distractors + [answer]
  rng.shuffle(options)
  return options, options.index(answer)


def kb_fact(rng: random.Random, k, x: str, relations) -> tuple[str, list[str]] | None:
  """A random relation of `relations` that `x` has KB facts for under reading `k`, and the
  facts' objects (None when it has none)."""
  rels = [r for r in relations if k.objects_of(x, r)]
  if not rels:
    return None
  r = rng.choice(rels)
  return r, k.objects_of(x, r)


def claim(*alternatives) -> list:
  """A claim of a question's answer: alternatives, each a conjunction of [s, r, o] atoms."""
  return [[list(atom) for atom in alternative] for alternative in alternatives]


class QuestionMaker:
  """v3's five families (module docstring). `knowledge` is build_benchmark's SenseKnowledge
  over the frequency-scored WordNet, `category` object -> category name, `pools` category
  name -> objects."""

  def __init__(self, knowledge, vocab_objects, category: dict[str, str],
               pools: dict[str, tuple], same_predicates: dict[str, str]):
    self.k = knowledge
    self.vocab = vocab_objects
    self.category = category
    self.pools = pools
    self.pkey = lambda p: same_predicates.get(p, p)
    self.all_hypernyms = sorted({h for c in vocab_objects for h in knowledge.objects_of(c, "is a")})
    self.kb_objects = {r: sorted({o for c in vocab_objects for o in knowledge.objects_of(c, r)})
                       for r in KB_TEMPLATES}

  _options = staticmethod(fill_options)

  def observe(self, scenes) -> None:
    """Counts, over every scene, how often each object takes part in a real relation and how
    often each KB object answers a relation for a scene's objects: the weights of the last
    distractor pools (`fill_options`)."""
    self.object_count = collections.Counter()
    self.answer_count = collections.defaultdict(collections.Counter)
    self.cooccurrence = collections.Counter()
    for scene in scenes:
      for s, p, o in scene.true_relations:
        self.cooccurrence[(self.category.get(s), p, self.category.get(o))] += 1
      k = self.k.reading(scene)
      self.object_count.update(scene.real_objects)
      for x in scene.real_objects:
        for r in KB_TEMPLATES:
          self.answer_count[r].update(k.objects_of(x, r))

  def fitting(self, s: str, p: str, o: str, way: str) -> list[str]:
    """Objects whose category takes the answer's place in some real relation of the question's
    kind: (category of s, p, ?) forward, (?, p, category of o) backward."""
    if way == "f":
      cats = {c for (cs, p2, c) in self.cooccurrence if p2 == p and cs == self.category.get(s)}
    else:
      cats = {c for (c, p2, co) in self.cooccurrence if p2 == p and co == self.category.get(o)}
    return sorted({x for c in cats for x in self.pools.get(c, ())})

  def _weighted(self, items, counts) -> dict[str, int]:
    return {x: counts.get(x, 0) + 1 for x in items}

  def same_category(self, x: str) -> list[str]:
    return sorted({o for name, objs in self.pools.items() if x in objs for o in objs})

  def _unique_forward(self, scene):
    """Real (s, p, o) whose (s, p) names o alone (near: over both directions)."""
    rels = scene.true_relations
    keys = collections.Counter()
    for s, p, o in rels:
      keys[(s, self.pkey(p))] += 1
      if p in SYMMETRIC:
        keys[(o, self.pkey(p))] += 1
    return [r for r in rels if keys[(r[0], self.pkey(r[1]))] == 1 and r[1] in FORWARD]

  def _unique_backward(self, scene):
    rels = scene.true_relations
    keys = collections.Counter((self.pkey(p), o) for s, p, o in rels)
    return [r for r in rels if keys[(self.pkey(r[1]), r[2])] == 1 and r[1] in BACKWARD]

  @staticmethod
  def _pick(rng, cands: list, score):
    """One candidate question: with probability PREFER uniformly among those of the highest
    `score` (how many confusable things the scene holds for it), else among all. The question
    is then asked where the scene also holds what could be mistaken for its answer, as often as
    PREFER says, so that following the question's relations is not enough."""
    if rng.random() < PREFER:
      scores = [score(c) for c in cands]
      cands = [c for c, v in zip(cands, scores) if v == max(scores)]
    return rng.choice(cands)

  def _noise_objects(self, scene, s, p):
    """Objects of the scene's noise relations (s, p', x) with p' the same predicate as p."""
    return sorted({x for s2, p2, x, _, noise in scene.relations
                   if noise and s2 == s and self.pkey(p2) == self.pkey(p)})

  def _noise_subjects(self, scene, p, o):
    return sorted({x for x, p2, o2, _, noise in scene.relations
                   if noise and o2 == o and self.pkey(p2) == self.pkey(p)})

  def scene_q(self, rng, scene):
    say = Phrasing(rng)
    cands = ([("f", r) for r in self._unique_forward(scene)]
             + [("b", r) for r in self._unique_backward(scene)])
    if not cands:
      return None
    way, (s, p, o) = self._pick(rng, cands, lambda c: bool(
        self._noise_objects(scene, c[1][0], c[1][1]) if c[0] == "f"
        else self._noise_subjects(scene, c[1][1], c[1][2])))
    if way == "f":
      q = rng.choice(SCENE_TEMPLATES).format(ref=say.forward(s, p))
      answer, named, claims = o, s, [claim([(s, p, lookup.ANSWER)])]
      confusable = self._noise_objects(scene, s, p)
    else:
      q = rng.choice(SCENE_TEMPLATES).format(ref=say.backward(p, o))
      answer, named, claims = s, o, [claim([(lookup.ANSWER, p, o)])]
      confusable = self._noise_subjects(scene, p, o)
    same = self.same_category(answer)
    fits = self.fitting(s, p, o, way)
    return dict(question=q, answers=[answer], gold=[(s, p, o)], intermediate=[],
                not_distractors=[named] + named_in(q, self.vocab),
                pools=(confusable, [x for x in scene.objects if x in same],
                       [x for x in scene.objects if x in fits],
                       self._weighted(same, self.object_count),
                       self._weighted(fits, self.object_count),
                       self._weighted(self.vocab, self.object_count)),
                modality="image", claims=claims)

  def _kb_fact(self, rng, k, x):
    return kb_fact(rng, k, x, KB_TEMPLATES)

  def _others_objects(self, k, scene, x, r):
    """Objects of `r` facts of the scene's other real objects (in the graph, for them)."""
    return sorted({a for y in scene.real_objects if y != x for a in k.objects_of(y, r)})

  def kb_q(self, rng, scene):
    k = self.k.reading(scene)
    cands = [o for o in scene.real_objects if k.facts.get(o)]
    rng.shuffle(cands)
    for x in cands:
      fact = self._kb_fact(rng, k, x)
      if fact:
        r, objs = fact
        q = Phrasing(rng).kb(r, f"the {x}")
        unnamed = [a for a in objs if not named_in(q, [a])]  # "what is the orange part of?"
        if not unnamed:
          continue
        answer = rng.choice(unnamed)
        return dict(question=q, answers=objs, gold=[(x, r, answer)], intermediate=[],
                    answer=answer, not_distractors=k.also_true(x, r) + [x]
                    + named_in(q, self.vocab),
                    pools=k.confusers(x, r) + (
                        self._weighted(self._others_objects(k, scene, x, r),
                                       self.answer_count[r]),
                        self._weighted(self.kb_objects[r], self.answer_count[r]),
                        self.all_hypernyms),
                    modality="text", claims=[claim([(x, r, lookup.ANSWER)])])
    return None

  def compose_q(self, rng, scene):
    k = self.k.reading(scene)
    refs = self._unique_forward(scene)
    rng.shuffle(refs)
    if rng.random() < PREFER:
      refs.sort(key=lambda r: not self._noise_objects(scene, r[0], r[1]))
    say = Phrasing(rng)
    for s, p, o in refs:
      fact = self._kb_fact(rng, k, o)
      if fact:
        r, objs = fact
        q = say.kb(r, say.ref(s, p))
        unnamed = [a for a in objs if not named_in(q, [a])]
        if not unnamed:
          continue
        answer = rng.choice(unnamed)
        confused = sorted({a for y in self._noise_objects(scene, s, p)
                           for a in self.k.reading(scene).objects_of(y, r)})
        return dict(question=q, answers=objs, gold=[(s, p, o), (o, r, answer)],
                    intermediate=[o], answer=answer,
                    not_distractors=k.also_true(o, r) + [s] + named_in(q, self.vocab),
                    pools=(self._weighted(confused, self.answer_count[r]),) + k.confusers(o, r)
                    + (self._weighted(self._others_objects(k, scene, o, r),
                                      self.answer_count[r]),
                       self._weighted(self.kb_objects[r], self.answer_count[r]),
                       self.all_hypernyms),
                    modality="text",
                    claims=[claim([(s, p, "?y"), ("?y", r, lookup.ANSWER)])])
    return None

  def _kinds_of(self, k, h, among) -> list[str]:
    """Objects of `among` that are a kind of h within two 'is a' hops of their scene sense (as
    the gold is: the KB and the instance graph hold two hops)."""
    return sorted(x for x in among if h in k.hypernym_paths(x))

  def _kind_pools(self, k, h, scene, answer, linked, exclude) -> tuple:
    """Distractors that are kinds of h but fail the question's scene relation, most confusable
    first: objects of noise relations that mimic it, then the answer's category in the scene
    and in the vocabulary (weighted by frequency), then any kind of h in the scene or the
    vocabulary."""
    same = self.same_category(answer)
    kinds = lambda among: self._kinds_of(k, h, [x for x in among if x not in exclude])
    return (kinds(linked), kinds([x for x in scene.objects if x in same]),
            self._weighted(kinds(same), self.object_count), kinds(scene.objects),
            self._weighted(kinds(self.vocab), self.object_count))

  def _in_scene_kinds(self, k, h, scene, exclude) -> int:
    """How many objects of the scene other than `exclude` are kinds of h (at most 2)."""
    return min(2, len(self._kinds_of(k, h, [x for x in scene.objects if x not in exclude])))

  def compare_q(self, rng, scene):
    k = self.k.reading(scene)
    refs = self._unique_forward(scene)
    cands = []
    for (s1, p1, o1), (s2, p2, o2) in ((a, b) for a in refs for b in refs
                                       if a[2] != b[2] and a[0] != b[2] and b[0] != a[2]):
      paths = k.hypernym_paths(o1)
      other = k.closure(o2) | {o2}
      cands += [((s1, p1, o1), (s2, p2, o2), h) for h in sorted(paths) if h not in other
                and len(self._kinds_of(k, h, self.vocab)) >= MIN_KINDS + 1]
    if not cands:
      return None
    (s1, p1, o1), (s2, p2, o2), h = self._pick(
        rng, cands, lambda c: self._in_scene_kinds(k, c[2], scene, {c[0][2], c[1][2]}))
    say = Phrasing(rng)
    a, b = say.ref(s1, p1), say.ref(s2, p2)
    if rng.random() < 0.5:
      a, b = b, a
    q = rng.choice(COMPARE_TEMPLATES).format(h=h, a=a, b=b, A=capital(a))
    linked = self._noise_objects(scene, s1, p1) + self._noise_objects(scene, s2, p2)
    return dict(question=q, answers=[o1],
                gold=[(s1, p1, o1), (s2, p2, o2)] + k.hypernym_paths(o1)[h],
                intermediate=[o1, o2],
                not_distractors=[s1, s2] + named_in(q, self.vocab),
                pools=([o2],) + self._kind_pools(k, h, scene, o1, linked, exclude={o1, o2})
                + (scene.objects, self.vocab),
                modality="image",
                # the alternatives sorted, so that the gold's relation is not the first
                claims=[claim(*sorted([[(s1, p1, lookup.ANSWER)], [(s2, p2, lookup.ANSWER)]])),
                        claim([(lookup.ANSWER, lookup.KIND_OF, h)])])

  def intersect_q(self, rng, scene):
    k = self.k.reading(scene)
    groups = collections.defaultdict(list)
    said = {}
    for s, p, o in scene.true_relations:
      if p in FORWARD and p not in SYMMETRIC:
        groups[("->", s, self.pkey(p))].append(o)
        said[(o, ("->", s, self.pkey(p)))] = p
      if p in BACKWARD:
        groups[("<-", self.pkey(p), o)].append(s)
        said[(s, ("<-", self.pkey(p), o))] = p
    cands = []
    for key in sorted((key for key, v in groups.items() if len(v) >= 2), key=str):
      members = sorted(groups[key])
      for ans in members:
        others = set().union(*[k.closure(m) | {m} for m in members if m != ans])
        cands += [(key, ans, h) for h in sorted(k.hypernym_paths(ans)) if h not in others
                  and len(self._kinds_of(k, h, [x for x in self.vocab if x not in members]))
                  >= MIN_KINDS]
    if not cands:
      return None
    key, ans, h = self._pick(
        rng, cands, lambda c: self._in_scene_kinds(k, c[2], scene, set(groups[c[0]])))
    members = sorted(groups[key])
    say = Phrasing(rng)
    p = said[(ans, key)]
    if key[0] == "<-":
      o = key[2]
      clause, gold, atom, named = say.backward(p, o), [(ans, p, o)], (lookup.ANSWER, p, o), o
      linked = self._noise_subjects(scene, p, o)
    else:
      s = key[1]
      clause, gold, atom, named = say.forward(s, p), [(s, p, ans)], (s, p, lookup.ANSWER), s
      linked = self._noise_objects(scene, s, p)
    q = rng.choice(INTERSECT_TEMPLATES).format(clause=clause, h=h)
    return dict(question=q, answers=[ans], gold=gold + k.hypernym_paths(ans)[h],
                intermediate=members,
                not_distractors=[named] + named_in(q, self.vocab),
                pools=self._kind_pools(k, h, scene, ans, linked, exclude=set(members))[:2]
                + ([rng.choice([m for m in members if m != ans])],)
                + self._kind_pools(k, h, scene, ans, linked, exclude=set(members))[2:]
                + ([m for m in members if m != ans], scene.objects, self.vocab),
                modality="image",
                claims=[claim([atom]), claim([(lookup.ANSWER, lookup.KIND_OF, h)])])


SHORTCUT_ROWS = (("lookup", "symbolic reader, uniform among candidates (the ceiling)"),
                 ("confidence", "symbolic reader, ties broken by edge confidence"),
                 ("options_only", "best options-only rule per family (chosen on train)"),
                 ("only_option_in_graph", "options present in the instance graph"))


def shortcut_table(shortcuts: dict) -> str:
  """The README's table of `shortcut_statistics` (MC accuracy per split, all questions)."""
  splits = [s for s in ("train", "validation", "test") if s in shortcuts]
  rows = ["| heuristic | " + " | ".join(splits) + " |", "|---|" + "---|" * len(splits)]
  for key, what in SHORTCUT_ROWS:
    rows.append(f"| {what} | " + " | ".join(f"{shortcuts[s]['overall'][key]:.1f}"
                                           for s in splits) + " |")
  rows.append("| question-mention precision for gold triples | " + " | ".join(
      f"{shortcuts[s]['overall']['question_mention_precision']:.3f}" for s in splits) + " |")
  fams = sorted(shortcuts["test"]["families"]) if "test" in shortcuts else []
  per = ["| family (test) | " + " | ".join(k for k, _ in SHORTCUT_ROWS) + " | questions |",
         "|---|" + "---|" * (len(SHORTCUT_ROWS) + 1)]
  for f in fams:
    v = shortcuts["test"]["families"][f]
    per.append(f"| {f} | " + " | ".join(f"{v[k]:.1f}" for k, _ in SHORTCUT_ROWS)
               + f" | {v['questions']} |")
  return "\n".join(rows) + "\n\n" + "\n".join(per) + "\n"
