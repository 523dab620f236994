"""SceneKB v2 (build_benchmark --version=2): deterministic bytes, the confidence laws around
tau_edge, graded and ambiguous WordNet facts around tau_KB, the ground truth, and load(root=)."""

import collections
import filecmp
import json
import math
import pathlib
import subprocess
import sys

import pytest

from graphloom_jax.data import build_benchmark, scenekb
from graphloom_jax.graph.kb import WordNet

REPO = pathlib.Path(__file__).resolve().parents[1]
TAU_EDGE, TAU_KB = 0.5, 0.7
SCENES = 400  # enough relations for the shares: ~4,000 real and ~1,200 noise


@pytest.fixture(scope="module")
def v2(tmp_path_factory):
  root = tmp_path_factory.mktemp("scenekb_v2")
  counts = build_benchmark.build(root, num_scenes=SCENES, version=2)
  return root, counts


def _records(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def _truth(root):
  by_kind = collections.defaultdict(list)
  for r in _records(root / "truth.jsonl"):
    by_kind[r["kind"]].append(r)
  return by_kind


def test_same_seed_same_bytes_other_seed_other_benchmark(tmp_path):
  a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
  build_benchmark.build(a, num_scenes=40, seed=11, version=2)
  build_benchmark.build(b, num_scenes=40, seed=11, version=2)
  build_benchmark.build(c, num_scenes=40, seed=12, version=2)
  names = sorted(p.name for p in a.iterdir())
  assert names == sorted(p.name for p in b.iterdir()) == sorted(p.name for p in c.iterdir())
  assert {"truth.jsonl", "statistics.json", "README.md", "kb_wordnet.jsonl"} <= set(names)
  for name in names:
    assert filecmp.cmp(a / name, b / name, shallow=False), name
  ids = lambda root: {r["id"] for r in _records(root / "MMQA_images.jsonl")}
  assert not ids(a) & ids(c)  # another seed: fresh scenes under fresh ids
  assert not filecmp.cmp(a / "MMQA_train.jsonl", c / "MMQA_train.jsonl", shallow=False)


def test_command_line_writes_a_benchmark_and_guards_the_embedded_copy(tmp_path):
  run = lambda *args: subprocess.run(
      [sys.executable, "-m", "graphloom_jax.data.build_benchmark", *args], cwd=REPO,
      capture_output=True, text=True, timeout=300)
  done = run("--version=2", "--seed=5", "--scenes=40", f"--out={tmp_path / 'cli'}")
  assert done.returncode == 0, done.stderr
  assert json.loads(done.stdout.split("\n", 3)[3])["scene_relations"]["real"] > 0
  build_benchmark.build(tmp_path / "lib", num_scenes=40, seed=5, version=2)
  for p in (tmp_path / "lib").iterdir():
    assert filecmp.cmp(p, tmp_path / "cli" / p.name, shallow=False), p.name
  assert run("--version=2", "--scenes=40").returncode != 0  # --out is required for v2
  with pytest.raises(ValueError, match="the tests read"):
    build_benchmark.build(build_benchmark.DEFAULT_OUT, num_scenes=40, version=2)


def test_extraction_confidences_overlap_around_tau_edge(v2):
  """Real ~ Beta(4.5, 2), noise ~ Beta(2, 4.5): I_0.5(4.5, 2) = 14.4% of each on the wrong side
  of 0.5, measured here on the scene graphs themselves and checked against the truth labels."""
  root, _ = v2
  truth = {r["instance_id"]: r for r in _truth(root)["instance"]}
  real, noise = [], []
  for image in _records(root / "MMQA_images.jsonl"):
    graph = image["scene_graph"]
    names = {o["object_id"]: o["names"][0] for o in graph["objects"]}
    labels = {(s, p, o): (c, is_real) for s, p, o, c, is_real in truth[image["id"]]["relations"]}
    for rel in graph["relationships"]:
      key = (names[rel["subject_id"]], rel["predicate"], names[rel["object_id"]])
      conf, is_real = labels[key]
      assert conf == rel["confidence"]
      (real if is_real else noise).append(conf)
  below = sum(c < TAU_EDGE for c in real) / len(real)
  above = sum(c >= TAU_EDGE for c in noise) / len(noise)
  assert len(real) > 3000 and len(noise) > 900
  assert 0.10 <= below <= 0.20 and 0.10 <= above <= 0.20, (below, above)
  # Beta means 4.5 / 6.5 and 2 / 6.5; a few standard errors of slack.
  assert abs(sum(real) / len(real) - 4.5 / 6.5) < 0.01
  assert abs(sum(noise) / len(noise) - 2 / 6.5) < 0.015
  stats = json.loads((root / "statistics.json").read_text())["scene_relations"]
  assert stats["real"] == len(real) and stats["noise"] == len(noise)
  assert stats["real_below_tau_edge"] == round(below, 4)
  assert stats["noise_at_or_above_tau_edge"] == round(above, 4)


def _kb(root):
  return {(t["subject"], t["relation"], t["object"]): t["confidence"]
          for t in _records(root / "kb_wordnet.jsonl")}


def test_wordnet_facts_are_graded_by_sense_rank_and_ambiguous(v2):
  root, _ = v2
  kb = _kb(root)
  senses = {(r["name"], r["offset"]): r for r in _truth(root)["sense"]}
  holds = lambda name, fact: any(tuple(f) == fact for (n, _), r in senses.items() if n == name
                                 for f in r["facts"])
  # Every confidence is a 1 / rank score; below tau_KB exactly when the best rank is >= 2.
  assert all(any(math.isclose(c, 1 / k) for k in range(1, 10)) for c in kb.values())
  # The drinking glass is WordNet's sense 2: its facts score 0.5, the material's (sense 1) 1.0.
  assert kb[("glass", "is a", "container")] == 0.5 and holds("glass", ("glass", "is a",
                                                                       "container"))
  assert kb[("glass", "is a", "solid")] == 1.0 and not holds("glass", ("glass", "is a",
                                                                         "solid"))
  # An elephant's trunk is the proboscis (a later sense); the tree trunk is sense 1.
  assert kb[("trunk", "part of", "tree")] == 1.0 and not holds("trunk", ("trunk", "part of",
                                                                           "tree"))
  assert kb[("trunk", "part of", "elephant")] < TAU_KB and holds("trunk", ("trunk", "part of",
                                                                             "elephant"))
  assert kb[("cat", "is a", "man")] == 0.5 and not holds("cat", ("cat", "is a", "man"))
  assert kb[("dog", "is a", "canine")] == 1.0 and holds("dog", ("dog", "is a", "canine"))
  # Counted over every class the scenes use: wrong-sense facts on both sides of tau_KB and true
  # facts below it.
  classes = {n for n, _ in senses}
  wrong = [c for (s, r, o), c in kb.items() if s in classes and not holds(s, (s, r, o))]
  true_low = [c for (s, r, o), c in kb.items() if s in classes and holds(s, (s, r, o))
              and c < TAU_KB]
  assert sum(c < TAU_KB for c in wrong) >= 40 and sum(c >= TAU_KB for c in wrong) >= 5
  assert len(true_low) >= 10
  stats = json.loads((root / "statistics.json").read_text())["kb_facts"]
  assert {"glass", "trunk", "cat", "man", "window", "wing"} <= set(stats["polysemous_classes"])
  assert {"glass", "trunk", "plate", "bike"} <= set(stats["classes_read_in_a_later_sense"])


def test_sense_order_agrees_with_real_wordnet():
  """The v2 order of a word's excerpt senses is the order of WordNet's own index for the words
  whose unmodified index lines tests/data/wordnet holds (car, dog, horse, table, wheel)."""
  excerpt = WordNet.load(build_benchmark.WORDNET_DIR, "n")
  real = WordNet.load(REPO / "tests" / "data" / "wordnet", "n")
  index = build_benchmark.sense_index(excerpt)
  multi = 0
  for (pos, lemma), offsets in real.index.items():
    ours = list(index[(pos, lemma)])
    assert set(ours) <= set(offsets), lemma
    assert ours == sorted(ours, key=list(offsets).index), lemma
    multi += len(ours) > 1
  assert multi >= 2  # car (automobile, railway car), wheel (wheel, bicycle)


def test_sense_numbers_match_the_wordnet_resource_builder():
  from graphloom_jax.graph.wordnet_excerpt import SENSES as senses
  assert build_benchmark.SENSE_NUMBERS == {c: k for c, (lemma, k) in senses.items()
                                           if k > 1 and lemma == c}


def test_load_root_and_questions_match_their_ground_truth(v2):
  """Every question: answers among its options once, gold triples in the instance's facts (all
  of them, before tau_edge / tau_KB), scene gold triples real, WordNet gold triples true for the
  scene's sense."""
  root, counts = v2
  truth = _truth(root)
  instances = {r["instance_id"]: r for r in truth["instance"]}
  senses = {(r["name"], r["offset"]): {tuple(f) for f in r["facts"]} for r in truth["sense"]}
  forms = {r["qid"]: r for r in truth["question"]}
  readme = (root / "README.md").read_text()
  kb = _kb(root)
  below = collections.Counter()
  for split in scenekb.SPLITS:
    data = scenekb.load(split, root=root)
    c = collections.Counter(q.metadata["family"] for q in data.questions)
    assert c == counts[split]
    assert f"| {split} | " + " | ".join(str(c[f]) for f in build_benchmark.FAMILIES) in readme
    for q in data.questions:
      inst = q.extra["instance_id"]
      assert forms[q.qid]["instance_id"] == inst and forms[q.qid]["split"] == split
      real = {tuple(r[:3]): r[3] for r in instances[inst]["relations"] if r[4]}
      true = set().union(*[senses[(o, off)] for o, off in instances[inst]["senses"].items()])
      facts = {t.key() for t in data.instance_facts(inst, hops=2)}
      for g in map(tuple, q.extra["gold_triples"]):
        assert g in facts, (q.qid, g)
        assert g in real or g in true, (q.qid, g)
        below["scene"] += g in real and real[g] < TAU_EDGE
        below["kb"] += g in true and g not in real and kb[g] < TAU_KB
      opts = q.extra["options"]
      assert len(set(opts)) == 4 and sum(o in q.answer_texts for o in opts) == 1
      assert opts[q.extra["answer_index"]] in q.answer_texts
  # Filtering costs recall: some gold triples sit below the thresholds.
  assert below["scene"] > 50 and below["kb"] > 5
  with pytest.raises(FileNotFoundError, match="kb_wordnet"):
    scenekb.load("train", root=root / "missing")


def test_default_v2_size(tmp_path):
  """The default v2 build: 2,000 scenes, about 10k questions, >= 300 in validation and test."""
  counts = build_benchmark.build(tmp_path, version=2)
  totals = {s: sum(c.values()) for s, c in counts.items()}
  assert len(_records(tmp_path / "MMQA_images.jsonl")) == 2000
  assert 9500 <= sum(totals.values()) <= 10500
  assert totals["validation"] >= 300 and totals["test"] >= 300
