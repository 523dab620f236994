"""Knowledge-base loaders on real-format excerpts (WordNet 3.0 wndb lines, ConceptNet 5
assertions), VG150 relation statistics against hand counts, and two-hop enrichment."""

import json
import math
import pathlib
import random
import shutil

import pytest

from graphloom_jax.graph import enrich, kb
from graphloom_jax.graph.triples import Provenance, Triple, TripleFormatError

DATA = pathlib.Path(__file__).parent / "data"
WN_TEST = DATA / "wordnet"
CN = DATA / "conceptnet" / "assertions_excerpt.csv"
VOCAB = pathlib.Path(kb.__file__).parents[1] / "data" / "resources" / "vg150" / "vocab.json"
SYSTEM_WORDNET = pathlib.Path("/usr/share/wordnet")


@pytest.fixture(scope="module")
def wn():
  return kb.WordNet.load(WN_TEST, "n")


def test_wordnet_excerpt_parses_real_lines(wn):
  dog = wn.senses("dog")
  assert len(dog) == 7  # index.noun lists 7 senses of "dog"
  first = dog[0]
  assert first.offset == 2084071 and first.lex_filenum == 5
  assert first.words == ("dog", "domestic_dog", "Canis_familiaris")
  assert [s.head for s in wn.related(first, "@")] == ["canine", "domestic animal"]
  assert first.gloss.startswith("a member of the genus Canis")
  path = [s.head for s in wn.hypernym_paths(first)[0]]
  assert path[:3] == ["dog", "canine", "carnivore"] and path[-1] == "entity"


def test_wordnet_triples_scores_by_sense_rank(wn):
  ts = wn.triples("dog", relations=("@",))
  by_rank = {(t.object, round(t.confidence, 6)) for t in ts}
  assert ("canine", 1.0) in by_rank and ("domestic animal", 1.0) in by_rank
  # The 3rd sense ("informal term for a man") has hypernym "chap": score 1/3.
  assert ("chap", round(1 / 3, 6)) in by_rank
  assert all(t.source == "kb:wordnet" and t.subject == "dog" for t in ts)


@pytest.mark.skipif(not (SYSTEM_WORDNET / "data.noun").exists(),
                    reason="WordNet 3.0 database (Debian wordnet-base) not installed")
def test_excerpt_lines_equal_full_database(wn):
  full = kb.WordNet.load(SYSTEM_WORDNET, "n")
  assert len(full.synsets) == 82115  # WordNet 3.0 noun synsets
  for key, s in wn.synsets.items():
    assert full.synsets[key] == s


def test_wordnet_data_line_format():
  line = ("02924116 06 n 0a bus 0 autobus 0 coach 2 charabanc 0 double-decker 0 jitney 0 "
          "motorbus 0 motorcoach 0 omnibus 0 passenger_vehicle 0 003 @ 04019101 n 0000 "
          "+ 00528041 a 0901 %p 04105438 n 0000 | a vehicle carrying many passengers  \n")
  s = kb.parse_data_line(line)
  assert s.words[0] == "bus" and len(s.words) == 10 and s.words[-1] == "passenger_vehicle"
  assert [(p.symbol, p.offset, p.pos, p.source_target) for p in s.pointers] == [
      ("@", 4019101, "n", "0000"), ("+", 528041, "a", "0901"), ("%p", 4105438, "n", "0000")]
  verb = ("01168468 34 v 01 eat 0 002 @ 01157517 v 0000 ~ 01168961 v 0000 02 + 08 00 "
          "+ 11 00 | take in solid food")
  assert kb.parse_data_line(verb).pos == "v"


@pytest.mark.parametrize("bad,match", [
    ("02084071 05 n 03 dog 0 domestic_dog 0 001 @ 02083346 n 0000 | x", "malformed"),
    ("02084071 05 n 01 dog 0 001 @ 02083346 n 0000", "missing the '|'"),
    ("02084071 05 q 01 dog 0 000 | x", "ss_type"),
    ("02084071 05 n 01 dog 0 001 @ 02083346 n 00 | x", "source/target"),
])
def test_wordnet_malformed_line(tmp_path, bad, match):
  folder = tmp_path / "wn"
  shutil.copytree(WN_TEST, folder)
  with open(folder / "data.noun", "a") as f:
    f.write(bad + "\n")
  n_lines = sum(1 for _ in open(folder / "data.noun"))
  with pytest.raises(TripleFormatError, match=f"data.noun:{n_lines}:.*{match}"):
    kb.WordNet.load(folder, "n")
  lenient = kb.WordNet.load(folder, "n", strict=False)
  assert lenient.report.skipped == 1
  assert len(lenient.synsets) == len(kb.WordNet.load(WN_TEST, "n").synsets)


