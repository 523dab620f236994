"""SceneKB, the embedded benchmark: byte-for-byte regeneration, counts in the README, and the
consistency of every question with its instance graph."""

import collections
import filecmp
import random

import pytest

from graphloom_jax.data import build_benchmark, mmqa, scenekb
from graphloom_jax.graph.instance_graph import filter_edges


def test_regenerates_byte_for_byte(tmp_path):
  # The input vocabulary ships with the package (graphloom_jax/data/resources/vg150).
  counts = build_benchmark.build(tmp_path)
  committed = build_benchmark.DEFAULT_OUT
  names = sorted(p.name for p in committed.iterdir())
  assert names == sorted(p.name for p in tmp_path.iterdir())
  for name in names:
    assert filecmp.cmp(committed / name, tmp_path / name, shallow=False), name
  readme = (committed / "README.md").read_text()
  for split in build_benchmark.SPLITS:
    row = f"| {split} | " + " | ".join(str(counts[split][f]) for f in build_benchmark.FAMILIES)
    assert row in readme


@pytest.fixture(scope="module")
def splits():
  return {s: scenekb.load(s, root=scenekb.V1_FOLDER) for s in scenekb.SPLITS}


def test_counts_match_readme(splits):
  readme = (build_benchmark.DEFAULT_OUT / "README.md").read_text()
  for split, data in splits.items():
    c = collections.Counter(q.metadata["family"] for q in data.questions)
    row = f"| {split} | " + " | ".join(str(c[f]) for f in build_benchmark.FAMILIES) + \
        f" | {len(data.questions)} |"
    assert row in readme
    assert all(c[f] >= 50 for f in build_benchmark.FAMILIES)
  assert sum(len(d.questions) for d in splits.values()) >= 1500


def test_readable_by_mmqa_reader_and_types(splits):
  qs, report = mmqa.read_questions(build_benchmark.DEFAULT_OUT / "MMQA_test.jsonl")
  assert report.skipped == 0 and len(qs) == len(splits["test"].questions)
  for q in qs:
    assert q.type == build_benchmark.MMQA_TYPES[q.metadata["family"]]


def test_splits_are_disjoint_by_instance(splits):
  owners = [{q.extra["instance_id"] for q in d.questions} for d in splits.values()]
  assert not (owners[0] & owners[1]) and not (owners[0] & owners[2]) and \
      not (owners[1] & owners[2])


def test_questions_are_supported_by_their_instance_graph(splits):
  """Gold triples are true scene triples (confidence >= tau_edge) or WordNet facts of the
  instance; answers are in the options exactly once; supporting docs exist."""
  for data in splits.values():
    sample = random.Random(random.getrandbits(64)).sample(data.questions, 120)
    for q in sample:
      inst = q.extra["instance_id"]
      triples = filter_edges(data.instance_facts(inst, hops=2), tau_edge=0.5)
      keys = {t.key() for t in triples}
      for g in q.extra["gold_triples"]:
        assert tuple(g) in keys, (q.qid, g)
      opts = q.extra["options"]
      assert len(opts) == 4 and len(set(opts)) == 4
      assert sum(o in q.answer_texts for o in opts) == 1
      assert opts[q.extra["answer_index"]] in q.answer_texts
      for doc in q.supporting_doc_ids:
        assert doc in data.images or doc in data.texts
      assert inst in q.image_doc_ids


def test_noise_is_low_confidence_and_present(splits):
  data = splits["validation"]
  confs = [t.confidence for i in list(data.images)[:80] for t in data.scene_triples(i)]
  assert min(confs) < 0.5 <= max(confs)
  assert not any(0.45 < c < 0.55 for c in confs)  # noise in [0.05, 0.45], true in [0.55, 1]


def test_kb_triples_are_real_wordnet(splits):
  kb = {t.key() for t in splits["train"].kb_triples}
  assert ("dog", "is a", "canine") in kb and ("car", "has part", "car door") in kb
  assert ("kite", "is a", "plaything") in kb
