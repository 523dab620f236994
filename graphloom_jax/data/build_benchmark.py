r"""Builds SceneKB, the embedded benchmark: synthetic scenes over the VG150 vocabulary with
real WordNet 3.0 knowledge about their objects, and MMQA-style questions over both.

  python -m graphloom_jax.data.build_benchmark [--out=graphloom_jax/data/resources/scenekb]

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

from __future__ import annotations

import collections
import hashlib
import json
import pathlib
import random

from graphloom_jax.graph.kb import WordNet
from graphloom_jax.graph.triples import Triple, dumps

NAME = "scenekb"
RESOURCES = pathlib.Path(__file__).resolve().parent / "resources"
DEFAULT_OUT = RESOURCES / NAME
DEFAULT_VOCAB = RESOURCES / "vg150" / "vocab.json"
WORDNET_DIR = RESOURCES / "wordnet"

NUM_SCENES = 400
SEED = 20261129
FAMILIES = ("scene", "kb", "compose", "compare", "intersect")
MMQA_TYPES = {"scene": "ImageQ", "kb": "TextQ", "compose": "Compose(TextQ,ImageQ)",
              "compare": "Compare(ImageQ,TextQ)", "intersect": "Intersect(ImageQ,TextQ)"}
SPLITS = ("train", "validation", "test")

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


def doc_id(*parts) -> str:
  return hashlib.md5("/".join(map(str, (NAME,) + parts)).encode()).hexdigest()


def phrase(p: str) -> str:
  """Verb phrase of a predicate after a singular subject: 'is riding', 'has'."""
  return VERB_FORMS[p][0] if p in VERB_FORMS else f"is {p}"


def article(word: str) -> str:
  return ("an " if word[0] in "aeiou" else "a ") + word


class Knowledge:
  """WordNet facts about the VG150 classes, from the committed excerpt."""

  def __init__(self, wn: WordNet, objects):
    self.wn = wn
    self.facts = {}
    for cls in objects:
      self.facts[cls] = [t for t in wn.neighbors(cls) if t.relation in KB_RELATIONS]

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


class Scene:
  """One synthetic scene: objects and (subject, predicate, object, confidence, noise) relations."""

  def __init__(self, index: int, rng: random.Random, vocab_objects, vocab_predicates):
    self.index = index
    self.id = doc_id("image", index)
    self.description_id = doc_id("description", index)
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
    self.relations.append((s, p, o, round(rng.uniform(0.55, 1.0), 3), False))

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
    for _ in range(rng.choice((1, 2, 3))):
      s, p, o = rng.choice([r[:3] for r in self.relations])
      if rng.random() < 0.5:
        o = rng.choice([x for x in vocab_objects if x not in self.objects])
      else:
        p = rng.choice([x for x in vocab_predicates if x != p])
      if not any((s, p, o) == r[:3] for r in self.relations):
        self._add_object(o)
        self.relations.append((s, p, o, round(rng.uniform(0.05, 0.45), 3), True))
    self.boxes = {o: [rng.randrange(0, 560), rng.randrange(0, 400), rng.randrange(24, 200),
                      rng.randrange(24, 200)] for o in self.objects}

  @property
  def true_relations(self):
    return [r[:3] for r in self.relations if not r[4]]

  def description(self) -> tuple[str, list[tuple[int, int]]]:
    """The scene description (true relations only) and each sentence's character span."""
    text, spans = "", []
    for s, p, o in self.true_relations:
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