def test_wordnet_missing_folder(tmp_path):
  with pytest.raises(FileNotFoundError, match="data.noun"):
    kb.WordNet.load(tmp_path, "n")


def test_committed_resource_maps_vg_classes_to_chosen_senses():
  res = kb.WordNet.load(pathlib.Path(kb.__file__).parents[1] / "data" / "resources" / "wordnet")
  hyper = lambda w: {t.object for t in res.triples(w) if t.relation == "is a"}
  assert hyper("kite") == {"plaything"}  # sense 3, not the bank cheque
  assert hyper("plant") == {"organism"}  # sense 2, not the factory
  assert "wheeled vehicle" in hyper("bike")


# ---------------------------------------------------------------------------- ConceptNet


def test_conceptnet_excerpt():
  ts, report = kb.load_conceptnet(CN)
  assert report.read == 14 and report.skipped == 0
  got = {t.key(): t.confidence for t in ts}
  # French start, ExternalURL: not kept. 12 English facts.
  assert len(got) == 12
  assert math.isclose(got[("dog", "is a", "animal")], 1 - math.exp(-2.0))
  assert math.isclose(got[("dog", "capable of", "bark")], 1 - math.exp(-9.381))
  assert math.isclose(got[("wheel", "part of", "car")], 1 - math.exp(-2.828))
  assert ("the beatles", "genre", "rock music") in got
  assert all(0 <= c <= 1 and t.source == "kb:conceptnet" for t, c in zip(ts, got.values()))
  by_max, _ = kb.load_conceptnet(CN, normalize="max")
  m = {t.key(): t.confidence for t in by_max}
  assert m[("dog", "capable of", "bark")] == 1.0
  assert math.isclose(m[("dog", "has a", "four legs")], 3.464 / 9.381)


@pytest.mark.parametrize("bad,match", [
    ("/a/x\t/r/IsA\t/c/en/a\t/c/en/b", "5 tab-separated columns"),
    ("/a/x\t/r/IsA\t/c/en/a\t/c/en/b\t{\"weight\": \"high\"}", "weight"),
    ("/a/x\t/r/IsA\t/c/en/a\t/c/en/b\t{weight: 1}", "not valid JSON"),
    ("/a/x\tIsA\t/c/en/a\t/c/en/b\t{\"weight\": 1}", "relation URI"),
    ("/a/x\t/r/IsA\tdog\t/c/en/b\t{\"weight\": 1}", "concept URI"),
])
def test_conceptnet_bad_lines(tmp_path, bad, match):
  lines = CN.read_text().splitlines()
  at = random.randrange(len(lines) + 1)
  lines.insert(at, bad)
  path = tmp_path / "cn.csv"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(TripleFormatError, match=f"cn.csv:{at + 1}:.*{match}"):
    kb.load_conceptnet(path)
  ts, report = kb.load_conceptnet(path, strict=False)
  assert len(ts) == 12 and report.skipped == 1


# ---------------------------------------------------------------------------- VG150 statistics


def test_vg150_stats_hand_counts(tmp_path):
  stats = kb.VG150Stats(["man", "horse", "hat"], ["riding", "on", "near", "wearing"])
  for rel, n in [(("man", "riding", "horse"), 6), (("man", "on", "horse"), 3),
                 (("man", "near", "horse"), 1), (("man", "wearing", "hat"), 4)]:
    assert stats.add(*rel, count=n)
  assert not stats.add("man", "riding", "unicorn")
  assert stats.frequency("man", "riding", "horse") == 0.6
  assert stats.frequency("man", "near", "horse") == 0.1
  assert stats.frequency("man", "wearing", "hat") == 1.0
  assert stats.frequency("horse", "on", "man") == 0.0
  ts = {t.key(): t.confidence for t in stats.triples()}
  assert ts == {("man", "near", "horse"): 0.1, ("man", "on", "horse"): 0.3,
                ("man", "riding", "horse"): 0.6, ("man", "wearing", "hat"): 1.0}
  stats.save(tmp_path / "s.json")
  assert kb.VG150Stats.load(tmp_path / "s.json").counts == stats.counts
  bad = stats.to_json()
  bad["counts"].append(["man", "flying", "hat", 2])
  (tmp_path / "bad.json").write_text(json.dumps(bad))
  with pytest.raises(TripleFormatError, match=r"counts\[4\].*outside the vocabulary"):
    kb.VG150Stats.load(tmp_path / "bad.json")


