r"""Builds SceneKB: synthetic scenes over the VG150 vocabulary with real WordNet 3.0 knowledge
about their objects, and MMQA-style questions over both. Three versions:

  python -m graphloom_jax.data.build_benchmark --version=3      # the embedded copy (v3)
  python -m graphloom_jax.data.build_benchmark --version=3 --out=DIR [--seed=N] [--scenes=M]
  python -m graphloom_jax.data.build_benchmark --version=2 --out=DIR [--seed=N] [--scenes=M]
  python -m graphloom_jax.data.build_benchmark                # v1, the small test copy

--version=3 (defaults: seed 20261202, 2,000 scenes) is v2 with its shortcuts removed and
measured (`graphloom_jax.data.scenekb_v3`): statistics.json then also holds the scores of a
symbolic reader and of the shortcut heuristics ("shortcuts"), and each question its structured
query ("query"). Without --out it rebuilds the embedded SceneKB, graphloom_jax/data/resources/
scenekb_v3/ (the version's defaults, JSON lines gzipped with a fixed header: `--compress`),
which `scenekb.load(split)` reads and the shipped heads are trained on (tests/test_scenekb_v3.py
rebuilds it and compares the contents).

--version=1 (the default) with its default seed (20261129), 400 scenes and --out the v1 folder
graphloom_jax/data/resources/scenekb/ rebuilds that copy byte for byte (tests/test_benchmark_data.py
checks it); its README describes v1. v1 is the tests' small benchmark
(`scenekb.load(split, root=scenekb.V1_FOLDER)`). --version=2 writes SceneKB v2 (defaults: seed
20261130, 2,000 scenes, --out required). Read any with `scenekb.load(split, root=DIR)`.

Deterministic: every random choice comes from `random.Random` seeded by (seed, scene index), the
output is written with sorted keys and fixed separators, so rebuilding gives the same bytes.
Inputs: the VG150 vocabulary and the WordNet excerpt committed under
graphloom_jax/data/resources/vg150/ and graphloom_jax/data/resources/wordnet/.

What v2 changes (scenes, question families and splits are made as in v1, see V1_DESCRIPTION):
  - extraction confidences overlap around tau_edge = 0.5: real relations ~ Beta(4.5, 2), noise
    relations ~ Beta(2, 4.5), so 14.4% of each falls on the wrong side of 0.5 (the regularised
    incomplete beta I_0.5(4.5, 2)); 2-4 noise relations per scene instead of 1-3;
  - graded, ambiguous WordNet facts: every sense that the excerpt holds for a word (every synset
    of data.noun that lists it), in a sense order, scored by `kb.WordNet.triples` (1 / sense
    rank). The excerpt's index gives one sense per word and Debian's wordnet-base (the full
    index) is not installed here, so the order is rebuilt from what the excerpt knows: the
    excerpt's sense of a VG150 class sits at its real WordNet sense number (SENSE_NUMBERS, e.g.
    glass 2: the drinking glass; sense 1 is the material), the word's other senses in the
    excerpt fill the other ranks in offset order (their real rank is unknown: often later). An
    excerpt whose index lists several senses a word (written from the full index) is read in
    WordNet's own order;
  - the sense each object has in its scene (INTENDED: the excerpt's sense, an elephant's trunk is
    a proboscis, a sheep's face an animal's face) decides what holds: questions, answers and gold
    triples use facts of that sense only; the other senses' facts are in the KB as wrong-sense
    facts (glass is a solid, confidence 1.0; a trunk is part of a tree) and their objects are the
    first distractors of kb and compose questions;
  - no question has two right options: 'wears' and 'wearing' count as one predicate where a
    question names a thing by its relation (SAME_PREDICATES), and no farther hypernym of the
    answer is a distractor of "What kind of thing is X?";
  - the scene description is what the extractor reports (relations with confidence >= 0.5,
    noise included), no longer the list of real relations;
  - truth.jsonl: the generator's ground truth for `evaluation.hallucination` (see `_truth`);
    statistics.json: the confidence statistics the README reports.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import hashlib
import json
import pathlib
import random

from graphloom_jax.data import scenekb_v3
from graphloom_jax.graph.kb import WORDNET_RELATIONS, Synset, WordNet
from graphloom_jax.graph.triples import Triple, dumps

NAME = "scenekb"
RESOURCES = pathlib.Path(__file__).resolve().parent / "resources"
DEFAULT_OUT = RESOURCES / NAME  # v1, the tests' small copy
EMBEDDED_OUT = RESOURCES / f"{NAME}_v3"  # the embedded SceneKB (v3 at its defaults, gzipped)
EMBEDDED_VERSION = 3
DEFAULT_VOCAB = RESOURCES / "vg150" / "vocab.json"
WORDNET_DIR = RESOURCES / "wordnet"

NUM_SCENES = 400
SEED = 20261129
FAMILIES = ("scene", "kb", "compose", "compare", "intersect")
MMQA_TYPES = {"scene": "ImageQ", "kb": "TextQ", "compose": "Compose(TextQ,ImageQ)",
              "compare": "Compare(ImageQ,TextQ)", "intersect": "Intersect(ImageQ,TextQ)"}
SPLITS = ("train", "validation", "test")

# How v1 was described; its README embeds this text, so it stays as it was.
V1_DESCRIPTION = r"""  python -m graphloom_jax.data.build_benchmark [--out=graphloom_jax/data/resources/scenekb]

Deterministic: every random choice comes from `random.Random` seeded by (seed, scene index), the
output is written with sorted keys and fixed separators, so rebuilding gives the same bytes.
Inputs: the VG150 vocabulary and the WordNet excerpt committed under
graphloom_jax/data/resources/vg150/ and graphloom_jax/data/resources/wordnet/ (see
launch/build_wordnet_resources.py).

How a scene is made (all lists below are ours, chosen by hand):
  - 1-2 agents (people, animals) with relations drawn from predicate rules keyed by WordNet
    categories of the object (clothing is worn, body parts are had, vehicles are ridden, small
    artifacts are held or carried, food is eaten), one support surface with things on it and
    1-2 background objects placed near / behind / in front of the agents;
  - every true relation gets a confidence drawn from U(0.55, 1.0); 1-3 noise relations (wrong
    objects or predicates, some contradicting a true relation) get U(0.05, 0.45);
  - a VG-style scene graph (objects with boxes, relationships with confidences), a textual scene
    description of the true relations (what a vision-language model would write), and WordNet
    facts (is a, part of, has part, member of, made of, ...) about the objects within 2 hops.
Question families (MMQA type in brackets), each with gold answers, 4 multiple-choice options
and gold supporting triples:
  scene      [ImageQ]                    one true scene relation
  kb         [TextQ]                     one WordNet fact about an object in the scene
  compose    [Compose(TextQ,ImageQ)]     a scene relation, then a WordNet fact about its object
  compare    [Compare(ImageQ,TextQ)]     which of two scene objects is a kind of H (1-2 hops)
  intersect  [Intersect(ImageQ,TextQ)]   the object in a scene relation that is also a kind of H