class QuestionMaker:
  def __init__(self, knowledge: Knowledge, vocab_objects):
    self.k = knowledge
    self.vocab = vocab_objects
    self.all_hypernyms = sorted({h for c in vocab_objects for h in knowledge.objects_of(c, "is a")})
    self.kb_objects = {r: sorted({o for c in vocab_objects for o in knowledge.objects_of(c, r)})
                       for r in KB_TEMPLATES}

  def _options(self, rng, answer, gold, pools):
    distractors = []
    for pool in pools:
      for x in rng.sample(sorted(pool), len(pool)):
        if x not in gold and x != answer and x not in distractors and len(distractors) < 3:
          distractors.append(x)
    options = distractors + [answer]
    rng.shuffle(options)
    return options, options.index(answer)

  def _refs(self, scene):
    """Scene relations that identify their object uniquely: (s, p, o) with (s, p) unique."""
    rels = scene.true_relations
    return [(s, p, o) for s, p, o in rels if len(_unique(rels, lambda r: r[:2], (s, p))) == 1]

  def scene_q(self, rng, scene):
    rels = scene.true_relations
    forward = self._refs(scene)
    backward = [(s, p, o) for s, p, o in rels
                if len(_unique(rels, lambda r: r[1:], (p, o))) == 1 and p not in VERB_FORMS]
    cands = [("f", r) for r in forward] + [("b", r) for r in backward]
    if not cands:
      return None
    way, (s, p, o) = rng.choice(cands)
    if way == "f":
      q = (f"What does the {s} {VERB_FORMS[p][1]}?" if p in VERB_FORMS
           else f"What is the {s} {p}?")
      answer = o
    else:
      q, answer = f"What {phrase(p)} the {o}?", s
    return dict(question=q, answers=[answer], gold=[(s, p, o)], intermediate=[],
                pools=(scene.objects, self.vocab), modality="image")

  def _kb_fact(self, rng, x):
    rels = [r for r in KB_TEMPLATES if self.k.objects_of(x, r)]
    if not rels:
      return None
    r = rng.choice(rels)
    return r, self.k.objects_of(x, r)

  def kb_q(self, rng, scene):
    seen = {x for s, _, o in scene.true_relations for x in (s, o)}
    cands = [o for o in scene.objects if o in seen and self.k.facts.get(o)]
    rng.shuffle(cands)
    for x in cands:
      fact = self._kb_fact(rng, x)
      if fact:
        r, objs = fact
        answer = rng.choice(objs)
        return dict(question=KB_TEMPLATES[r].format(x=f"the {x}"), answers=objs,
                    gold=[(x, r, answer)], intermediate=[], answer=answer,
                    pools=(self.kb_objects[r], self.all_hypernyms), modality="text")
    return None

  def compose_q(self, rng, scene):
    refs = self._refs(scene)
    rng.shuffle(refs)
    for s, p, o in refs:
      fact = self._kb_fact(rng, o)
      if fact:
        r, objs = fact
        answer = rng.choice(objs)
        ref = f"the thing the {s} {phrase(p)}"
        return dict(question=KB_TEMPLATES[r].format(x=ref), answers=objs,
                    gold=[(s, p, o), (o, r, answer)], intermediate=[o], answer=answer,
                    pools=(self.kb_objects[r], self.all_hypernyms), modality="text")
    return None

  def compare_q(self, rng, scene):
    refs = self._refs(scene)
    pairs = [(a, b) for a in refs for b in refs if a[2] != b[2]]
    rng.shuffle(pairs)
    for (s1, p1, o1), (s2, p2, o2) in pairs:
      paths = self.k.hypernym_paths(o1)
      other = self.k.closure(o2) | {o2}
      hs = sorted(h for h in paths if h not in other)
      if not hs:
        continue
      h = rng.choice(hs)
      first, second = ((f"the thing the {s1} {phrase(p1)}", f"the thing the {s2} {phrase(p2)}")
                       if rng.random() < 0.5 else
                       (f"the thing the {s2} {phrase(p2)}", f"the thing the {s1} {phrase(p1)}"))
      return dict(question=f"Which is a kind of {h}: {first} or {second}?", answers=[o1],
                  gold=[(s1, p1, o1), (s2, p2, o2)] + paths[h], intermediate=[o1, o2],
                  pools=([o2], scene.objects, self.vocab), modality="image")
    return None

  def intersect_q(self, rng, scene):
    rels = scene.true_relations
    groups = collections.defaultdict(list)
    for s, p, o in rels:
      groups[(s, p)].append(o)
    for s, p, o in rels:
      groups[("<-", p, o)].append(s)
    keys = sorted((k for k, v in groups.items() if len(v) >= 2), key=str)
    rng.shuffle(keys)
    for key in keys:
      members = sorted(groups[key])
      for ans in rng.sample(members, len(members)):
        paths = self.k.hypernym_paths(ans)
        others = set().union(*[self.k.closure(m) | {m} for m in members if m != ans])
        hs = sorted(h for h in paths if h not in others)
        if not hs:
          continue
        h = rng.choice(hs)
        if key[0] == "<-":
          _, p, o = key
          q = f"Which thing that {phrase(p)} the {o} is a kind of {h}?"
          gold = [(ans, p, o)]
        else:
          s, p = key
          q = f"Which thing the {s} {phrase(p)} is a kind of {h}?"
          gold = [(s, p, ans)]
        return dict(question=q, answers=[ans], gold=gold + paths[h], intermediate=members,
                    pools=(members, scene.objects, self.vocab), modality="image")
    return None