def test_vg150_vocab():
  objects, predicates = kb.load_vg150_vocab(VOCAB)
  raw = json.loads(VOCAB.read_text())
  assert list(objects) == raw["objects"] and list(predicates) == raw["predicates"]
  assert len(set(objects)) == 150 and len(set(predicates)) == 50
  assert "man" in objects and "riding" in predicates
  # Xu et al.'s VG150 classes are lemmatised oddly ("pant", "short", "jean") and keep "men"
  # beside "man"; its predicates keep "wearing" beside "wears".
  assert {"men", "pant", "short", "jean"} <= set(objects)
  assert {"parked on", "standing on", "wearing", "wears"} <= set(predicates)


# ---------------------------------------------------------------------------- enrichment


def chain_kb(scores):
  """a0 -> a1 -> a2 -> a3 with the given scores, plus low-scoring side facts."""
  ts = [Triple(f"a{i}", "is a", f"a{i + 1}", s, "kb:test") for i, s in enumerate(scores)]
  ts += [Triple("a0", "near", "noise", 0.69, "kb:test")]
  return kb.TripleKB(ts, "kb:test")


def test_enrich_two_hops_and_tau():
  src = chain_kb([0.9, 0.8, 0.95])
  got = enrich.enrich(["a0"], [src], tau_kb=0.7, hops=2, instance="img")
  assert [t.key() for t in got] == [("a0", "is a", "a1"), ("a1", "is a", "a2")]
  assert all(t.provenance == Provenance("img") for t in got)
  assert [t.key() for t in enrich.enrich(["a0"], [src], hops=1)] == [("a0", "is a", "a1")]
  assert len(enrich.enrich(["a0"], [src], hops=3)) == 3
  assert enrich.enrich(["a0"], [chain_kb([0.6, 0.9, 0.9])], tau_kb=0.7) == []


def test_enrich_cap_picks_most_confident_deterministically():
  rng = random.Random(random.getrandbits(64))
  scores = [round(rng.uniform(0.7, 1.0), 2) for _ in range(20)]
  ts = [Triple("hub", "has part", f"p{i:02d}", s, "kb:test") for i, s in enumerate(scores)]
  shuffled = ts[:]
  rng.shuffle(shuffled)
  got = enrich.enrich(["hub"], [kb.TripleKB(shuffled, "kb:test")], max_per_entity=5, hops=1)
  expected = sorted(ts, key=lambda t: (-t.confidence, t.object))[:5]
  assert [t.key() for t in got] == [t.key() for t in expected]


def test_enrich_with_wordnet_excerpt_and_conceptnet(wn):
  cn, _ = kb.load_conceptnet(CN)
  got = enrich.enrich(["dog", "car"], [wn, kb.TripleKB(cn, "kb:conceptnet")], tau_kb=0.7,
                      max_per_entity=3, existing=[Triple("dog", "is a", "canine")])
  keys = [t.key() for t in got]
  assert ("dog", "is a", "canine") not in keys  # already in the graph
  assert ("dog", "is a", "domestic animal") in keys  # WordNet, first sense
  assert ("dog", "capable of", "bark") in keys  # ConceptNet 0.9999
  assert ("dog", "at location", "kennel") not in keys  # weight 1 -> 0.632 < tau_KB
  assert all(t.confidence >= 0.7 for t in got)
  per_entity = {}
  for t in got:
    per_entity[t.subject] = per_entity.get(t.subject, 0) + 1
  assert max(per_entity.values()) <= 3
  with pytest.raises(ValueError, match="hops"):
    enrich.enrich(["dog"], [wn], hops=-1)


@pytest.mark.skipif(not (SYSTEM_WORDNET / "data.noun").exists()
                    or not pathlib.Path("/usr/share/doc/wordnet-base/copyright").exists(),
                    reason="WordNet 3.0 database (Debian wordnet-base) not installed")
def test_wordnet_resources_regenerate_byte_for_byte(tmp_path):
  import filecmp
  from graphloom_jax.graph import wordnet_excerpt
  wordnet_excerpt.build(SYSTEM_WORDNET, VOCAB, tmp_path / "res", tmp_path / "tests",
                        "/usr/share/doc/wordnet-base/copyright")
  committed = pathlib.Path(kb.__file__).parents[1] / "data" / "resources" / "wordnet"
  for mine, theirs in ((tmp_path / "res", committed), (tmp_path / "tests", WN_TEST)):
    names = sorted(p.name for p in theirs.iterdir())
    assert names == sorted(p.name for p in mine.iterdir())
    for name in names:
      assert filecmp.cmp(mine / name, theirs / name, shallow=False), name