Splits by scene: 70% train, 15% validation, 15% test.
"""


@dataclasses.dataclass(frozen=True)
class Settings:
  """What differs between SceneKB versions. A confidence law is ("uniform", low, high) or
  ("beta", a, b)."""
  version: int
  seed: int
  scenes: int
  real_confidence: tuple[str, float, float]
  noise_confidence: tuple[str, float, float]
  noise_relations: tuple[int, ...]  # drawn uniformly: how many noise relations a scene gets
  senses: bool  # every sense of a word, graded by rank (v2), or the excerpt's one sense (v1)


VERSIONS = {
    1: Settings(1, SEED, NUM_SCENES, ("uniform", 0.55, 1.0), ("uniform", 0.05, 0.45),
                (1, 2, 3), senses=False),
    2: Settings(2, 20261130, 2000, ("beta", 4.5, 2.0), ("beta", 2.0, 4.5), (2, 3, 4),
                senses=True),
    # v3's noise confidence depends on each relation's plausibility (scenekb_v3.add_noise).
    3: Settings(3, 20261202, 2000, scenekb_v3.REAL_CONFIDENCE, ("plausibility", 0.0, 0.0),
                scenekb_v3.NOISE_COUNTS, senses=True),
}
# The defaults of graphloom_jax/defaults.py, used here only for the statistics and the v2
# description.
TAU_EDGE = 0.5
TAU_KB = 0.7
KB_HOPS = 2
KB_MAX = 32

PEOPLE = ("man", "woman", "boy", "girl", "child", "kid", "lady", "guy", "player", "skier",
          "person")
ANIMALS = ("dog", "cat", "horse", "elephant", "giraffe", "zebra", "cow", "sheep", "bear", "bird")
CLOTHING = ("hat", "cap", "shirt", "jacket", "coat", "jean", "pant", "short", "shoe", "boot",
            "sneaker", "sock", "glove", "tie", "helmet")
HANDHELD = ("bag", "basket", "book", "bottle", "bowl", "box", "cup", "glass", "fork", "kite",
            "laptop", "phone", "racket", "umbrella", "plate", "paper", "flag", "banana",
            "orange", "pizza", "vase", "towel", "pole", "pillow")
RIDEABLE = ("horse", "elephant", "bike", "motorcycle", "skateboard", "surfboard", "boat", "bus",
            "train", "ski")
FOOD = ("banana", "orange", "pizza", "food", "vegetable", "fruit")
PERSON_PARTS = ("arm", "hand", "head", "face", "hair", "leg", "eye", "ear", "nose", "mouth",
                "neck", "finger")
ANIMAL_PARTS = {"bird": ("wing", "head", "eye", "tail"), "dog": ("paw", "tail", "ear", "nose"),
                "cat": ("paw", "tail", "ear", "eye"), "bear": ("paw", "head", "nose"),
                "elephant": ("trunk", "ear", "leg", "tail"), "giraffe": ("neck", "leg", "head"),
                "horse": ("tail", "leg", "head", "mouth"), "zebra": ("tail", "leg", "head"),
                "cow": ("head", "ear", "leg"), "sheep": ("head", "leg", "face")}
GRAZERS = ("elephant", "giraffe", "zebra", "cow", "sheep", "horse")
SURFACES = {"table": "on", "counter": "on", "desk": "on", "shelf": "on", "bed": "laying on",
            "bench": "sitting on", "chair": "sitting on", "street": "on", "sidewalk": "on",
            "beach": "on", "snow": "on", "rock": "on", "stand": "on"}
AGENT_ON = {"bench": "sitting on", "chair": "sitting on", "bed": "laying on",
            "street": "walking on", "sidewalk": "walking on", "beach": "standing on",
            "snow": "standing on", "rock": "standing on", "table": "near", "counter": "near",
            "desk": "near", "shelf": "near", "stand": "near"}
BACKGROUND = ("building", "house", "tower", "fence", "tree", "mountain", "window", "door",
              "sign", "light", "clock", "railing", "hill", "plant", "car", "truck", "train")
BACKGROUND_PREDICATES = ("near", "behind", "in front of")
MOUNTED = {"sign": ("mounted on", "pole"), "clock": ("mounted on", "building"),
           "light": ("hanging from", "pole"), "flag": ("hanging from", "pole")}
VERB_FORMS = {"has": ("has", "have"), "wears": ("wears", "wear"), "says": ("says", "say")}
KB_TEMPLATES = {"is a": "What kind of thing is {x}?", "part of": "What is {x} a part of?",
                "made of": "What is {x} made of?", "member of": "What is {x} a member of?"}
KB_RELATIONS = ("is a", "part of", "has part", "member of", "has member", "made of",
                "substance of")
KB_SYMBOLS = tuple(s for s, r in WORDNET_RELATIONS.items() if r in KB_RELATIONS)
# The real WordNet 3.0 sense number of the excerpt's sense of a VG150 class where it is not 1
# (the classes of launch/build_wordnet_resources.SENSES whose lemma is the class itself).
SENSE_NUMBERS = {"bike": 2, "board": 3, "branch": 2, "glass": 2, "glove": 2, "kite": 3,
                 "light": 2, "plant": 2, "plate": 4, "post": 4, "racket": 4, "sign": 2,
                 "stand": 4, "table": 2, "track": 3, "toilet": 2, "seat": 3, "letter": 2}
# (owner, part) -> WordNet 3.0 offset of the part's sense when an agent has it in a scene, where
# that differs from the excerpt's sense: the generator only gives trunks to elephants.
INTENDED = {("elephant", "trunk"): 2452967,  # proboscis: a long flexible snout as of an elephant
            ("sheep", "face"): 5601198}  # the part of an animal corresponding to the human face
SAME_PREDICATES = {"wears": "wearing"}
# v3: the category of an object (its first pool here) for noise co-occurrence and distractors.
CATEGORIES = {"person": PEOPLE, "animal": ANIMALS, "food": FOOD, "clothing": CLOTHING,
              "body part": tuple(sorted(set(PERSON_PARTS).union(*ANIMAL_PARTS.values()))),
              "rideable": RIDEABLE, "handheld": HANDHELD, "surface": tuple(SURFACES),
              "background": BACKGROUND}
KIND_OF = "kind of"  # the transitive 'is a' of the question claims in truth.jsonl
ANSWER = "?x"  # the variable a question's answer binds in its claims


def doc_id(*parts, namespace: str = NAME) -> str:
  return hashlib.md5("/".join(map(str, (namespace,) + parts)).encode()).hexdigest()


def phrase(p: str) -> str:
  """Verb phrase of a predicate after a singular subject: 'is riding', 'has'."""
  return VERB_FORMS[p][0] if p in VERB_FORMS else f"is {p}"


def article(word: str) -> str:
  return ("an " if word[0] in "aeiou" else "a ") + word


def draw(rng: random.Random, law: tuple[str, float, float]) -> float:
  kind, a, b = law
  if kind == "uniform":
    return round(rng.uniform(a, b), 3)
  if kind == "beta":
    return round(rng.betavariate(a, b), 3)
  raise ValueError(f"confidence law {law!r}: expected ('uniform' | 'beta', a, b)")


class Knowledge:
  """WordNet facts about the VG150 classes, from the committed excerpt (v1: one sense a word)."""

  def __init__(self, wn: WordNet, objects):
    self.wn = wn
    self.facts = {}
    for cls in objects:
      self.facts[cls] = [t for t in wn.neighbors(cls) if t.relation in KB_RELATIONS]

  def reading(self, scene) -> "Knowledge":
    """The knowledge that holds in `scene` (v1: all of it)."""
    del scene
    return self

  def confusers(self, name: str, relation: str) -> tuple:
    """Pools of distractors to try first for a fact about `name` (v1: none)."""
    del name, relation
    return ()

  def also_true(self, name: str, relation: str) -> list[str]:
    """Objects that are not answers of (name, relation, ?) but would be true ones, so never
    distractors (v1: none)."""
    del name, relation
    return []

  def objects_of(self, name: str, relation: str) -> list[str]:
    facts = self.facts.get(name)
    if facts is None:
      facts = self.wn.neighbors(name)
    return sorted({t.object for t in facts if t.relation == relation})

  def hypernym_paths(self, cls: str) -> dict[str, list[tuple[str, str, str]]]:
    """H -> supporting 'is a' triples, for every hypernym within 2 hops of `cls`."""
    out = {}
    for h1 in self.objects_of(cls, "is a"):
      out.setdefault(h1, [(cls, "is a", h1)])
      for h2 in self.objects_of(h1, "is a"):
        out.setdefault(h2, [(cls, "is a", h1), (h1, "is a", h2)])
    return out

  def closure(self, cls: str) -> set[str]:
    seen, todo = set(), [cls]
    while todo:
      x = todo.pop()
      for h in self.objects_of(x, "is a"):
        if h not in seen:
          seen.add(h)
          todo.append(h)
    return seen

  def triples(self, classes) -> list[Triple]:
    """WordNet facts about `classes`, plus the 'is a' facts of their hypernyms (2 hops)."""
    out = {}
    for cls in sorted(classes):
      for t in self.facts[cls]:
        out[t.key()] = t
        if t.relation == "is a":
          for t2 in self.wn.neighbors(t.object):
            if t2.relation == "is a":
              out[t2.key()] = t2
    return [out[k] for k in sorted(out)]


def sense_index(wn: WordNet) -> dict[tuple[str, str], tuple[int, ...]]:
  """Every sense the excerpt holds for each word of its index, in the order the module docstring
  gives (the excerpt's sense at SENSE_NUMBERS[word] or 1, the others by offset). A word whose
  index line already lists several senses (an excerpt written from the full index) keeps
  WordNet's own order."""
  holders = collections.defaultdict(list)
  for (pos, offset), s in sorted(wn.synsets.items()):
    for w in s.words:
      if offset not in holders[(pos, w.lower())]:
        holders[(pos, w.lower())].append(offset)
  index = {}
  for key, offsets in wn.index.items():
    if len(offsets) > 1:
      index[key] = offsets
      continue
    others = [o for o in holders.get(key, []) if o != offsets[0]]
    k = SENSE_NUMBERS.get(key[1], 1)
    index[key] = tuple(others[:k - 1] + [offsets[0]] + others[k - 1:])
  return index


class SenseKnowledge(Knowledge):
  """v2: every sense of a word, graded by rank (the KB file), and what holds for the sense an
  object has in its scene (questions and truth). v3 passes `kb`, WordNet in its real sense
  order scored by sense frequency; the excerpt `wn` still names each class's visual sense."""

  def __init__(self, wn: WordNet, objects, kb: WordNet | None = None):
    super().__init__(kb or WordNet(wn.synsets, sense_index(wn)), objects)
    self.excerpt = {c: wn.senses(c)[0] for c in objects}

  def reading(self, scene) -> "Reading":
    return Reading(self, self.senses_in(scene))

  def senses_in(self, scene) -> dict[str, Synset]:
    """The sense of every real object of `scene` (INTENDED, else the excerpt's)."""
    senses = {o: self.excerpt[o] for o in scene.real_objects}
    for s, p, o in scene.true_relations:
      if p == "has" and (s, o) in INTENDED:
        senses[o] = self.wn.synsets[("n", INTENDED[(s, o)])]
    return senses

  def sense_facts(self, name: str, synset: Synset) -> list[tuple[str, str, str]]:
    """One-hop KB facts of one sense, with `name` as subject (as `WordNet.triples` names them)."""
    return sorted({(name, WORDNET_RELATIONS[sym], other.head.lower())
                   for sym in KB_SYMBOLS for other in self.wn.related(synset, sym)})

  def hypernyms(self, synset: Synset) -> list[Synset]:
    return sorted(self.wn.related(synset, "@"), key=lambda s: s.head.lower())

  def truth(self, name: str, synset: Synset) -> dict:
    """What holds for `name` read as `synset`: its one-hop facts, the 'is a' facts of its
    hypernyms (the two hops of the KB file) and every hypernym (the 'kind of' closure)."""
    facts = set(self.sense_facts(name, synset))
    for h in self.hypernyms(synset):
      facts.update((h.head.lower(), "is a", h2.head.lower()) for h2 in self.hypernyms(h))
    return {"facts": sorted(facts), "kind_of": sorted(self.kinds(synset))}

  def kinds(self, synset: Synset) -> set[str]:
    """The names of every hypernym of `synset`, transitively."""
    seen, todo = set(), [synset]
    while todo:
      for h in self.hypernyms(todo.pop()):
        if h.offset not in seen:
          seen.add(h.offset)
          todo.append(h)
    return {self.wn.synsets[("n", o)].head.lower() for o in seen}

  def objects_of(self, name: str, relation: str) -> list[str]:
    return Reading(self, {}).objects_of(name, relation)


class Reading:
  """SenseKnowledge under one scene's senses: what holds there (the Knowledge interface that
  QuestionMaker uses)."""

  def __init__(self, k: SenseKnowledge, senses: dict[str, Synset]):
    self.k = k
    self.senses = senses
    self.facts = k.facts

  def synset(self, name: str) -> Synset:
    return self.senses.get(name) or self.k.excerpt[name]

  def objects_of(self, name: str, relation: str) -> list[str]:
    return sorted({o for _, r, o in self.k.sense_facts(name, self.synset(name)) if r == relation})

  def confusers(self, name: str, relation: str) -> tuple:
    """The objects of `name`'s wrong-sense facts for `relation` (they are in the KB too)."""
    true = set(self.objects_of(name, relation))
    wrong = sorted({t.object for t in self.k.facts.get(name, ()) if t.relation == relation
                    and t.object not in true})
    return (wrong,) if wrong else ()

  def also_true(self, name: str, relation: str) -> list[str]:
    """For 'is a': every hypernym of the sense (a farther kind is true, if not the answer)."""
    return sorted(self.k.kinds(self.synset(name))) if relation == "is a" else []

  def hypernym_paths(self, cls: str) -> dict[str, list[tuple[str, str, str]]]:
    out = {}
    for h1 in self.k.hypernyms(self.synset(cls)):
      a = h1.head.lower()
      out.setdefault(a, [(cls, "is a", a)])
      for h2 in self.k.hypernyms(h1):
        out.setdefault(h2.head.lower(), [(cls, "is a", a), (a, "is a", h2.head.lower())])
    return out

  def closure(self, cls: str) -> set[str]:
    """Hypernyms of every sense of `cls`: a question asking which object is a kind of H excludes
    objects that are an H in any sense."""
    return set().union(*[self.k.kinds(s) for s in self.k.wn.senses(cls)])


class Scene:
  """One synthetic scene: objects and (subject, predicate, object, confidence, noise) relations."""

  def __init__(self, index: int, rng: random.Random, vocab_objects, vocab_predicates,
               settings: Settings = VERSIONS[1], namespace: str = NAME):
    self.index = index
    self.id = doc_id("image", index, namespace=namespace)
    self.description_id = doc_id("description", index, namespace=namespace)
    self.settings = settings
    self.objects: list[str] = []
    self.relations: list[tuple[str, str, str, float, bool]] = []
    self._build(rng, vocab_objects, vocab_predicates)

  def _add_object(self, name: str) -> bool:
    if name in self.objects:
      return False
    self.objects.append(name)
    return True

  def _relate(self, rng, s, p, o):
    if any((s, p, o) == r[:3] for r in self.relations) or s == o:
      return
    self._add_object(s)
    self._add_object(o)
    self.relations.append((s, p, o, draw(rng, self.settings.real_confidence), False))

  def _build(self, rng, vocab_objects, vocab_predicates):
    agents = [rng.choice(PEOPLE) if rng.random() < 0.75 else rng.choice(ANIMALS)]
    if rng.random() < 0.6:
      second = rng.choice(ANIMALS if rng.random() < 0.5 else PEOPLE)
      if second not in agents:
        agents.append(second)
    used = set(agents)

    def fresh(pool):
      choices = [x for x in pool if x not in used]
      x = rng.choice(choices)
      used.add(x)
      return x

    for a in agents:
      self._add_object(a)
      if a in PEOPLE:
        for _ in range(rng.choice((1, 2, 2, 3))):
          self._relate(rng, a, rng.choice(("wearing", "wearing", "wears")), fresh(CLOTHING))
        for _ in range(rng.choice((0, 1, 2, 2))):
          self._relate(rng, a, rng.choice(("holding", "holding", "carrying", "using")),
                       fresh(HANDHELD))
        if rng.random() < 0.4:
          self._relate(rng, a, "riding", fresh(RIDEABLE))
        if rng.random() < 0.5:
          self._relate(rng, a, "has", fresh(PERSON_PARTS))
        if rng.random() < 0.25:
          self._relate(rng, a, "eating", fresh(FOOD))
      else:
        self._relate(rng, a, "has", fresh(ANIMAL_PARTS[a]))
        if a in GRAZERS and rng.random() < 0.5:
          self._relate(rng, a, "eating", fresh(("leaf", "plant", "vegetable")))
    surface = fresh(SURFACES)
    for _ in range(rng.choice((1, 2, 2, 3))):
      self._relate(rng, fresh(HANDHELD), SURFACES[surface], surface)
    self._relate(rng, agents[0], AGENT_ON[surface], surface)
    for _ in range(rng.choice((1, 2))):
      thing = fresh(BACKGROUND)
      self._relate(rng, rng.choice(agents), rng.choice(BACKGROUND_PREDICATES), thing)
      if thing in MOUNTED and rng.random() < 0.5:
        p, base = MOUNTED[thing]
        if base not in used:
          used.add(base)
          self._relate(rng, thing, p, base)
    if len(agents) == 2 and rng.random() < 0.5:
      self._relate(rng, agents[0], rng.choice(("looking at", "watching", "near")), agents[1])
    # v3 adds its noise after all scenes exist (scenekb_v3.add_noise); boxes come first so that
    # v1 and v2 draw theirs after their noise, as they always did.
    if self.settings.version >= 3:
      self._add_boxes(rng)
      return
    for _ in range(rng.choice(self.settings.noise_relations)):
      s, p, o = rng.choice([r[:3] for r in self.relations])
      if rng.random() < 0.5:
        o = rng.choice([x for x in vocab_objects if x not in self.objects])
      else:
        p = rng.choice([x for x in vocab_predicates if x != p])
      if not any((s, p, o) == r[:3] for r in self.relations):
        self._add_object(o)
        self.relations.append((s, p, o, draw(rng, self.settings.noise_confidence), True))
    self._add_boxes(rng)

  def _add_boxes(self, rng):
    self.boxes = {o: [rng.randrange(0, 560), rng.randrange(0, 400), rng.randrange(24, 200),
                      rng.randrange(24, 200)] for o in self.objects}

  @property
  def true_relations(self):
    return [r[:3] for r in self.relations if not r[4]]

  @property
  def real_objects(self) -> list[str]:
    """Objects of a real relation (the others exist only in the extractor's noise)."""
    real = {x for s, _, o in self.true_relations for x in (s, o)}
    return [o for o in self.objects if o in real]

  def described(self):
    """The relations the scene description states: v1 the real ones, v2 what the extractor
    reports (confidence >= tau_edge, noise included)."""
    if self.settings.version == 1:
      return self.true_relations
    return [r[:3] for r in self.relations if r[3] >= TAU_EDGE]

  def description(self) -> tuple[str, list[tuple[int, int]]]:
    """The scene description and each sentence's character span."""
    text, spans = "", []
    for s, p, o in self.described():
      sentence = f"The {s} {phrase(p)} the {o}."
      start = len(text) + (1 if text else 0)
      text = (text + " " if text else "") + sentence
      spans.append((start, start + len(sentence)))
    return text, spans

  def scene_graph(self) -> dict:
    ids = {o: i for i, o in enumerate(self.objects)}
    return {"image_id": self.id,
            "objects": [{"object_id": ids[o], "names": [o],
                         "x": b[0], "y": b[1], "w": b[2], "h": b[3]}
                        for o, b in self.boxes.items()],
            "relationships": [{"relationship_id": i, "predicate": p, "subject_id": ids[s],
                               "object_id": ids[o], "confidence": c}
                              for i, (s, p, o, c, _) in enumerate(self.relations)]}


def _unique(relations, key, value):
  return [r for r in relations if key(r) == value]


# A claim of a question's answer (truth.jsonl): it holds when one of the alternatives, a
# conjunction of [subject, relation, object] atoms over the instance's ground truth, holds for
# some value of its variables ('?x' is the answer).
claim = scenekb_v3.claim


class QuestionMaker:
  def __init__(self, knowledge: Knowledge, vocab_objects, same_predicates=None):
    self.k = knowledge
    self.vocab = vocab_objects
    # Predicates that say the same thing ('wears', 'wearing'), one key for both: a question that
    # names "the thing the man is wearing" must not have two answers (v2; v1 keeps its questions).
    self.pkey = (same_predicates or {}).get
    self.all_hypernyms = sorted({h for c in vocab_objects for h in knowledge.objects_of(c, "is a")})
    self.kb_objects = {r: sorted({o for c in vocab_objects for o in knowledge.objects_of(c, r)})
                       for r in KB_TEMPLATES}

  _options = staticmethod(scenekb_v3.fill_options)

  def _refs(self, scene):
    """Scene relations that identify their object uniquely: (s, p, o) with (s, p) unique."""
    rels = scene.true_relations
    key = lambda r: (r[0], self.pkey(r[1], r[1]))
    return [r for r in rels if len(_unique(rels, key, key(r))) == 1]

  def scene_q(self, rng, scene):
    rels = scene.true_relations
    forward = self._refs(scene)
    key = lambda r: (self.pkey(r[1], r[1]), r[2])
    backward = [(s, p, o) for s, p, o in rels
                if len(_unique(rels, key, key((s, p, o)))) == 1 and p not in VERB_FORMS]
    cands = [("f", r) for r in forward] + [("b", r) for r in backward]
    if not cands:
      return None
    way, (s, p, o) = rng.choice(cands)
    if way == "f":
      q = (f"What does the {s} {VERB_FORMS[p][1]}?" if p in VERB_FORMS
           else f"What is the {s} {p}?")
      answer, claims = o, [claim([(s, p, ANSWER)])]
    else:
      q, answer, claims = f"What {phrase(p)} the {o}?", s, [claim([(ANSWER, p, o)])]
    return dict(question=q, answers=[answer], gold=[(s, p, o)], intermediate=[],
                pools=(scene.objects, self.vocab), modality="image", claims=claims)

  def _kb_fact(self, rng, k, x):
    return scenekb_v3.kb_fact(rng, k, x, KB_TEMPLATES)

  def kb_q(self, rng, scene):
    k = self.k.reading(scene)
    seen = {x for s, _, o in scene.true_relations for x in (s, o)}
    cands = [o for o in scene.objects if o in seen and k.facts.get(o)]
    rng.shuffle(cands)
    for x in cands:
      fact = self._kb_fact(rng, k, x)
      if fact:
        r, objs = fact
        answer = rng.choice(objs)
        return dict(question=KB_TEMPLATES[r].format(x=f"the {x}"), answers=objs,
                    gold=[(x, r, answer)], intermediate=[], answer=answer,
                    not_distractors=k.also_true(x, r),
                    pools=k.confusers(x, r) + (self.kb_objects[r], self.all_hypernyms),
                    modality="text", claims=[claim([(x, r, ANSWER)])])
    return None

  def compose_q(self, rng, scene):
    k = self.k.reading(scene)
    refs = self._refs(scene)
    rng.shuffle(refs)
    for s, p, o in refs:
      fact = self._kb_fact(rng, k, o)
      if fact:
        r, objs = fact
        answer = rng.choice(objs)
        ref = f"the thing the {s} {phrase(p)}"
        return dict(question=KB_TEMPLATES[r].format(x=ref), answers=objs,
                    gold=[(s, p, o), (o, r, answer)], intermediate=[o], answer=answer,
                    not_distractors=k.also_true(o, r),
                    pools=k.confusers(o, r) + (self.kb_objects[r], self.all_hypernyms),
                    modality="text", claims=[claim([(s, p, "?y"), ("?y", r, ANSWER)])])
    return None

  def compare_q(self, rng, scene):
    k = self.k.reading(scene)
    refs = self._refs(scene)
    pairs = [(a, b) for a in refs for b in refs if a[2] != b[2]]
    rng.shuffle(pairs)
    for (s1, p1, o1), (s2, p2, o2) in pairs:
      paths = k.hypernym_paths(o1)
      other = k.closure(o2) | {o2}
      hs = sorted(h for h in paths if h not in other)
      if not hs:
        continue
      h = rng.choice(hs)
      first, second = ((f"the thing the {s1} {phrase(p1)}", f"the thing the {s2} {phrase(p2)}")
                       if rng.random() < 0.5 else
                       (f"the thing the {s2} {phrase(p2)}", f"the thing the {s1} {phrase(p1)}"))
      return dict(question=f"Which is a kind of {h}: {first} or {second}?", answers=[o1],
                  gold=[(s1, p1, o1), (s2, p2, o2)] + paths[h], intermediate=[o1, o2],
                  pools=([o2], scene.objects, self.vocab), modality="image",
                  claims=[claim([(s1, p1, ANSWER)], [(s2, p2, ANSWER)]),
                          claim([(ANSWER, KIND_OF, h)])])
    return None

  def intersect_q(self, rng, scene):
    k = self.k.reading(scene)
    rels = scene.true_relations
    groups = collections.defaultdict(list)
    said = {}  # (member, group key) -> the member's own predicate
    for s, p, o in rels:
      groups[(s, self.pkey(p, p))].append(o)
      said[(o, (s, self.pkey(p, p)))] = p
    for s, p, o in rels:
      groups[("<-", self.pkey(p, p), o)].append(s)
      said[(s, ("<-", self.pkey(p, p), o))] = p
    keys = sorted((key for key, v in groups.items() if len(v) >= 2), key=str)
    rng.shuffle(keys)
    for key in keys:
      members = sorted(groups[key])
      for ans in rng.sample(members, len(members)):
        paths = k.hypernym_paths(ans)
        others = set().union(*[k.closure(m) | {m} for m in members if m != ans])
        hs = sorted(h for h in paths if h not in others)
        if not hs:
          continue
        h = rng.choice(hs)
        p = said[(ans, key)]
        if key[0] == "<-":
          o = key[2]
          q = f"Which thing that {phrase(p)} the {o} is a kind of {h}?"
          gold, atom = [(ans, p, o)], (ANSWER, p, o)
        else:
          s = key[0]
          q = f"Which thing the {s} {phrase(p)} is a kind of {h}?"
          gold, atom = [(s, p, ans)], (s, p, ANSWER)
        return dict(question=q, answers=[ans], gold=gold + paths[h], intermediate=members,
                    pools=(members, scene.objects, self.vocab), modality="image",
                    claims=[claim([atom]), claim([(ANSWER, KIND_OF, h)])])
    return None


def _settings(version: int, seed: int | None, num_scenes: int | None, out: pathlib.Path):
  """The version's settings with `seed` and `num_scenes` where given, checked."""
  if version not in VERSIONS:
    raise ValueError(f"build_benchmark: version={version!r}; expected one of {sorted(VERSIONS)}")
  settings = dataclasses.replace(VERSIONS[version],
                                 seed=VERSIONS[version].seed if seed is None else seed,
                                 scenes=VERSIONS[version].scenes if num_scenes is None
                                 else num_scenes)
  if settings.scenes < 20:
    raise ValueError(f"build_benchmark: {settings.scenes} scenes; at least 20 are needed for "
                     "three splits (14/3/3 of every 20 scenes)")
  if version != 1 and out.resolve() == DEFAULT_OUT.resolve():
    raise ValueError(f"build_benchmark: {out} is the v1 copy the tests read, which stays SceneKB "
                     f"v1; write v{version} to another folder")
  if out.resolve() == EMBEDDED_OUT.resolve() and (
      version != EMBEDDED_VERSION or settings != VERSIONS[EMBEDDED_VERSION]):
    raise ValueError(f"build_benchmark: {out} is the embedded copy, SceneKB v{EMBEDDED_VERSION} at "
                     f"its default seed and scene count (the shipped heads are trained on it); "
                     "write other versions, seeds or sizes to another folder")
  return settings


def _knowledge_and_maker(version: int, settings, objects):
  """The version's knowledge base view and question maker."""
  wordnet = WordNet.load(WORDNET_DIR, "n")
  if version >= 3:
    knowledge = SenseKnowledge(wordnet, objects,
                               scenekb_v3.frequency_wordnet(wordnet, WORDNET_DIR))
    maker = scenekb_v3.QuestionMaker(knowledge, objects, scenekb_v3.categories(CATEGORIES),
                                     CATEGORIES, SAME_PREDICATES)
  else:
    knowledge = (SenseKnowledge if settings.senses else Knowledge)(wordnet, objects)
    maker = QuestionMaker(knowledge, objects, SAME_PREDICATES if version != 1 else None)
  return knowledge, maker


def _draw_scenes(version: int, settings, namespace: str, objects, predicates, knowledge,
                 maker) -> list:
  """The scenes, with v3's label-confusion noise added and the maker shown them."""
  seed = settings.seed
  scenes = [Scene(i, random.Random(f"{seed}:{i}"), objects, predicates, settings, namespace)
            for i in range(settings.scenes)]
  if version >= 3:
    co = scenekb_v3.Cooccurrence(scenes, scenekb_v3.categories(CATEGORIES))
    for scene in scenes:
      reading = knowledge.reading(scene)
      scenekb_v3.add_noise(scene, random.Random(f"{seed}:{scene.index}:noise"), co, objects,
                           predicates, lambda x: set(reading.hypernym_paths(x)))
    maker.observe(scenes)
  return scenes


def _split_of(scene) -> str:
  """14 / 3 / 3 of every 20 scenes to train / validation / test."""
  k = scene.index % 20
  return SPLITS[0] if k < 14 else SPLITS[1] if k < 17 else SPLITS[2]


def _question_record(version: int, family: str, made: dict, rng, maker, scene, kb_doc: dict,
                     distractor_images: list, namespace: str) -> dict:
  """The MMQA-format record of one made question (its options drawn from `rng`)."""
  answer = made.get("answer", made["answers"][0])
  options, correct = maker._options(rng, answer,
                                    made["answers"] + made.get("not_distractors", []),
                                    made["pools"])
  entities = {x for s, _, o in made["gold"] for x in (s, o)}
  text_ids = [scene.description_id] + [kb_doc[c] for c in sorted(entities) if c in kb_doc]
  support = [{"doc_id": scene.id, "doc_part": "image"}]
  if family != "scene":
    support += [{"doc_id": kb_doc[c], "doc_part": "text"}
                for c in sorted(entities & set(scene.objects)) if c in kb_doc
                and any(g[0] == c and g[1] in KB_RELATIONS for g in made["gold"])]
  modalities = ["image"] if family == "scene" else ["text"] if family == "kb" \
      else ["image", "text"]
  return {
      "qid": doc_id("question", scene.index, family, namespace=namespace),
      "question": made["question"],
      "answers": [_answer(a, made["modality"], scene.id) for a in made["answers"]],
      "metadata": {"type": MMQA_TYPES[family], "family": family, "modalities": modalities,
                   "image_doc_ids": [scene.id] + distractor_images,
                   "text_doc_ids": text_ids, "table_id": None,
                   "intermediate_answers": [[_answer(a, "image", scene.id)]
                                            for a in made["intermediate"]]},
      "supporting_context": support,
      "options": options, "answer_index": correct,
      "gold_triples": [list(g) for g in made["gold"]],
      "instance_id": scene.id, **({"query": made["claims"]} if version >= 3 else {})}


def _scene_docs(scene, split: str) -> tuple[dict, dict]:
  """The scene's image record and its description's text record."""
  text, spans = scene.description()
  image = {"title": f"SceneKB scene {scene.index:04d}", "url": "", "id": scene.id,
           "path": "", "split": split, "scene_graph": scene.scene_graph(),
           "description_id": scene.description_id}
  description = {"title": f"SceneKB scene {scene.index:04d} description", "url": "",
                 "id": scene.description_id, "text": text,
                 "spans": [[s, p, o, a, b] for (s, p, o), (a, b)
                           in zip(scene.described(), spans)]}
  return image, description


def _write_jsonl(path: pathlib.Path, records, compress: bool = False) -> None:
  """JSON lines at `path`, or at `path`.gz when `compress` (gzip with no file name and mtime 0
  in its header, so the same records give the same bytes)."""
  text = "".join(dumps(r) + "\n" for r in records).encode("utf-8")
  if compress:
    with open(path.with_name(path.name + ".gz"), "wb") as raw, gzip.GzipFile(
        filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
      f.write(text)
  else:
    path.write_bytes(text)


def build(out=DEFAULT_OUT, vocab=DEFAULT_VOCAB, num_scenes: int | None = None,
          seed: int | None = None, version: int = 1, compress: bool = False) -> dict:
  """Writes SceneKB `version` under `out` (seed and scene count default to the version's);
  compress: the JSON lines files gzipped (`name.jsonl.gz`, which every reader here accepts).
  Returns counts[split][family]."""
  out = pathlib.Path(out)
  settings = _settings(version, seed, num_scenes, out)
  seed = settings.seed
  namespace = NAME if version == 1 else f"{NAME}{version}:{seed}"
  out.mkdir(parents=True, exist_ok=True)
  vocab_data = json.loads(pathlib.Path(vocab).read_text(encoding="utf-8"))
  objects, predicates = vocab_data["objects"], vocab_data["predicates"]
  knowledge, maker = _knowledge_and_maker(version, settings, objects)
  scenes = _draw_scenes(version, settings, namespace, objects, predicates, knowledge, maker)
  counts = {s: collections.Counter() for s in SPLITS}
  questions = {s: [] for s in SPLITS}
  images, texts, forms = [], [], []
  used_classes = {o for scene in scenes for o in scene.objects}
  kb_doc = {c: doc_id("kb", c, namespace=namespace) for c in sorted(used_classes)}
  for scene in scenes:
    rng = random.Random(f"{seed}:{scene.index}:questions")
    split = _split_of(scene)
    image, description = _scene_docs(scene, split)
    images.append(image)
    texts.append(description)
    distractor_images = [doc_id("image", j, namespace=namespace) for j in
                         rng.sample(range(settings.scenes), 3) if j != scene.index][:2]
    for family in FAMILIES:
      made = getattr(maker, f"{family}_q")(rng, scene)
      if made is None:
        continue
      if version >= 3:
        made = scenekb_v3.unnamed_pools(made)
      record = _question_record(version, family, made, rng, maker, scene, kb_doc,
                                distractor_images, namespace)
      questions[split].append(record)
      forms.append({"kind": "question", "qid": record["qid"], "instance_id": scene.id,
                    "family": family, "split": split, "question": made["question"],
                    "claims": made["claims"]})
      counts[split][family] += 1
  kb_triples = knowledge.triples(used_classes)
  for c in sorted(used_classes):
    texts.append({"title": c, "url": "", "id": kb_doc[c],
                  "text": (_kb_text_v1 if version == 1 else _kb_text_v2)(knowledge, c)})
  for split in SPLITS:
    _write_jsonl(out / f"MMQA_{split}.jsonl", questions[split], compress)
  _write_jsonl(out / "MMQA_images.jsonl", images, compress)
  _write_jsonl(out / "MMQA_texts.jsonl", texts, compress)
  _write_jsonl(out / "kb_wordnet.jsonl", [t.to_json() for t in kb_triples], compress)
  if version == 1:
    (out / "README.md").write_text(_readme(counts, scenes, len(kb_triples)), encoding="utf-8")
  else:
    _write_truth_and_statistics(out, version, settings, knowledge, scenes, forms, kb_triples,
                                questions, counts, compress)
  return counts


def _write_truth_and_statistics(out, version, settings, knowledge, scenes, forms, kb_triples,
                                questions, counts, compress) -> None:
  """v2 and later: truth.jsonl, statistics.json (v3: with the shortcut statistics), README."""
  truth = _truth(knowledge, scenes, forms)
  _write_jsonl(out / "truth.jsonl", truth, compress)
  stats = statistics(scenes, truth, kb_triples, questions)
  if version >= 3:
    stats["shortcuts"] = scenekb_v3.shortcut_statistics(
        questions, scenes, kb_triples, {"tau_edge": TAU_EDGE, "tau_kb": TAU_KB,
                                        "kb_hops": KB_HOPS, "kb_max_per_entity": KB_MAX})
  (out / "statistics.json").write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")
  (out / "README.md").write_text(
      _readme_v2(settings, counts, scenes, len(kb_triples), stats,
                 embedded=out.resolve() == EMBEDDED_OUT.resolve(), compress=compress),
      encoding="utf-8")


def _kb_text_v1(knowledge: Knowledge, c: str) -> str:
  facts = knowledge.facts[c]
  lines = [f"{article(c).capitalize()} ({c}) is described in WordNet 3.0 "
           f"as: {knowledge.wn.senses(c)[0].gloss.split(';')[0]}."]
  for r in KB_RELATIONS:
    objs = sorted({t.object for t in facts if t.relation == r})
    if objs:
      lines.append(f"The {c} {r if r != 'is a' else 'is a kind of'}: {', '.join(objs)}.")
  return " ".join(lines)


def _kb_text_v2(knowledge: SenseKnowledge, c: str) -> str:
  """Every sense of `c` in rank order with its gloss and facts (what a dictionary page says)."""
  senses = knowledge.wn.senses(c)
  lines = [f"{article(c).capitalize()} ({c}) has {len(senses)} sense"
           f"{'s' if len(senses) > 1 else ''} in WordNet 3.0."]
  for rank, s in enumerate(senses, start=1):
    lines.append(f"Sense {rank}: {s.gloss.split(';')[0]}.")
    facts = knowledge.sense_facts(c, s)
    for r in KB_RELATIONS:
      objs = sorted({o for _, rel, o in facts if rel == r})
      if objs:
        lines.append(f"In this sense the {c} {r if r != 'is a' else 'is a kind of'}: "
                     f"{', '.join(objs)}.")
  return " ".join(lines)


def _truth(knowledge: SenseKnowledge, scenes, forms) -> list[dict]:
  """The generator's ground truth, one JSON record a line, told apart by "kind":
    sense     {name, offset, rank, senses, gloss, facts: [[s, r, o]], kind_of: [h]}: what holds
              for the word `name` read as the WordNet synset `offset` (its rank-th sense of
              `senses`): one-hop facts, the 'is a' facts of its hypernyms, every hypernym;
    instance  {instance_id, relations: [[s, p, o, confidence, real]], senses: {object: offset}}:
              every scene-graph relation with whether it is real, and the sense of each object of
              a real relation (the others are the extractor's noise);
    question  {qid, instance_id, family, split, question, claims}: the claims its answer makes,
              each a list of alternatives, each a conjunction of [s, r, o] atoms, '?x' the
              answer, other '?' names existential, 'kind of' the transitive 'is a'.
  """
  out, seen = [], set()
  for scene in scenes:
    senses = knowledge.senses_in(scene)
    for name, synset in sorted(senses.items()):
      if (name, synset.offset) not in seen:
        seen.add((name, synset.offset))
        ranked = knowledge.wn.senses(name)
        out.append({"kind": "sense", "name": name, "offset": synset.offset,
                    "rank": [s.offset for s in ranked].index(synset.offset) + 1,
                    "senses": len(ranked), "gloss": synset.gloss.split(";")[0],
                    **knowledge.truth(name, synset)})
  out.sort(key=lambda r: (r["name"], r["offset"]))
  for scene in scenes:
    out.append({"kind": "instance", "instance_id": scene.id,
                "relations": [[s, p, o, c, not noise] for s, p, o, c, noise in scene.relations],
                "senses": {o: s.offset for o, s in sorted(knowledge.senses_in(scene).items())}})
  return out + forms


def _share(flags) -> float:
  flags = list(flags)
  return round(sum(flags) / len(flags), 4) if flags else 0.0


def statistics(scenes, truth, kb_triples, questions) -> dict:
  """Confidence statistics of a v2 build: scene relations around TAU_EDGE, KB facts around
  TAU_KB split by whether they hold for the sense the benchmark uses, gold triples that survive
  both thresholds."""
  real = [r[3] for s in scenes for r in s.relations if not r[4]]
  noise = [r[3] for s in scenes for r in s.relations if r[4]]
  senses = [r for r in truth if r["kind"] == "sense"]
  holds = {tuple(f) for r in senses for f in r["facts"]}
  confidence = {t.key(): t.confidence for t in kb_triples}
  # Facts about the classes themselves (hop 1): true for the sense the scenes use, or not.
  names = {r["name"] for r in senses}
  hop1 = [(k in holds, c) for k, c in confidence.items() if k[0] in names]
  levels = collections.Counter((h, round(c, 3)) for h, c in hop1)
  gold_edge, gold_kb = [], []
  by_id = {s.id: s for s in scenes}
  for split in SPLITS:
    for q in questions[split]:
      gold = [tuple(g) for g in q["gold_triples"]]
      gold_kb.append(all(confidence[g] >= TAU_KB for g in gold if g in confidence))
      conf = {r[:3]: r[3] for r in by_id[q["instance_id"]].relations}
      gold_edge.append(all(conf[g] >= TAU_EDGE for g in gold if g in conf))
  return {
      "scene_relations": {
          "real": len(real), "noise": len(noise),
          "real_below_tau_edge": _share(c < TAU_EDGE for c in real),
          "noise_at_or_above_tau_edge": _share(c >= TAU_EDGE for c in noise),
          "real_mean": round(sum(real) / len(real), 4),
          "noise_mean": round(sum(noise) / len(noise), 4)},
      "kb_facts": {
          "triples": len(kb_triples),
          "class_facts": len(hop1),
          "class_facts_true": sum(h for h, _ in hop1),
          "class_facts_wrong_sense": sum(not h for h, _ in hop1),
          "wrong_sense_below_tau_kb": sum(not h and c < TAU_KB for h, c in hop1),
          "wrong_sense_at_or_above_tau_kb": sum(not h and c >= TAU_KB for h, c in hop1),
          "true_below_tau_kb": sum(h and c < TAU_KB for h, c in hop1),
          "by_confidence": {f"{'true' if h else 'wrong'} {c}": n
                            for (h, c), n in sorted(levels.items())},
          "polysemous_classes": sorted({r["name"] for r in senses if r["senses"] > 1}),
          "classes_read_in_a_later_sense": sorted({r["name"] for r in senses if r["rank"] > 1})},
      "questions": {
          "total": len(gold_edge),
          "gold_scene_triples_all_at_or_above_tau_edge": _share(gold_edge),
          "gold_kb_triples_all_at_or_above_tau_kb": _share(gold_kb),
          "both": _share(a and b for a, b in zip(gold_edge, gold_kb))},
  }


def _answer(text, modality, image_id):
  return {"answer": text, "type": "string", "modality": modality, "text_instances": [],
          "table_indices": [],
          "image_instances": [{"doc_id": image_id, "doc_part": "image"}]
          if modality == "image" else []}


def _count_rows(counts) -> list[str]:
  rows = ["| split | " + " | ".join(FAMILIES) + " | total |",
          "|---|" + "---|" * (len(FAMILIES) + 1)]
  for split in SPLITS:
    c = counts[split]
    rows.append(f"| {split} | " + " | ".join(str(c[f]) for f in FAMILIES) +
                f" | {sum(c.values())} |")
  tot = collections.Counter()
  for c in counts.values():
    tot.update(c)
  rows.append("| all | " + " | ".join(str(tot[f]) for f in FAMILIES) +
              f" | {sum(tot.values())} |")
  return rows


def _readme(counts, scenes, n_kb_triples) -> str:
  noise = sum(r[4] for s in scenes for r in s.relations)
  n_scene_triples = sum(len(s.relations) for s in scenes)
  rows = _count_rows(counts)
  doc = V1_DESCRIPTION
  return (f"# SceneKB v1: the tests' small benchmark\n\nGenerated by `python -m "
          f"graphloom_jax.data.build_benchmark` (seed {SEED}); do not edit by hand: "
          f"tests/test_benchmark_data.py rebuilds it and compares the bytes. Read it with "
          f"`scenekb.load(split, root=scenekb.V1_FOLDER)`; the embedded SceneKB, which "
          f"`scenekb.load(split)` reads, is v3 (`../scenekb_v3/`).\n\n"
          f"{doc}\n"
          f"## Contents\n\n"
          f"- {len(scenes)} scenes, {n_scene_triples} scene triples ({noise} of them "
          f"low-confidence noise), {n_kb_triples} WordNet triples.\n"
          f"- `MMQA_{{train,validation,test}}.jsonl`: questions in the MMQA layout, read by "
          f"`graphloom_jax.data.mmqa`; extra fields: `options` (4), `answer_index`, "
          f"`gold_triples` ([subject, relation, object]), `instance_id`, `metadata.family`.\n"
          f"- `MMQA_images.jsonl`: one record per scene (no pixels: `path` is empty) with a "
          f"Visual-Genome-style `scene_graph` whose relationships carry `confidence`.\n"
          f"- `MMQA_texts.jsonl`: scene descriptions (with each sentence's relation and span) "
          f"and one WordNet text per object class.\n"
          f"- `kb_wordnet.jsonl`: the WordNet triples (source `kb:wordnet`) about every object "
          f"class used, 2 hops of 'is a', in the triple schema of `graphloom_jax.graph.triples`."
          f"\n\nLoad it with `graphloom_jax.data.scenekb.load(split)`: scene triples come from "
          f"the scene graphs through `graphloom_jax.graph.scene_graph`.\n\n"
          f"## Questions per family and split\n\n" + "\n".join(rows) + "\n\n"
          f"WordNet facts come from WordNet 3.0 (Princeton University); see "
          f"`../wordnet/LICENSE`.\n")


def _readme_v2(settings: Settings, counts, scenes, n_kb_triples, stats, embedded: bool = False,
               compress: bool = False) -> str:
  s, k, q = stats["scene_relations"], stats["kb_facts"], stats["questions"]
  levels = "\n".join(f"| {key.split(' ')[0]} | {key.split(' ')[1]} | {n} |"
                     for key, n in k["by_confidence"].items())
  doc = __doc__.split("\n\n", 1)[1]
  v = settings.version
  if v >= 3:
    doc = (scenekb_v3.__doc__ + "\nWhat v2 changed over v1, which v3 keeps except where it says "
           "otherwise:\n\n" + doc)
  made = (f"`python -m graphloom_jax.data.build_benchmark --version={v}` (seed {settings.seed}, "
          f"{settings.scenes} scenes, written here gzipped); do not edit by hand: "
          f"tests/test_scenekb_v3.py rebuilds it and compares the contents. This is the embedded "
          f"SceneKB: read it with `graphloom_jax.data.scenekb.load(split)`" if embedded else
          f"`python -m graphloom_jax.data.build_benchmark --version={v} --seed={settings.seed} "
          f"--scenes={settings.scenes} --out=DIR{' --compress' if compress else ''}`; rebuilding "
          f"with the same flags gives the same bytes. Read it with "
          f"`graphloom_jax.data.scenekb.load(split, root=DIR)`")
  gz = " (each gzipped: `.jsonl.gz`)" if compress else ""
  return (f"# SceneKB v{v}\n\nGenerated by {made}.\n\n{doc}\n"
          f"How v1 makes scenes and questions (v2 as above otherwise):\n\n{V1_DESCRIPTION}\n"
          f"## Contents\n\n"
          f"- {len(scenes)} scenes, {s['real'] + s['noise']} scene triples ({s['noise']} of them "
          f"noise), {n_kb_triples} WordNet triples.\n"
          f"- The files of v1 (`MMQA_{{train,validation,test}}.jsonl`, `MMQA_images.jsonl`, "
          f"`MMQA_texts.jsonl`, `kb_wordnet.jsonl`), plus `truth.jsonl` (ground truth for "
          f"`graphloom_jax.evaluation.hallucination`){gz} and `statistics.json`.\n\n"
          f"## Extraction confidences (tau_edge = {TAU_EDGE})\n\n"
          f"| relations | count | mean confidence | on the wrong side of tau_edge |\n"
          f"|---|---|---|---|\n"
          f"| real | {s['real']} | {s['real_mean']} | {s['real_below_tau_edge']:.1%} below |\n"
          f"| noise | {s['noise']} | {s['noise_mean']} | "
          f"{s['noise_at_or_above_tau_edge']:.1%} at or above |\n\n"
          f"## WordNet facts about the classes (tau_KB = {TAU_KB})\n\n"
          f"{k['class_facts']} facts with a class as subject: {k['class_facts_true']} hold for "
          f"the sense the scenes use, {k['class_facts_wrong_sense']} come from other senses "
          f"({k['wrong_sense_below_tau_kb']} below tau_KB, "
          f"{k['wrong_sense_at_or_above_tau_kb']} at or above it); {k['true_below_tau_kb']} true "
          f"facts fall below tau_KB. Polysemous classes: {', '.join(k['polysemous_classes'])}. "
          f"Classes read in a sense other than their first: "
          f"{', '.join(k['classes_read_in_a_later_sense'])}.\n\n"
          f"| holds | confidence ({'sense frequency' if v >= 3 else '1 / sense rank'}) | facts |"
          f"\n|---|---|---|\n{levels}\n\n"
          f"## Questions per family and split\n\n" + "\n".join(_count_rows(counts)) + "\n\n"
          f"Of {q['total']} questions, {q['gold_scene_triples_all_at_or_above_tau_edge']:.1%} "
          f"have every gold scene triple at or above tau_edge, "
          f"{q['gold_kb_triples_all_at_or_above_tau_kb']:.1%} every gold WordNet triple at or "
          f"above tau_KB, {q['both']:.1%} both.\n\n"
          + (f"## Shortcuts (multiple-choice accuracy, %; chance is 25)\n\n"
             f"{scenekb_v3.shortcut_table(stats['shortcuts'])}\n" if v >= 3 else "") +
          f"WordNet facts come from WordNet 3.0 (Princeton University); see "
          f"graphloom_jax/data/resources/wordnet/LICENSE.\n")


def main(argv):
  del argv
  from absl import flags
  f = flags.FLAGS
  if f.out is None and f.version not in (1, EMBEDDED_VERSION):
    raise SystemExit(f"build_benchmark: --version={f.version} needs --out (without it v1 rebuilds "
                     f"the tests' copy and v{EMBEDDED_VERSION} the embedded one)")
  if f.out is None:
    out = DEFAULT_OUT if f.version == 1 else EMBEDDED_OUT
  else:
    out = pathlib.Path(f.out)
  compress = f.compress or out.resolve() == EMBEDDED_OUT.resolve()
  try:
    counts = build(out, f.vocab, f.scenes, f.seed, f.version, compress)
  except ValueError as e:
    raise SystemExit(str(e)) from None
  for split, c in counts.items():
    print(split, dict(c), sum(c.values()))
  if f.version != 1:
    print((out / "statistics.json").read_text(encoding="utf-8"), end="")


if __name__ == "__main__":
  from absl import app, flags
  flags.DEFINE_integer("version", 1, "SceneKB version: 1 (the tests' copy), 2 or 3 (the embedded)")
  flags.DEFINE_string("out", None, "output folder (default: for version 1 the tests' copy, for "
                      "version 3 the embedded SceneKB)")
  flags.DEFINE_bool("compress", False, "gzip the JSON lines files (always for the embedded copy)")
  flags.DEFINE_integer("seed", None, "random seed (default: the version's)")
  flags.DEFINE_integer("scenes", None, "number of scenes (default: the version's)")
  flags.DEFINE_string("vocab", str(DEFAULT_VOCAB), "VG150 vocabulary (vocab.json)")
  app.run(main)