def build(out=DEFAULT_OUT, vocab=DEFAULT_VOCAB, num_scenes: int = NUM_SCENES,
          seed: int = SEED) -> dict:
  """Writes the benchmark under `out`; returns counts[split][family]."""
  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  vocab_data = json.loads(pathlib.Path(vocab).read_text(encoding="utf-8"))
  objects, predicates = vocab_data["objects"], vocab_data["predicates"]
  knowledge = Knowledge(WordNet.load(WORDNET_DIR, "n"), objects)
  maker = QuestionMaker(knowledge, objects)
  counts = {s: collections.Counter() for s in SPLITS}
  questions = {s: [] for s in SPLITS}
  images, texts, used_classes = [], [], set()
  scenes = []
  for i in range(num_scenes):
    rng = random.Random(f"{seed}:{i}")
    scene = Scene(i, rng, objects, predicates)
    scenes.append(scene)
    used_classes.update(o for o in scene.objects)
  kb_doc = {c: doc_id("kb", c) for c in sorted(used_classes)}
  for scene in scenes:
    rng = random.Random(f"{seed}:{scene.index}:questions")
    split = SPLITS[0] if scene.index % 20 < 14 else SPLITS[1] if scene.index % 20 < 17 \
        else SPLITS[2]
    text, spans = scene.description()
    images.append({"title": f"SceneKB scene {scene.index:04d}", "url": "", "id": scene.id,
                   "path": "", "split": split, "scene_graph": scene.scene_graph(),
                   "description_id": scene.description_id})
    texts.append({"title": f"SceneKB scene {scene.index:04d} description", "url": "",
                  "id": scene.description_id, "text": text,
                  "spans": [[s, p, o, a, b] for (s, p, o), (a, b)
                            in zip(scene.true_relations, spans)]})
    distractor_images = [doc_id("image", j) for j in
                         rng.sample(range(num_scenes), 3) if j != scene.index][:2]
    for family in FAMILIES:
      made = getattr(maker, f"{family}_q")(rng, scene)
      if made is None:
        continue
      answer = made.get("answer", made["answers"][0])
      options, correct = maker._options(rng, answer, made["answers"], made["pools"])
      entities = {x for s, _, o in made["gold"] for x in (s, o)}
      text_ids = [scene.description_id] + [kb_doc[c] for c in sorted(entities) if c in kb_doc]
      support = [{"doc_id": scene.id, "doc_part": "image"}]
      if family != "scene":
        support += [{"doc_id": kb_doc[c], "doc_part": "text"}
                    for c in sorted(entities & set(scene.objects)) if c in kb_doc
                    and any(g[0] == c and g[1] in KB_RELATIONS for g in made["gold"])]
      qid = doc_id("question", scene.index, family)
      modalities = ["image"] if family == "scene" else ["text"] if family == "kb" \
          else ["image", "text"]
      questions[split].append({
          "qid": qid, "question": made["question"],
          "answers": [_answer(a, made["modality"], scene.id) for a in made["answers"]],
          "metadata": {"type": MMQA_TYPES[family], "family": family, "modalities": modalities,
                       "image_doc_ids": [scene.id] + distractor_images,
                       "text_doc_ids": text_ids, "table_id": None,
                       "intermediate_answers": [[_answer(a, "image", scene.id)]
                                                for a in made["intermediate"]]},
          "supporting_context": support,
          "options": options, "answer_index": correct,
          "gold_triples": [list(g) for g in made["gold"]],
          "instance_id": scene.id})
      counts[split][family] += 1
  kb_triples = knowledge.triples(used_classes)
  for c in sorted(used_classes):
    facts = knowledge.facts[c]
    lines = [f"{article(c).capitalize()} ({c}) is described in WordNet 3.0 "
             f"as: {knowledge.wn.senses(c)[0].gloss.split(';')[0]}."]
    for r in KB_RELATIONS:
      objs = sorted({t.object for t in facts if t.relation == r})
      if objs:
        lines.append(f"The {c} {r if r != 'is a' else 'is a kind of'}: {', '.join(objs)}.")
    texts.append({"title": c, "url": "", "id": kb_doc[c], "text": " ".join(lines)})

  def write(name, records):
    with open(out / name, "w", encoding="utf-8") as f:
      for r in records:
        f.write(dumps(r) + "\n")

  for split in SPLITS:
    write(f"MMQA_{split}.jsonl", questions[split])
  write("MMQA_images.jsonl", images)
  write("MMQA_texts.jsonl", texts)
  write("kb_wordnet.jsonl", [t.to_json() for t in kb_triples])
  (out / "README.md").write_text(_readme(counts, scenes, len(kb_triples)), encoding="utf-8")
  return counts


def _answer(text, modality, image_id):
  return {"answer": text, "type": "string", "modality": modality, "text_instances": [],
          "table_indices": [],
          "image_instances": [{"doc_id": image_id, "doc_part": "image"}]
          if modality == "image" else []}


def _readme(counts, scenes, n_kb_triples) -> str:
  noise = sum(r[4] for s in scenes for r in s.relations)
  n_scene_triples = sum(len(s.relations) for s in scenes)
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
  doc = __doc__.split("\n\n", 1)[1]
  return (f"# SceneKB: the embedded benchmark\n\nGenerated by `python -m "
          f"graphloom_jax.data.build_benchmark` (seed {SEED}); do not edit by hand: "
          f"tests/test_benchmark_data.py rebuilds it and compares the bytes.\n\n"
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


def main(argv):
  del argv
  from absl import flags
  counts = build(flags.FLAGS.out, flags.FLAGS.vocab)
  for split, c in counts.items():
    print(split, dict(c), sum(c.values()))


if __name__ == "__main__":
  from absl import app, flags
  flags.DEFINE_string("out", str(DEFAULT_OUT), "output folder")
  flags.DEFINE_string("vocab", str(DEFAULT_VOCAB), "VG150 vocabulary (vocab.json)")
  app.run(main)
