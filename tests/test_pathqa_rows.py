"""evaluation.pathqa_rows (the rows of benchmarks/pathqa_rows) on the PathQuestion / WorldCup2014 fixtures with the tiny config
(random decoder and heads, hashed embeddings): every row type answers every question, each
control changes what the memory reads as it says, scores follow answers.hits_at_1, and the
report pairs rows on their questions."""

import json
import pathlib

import numpy as np
import pytest

from graphloom_jax.evaluation import pathqa_rows
from graphloom_jax.data import pathquestion, wc2014
from graphloom_jax.evaluation import answers
from graphloom_jax.graph import canonical
from graphloom_jax.pipeline import prompts

from fakes import tiny_open_answer_system

DATA = pathlib.Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def system():
  return tiny_open_answer_system()


def test_reader_rows_score_hits():
  ds = pathquestion.load("PQ-2H", root=DATA / "pathquestion")
  qs = ds.questions
  rows = pathqa_rows.reader_row(ds, qs, "oracle", "line")
  assert [r["qid"] for r in rows] == [q.qid for q in qs]
  assert all(r["hits"] == 100.0 and r["recall5"] is None for r in rows)
  for r, q in zip(rows, qs):
    assert r["answer"] == q.answers[0]


@pytest.mark.parametrize("row", ["no_retrieval", "flat_rag", "graphloom", "shuffled", "none",
                                 "blind", "oracle"])
def test_system_rows(system, row, monkeypatch):
  ds = wc2014.load("WC-M", root=DATA / "wc2014")
  qs = ds.questions
  seen, objects = [], []
  answer_batch = system.answer_batch

  def spy(questions, graphs, **kw):
    seen.append((list(questions), kw.get("evidence"), kw["mode"]))
    objects.extend(len(g.objects) for g in graphs)
    return answer_batch(questions, graphs, **kw)

  monkeypatch.setattr(system, "answer_batch", spy)
  records = pathqa_rows.system_row(system, ds, qs, row, batch=4, log=lambda *_: None)
  assert [r["qid"] for r in records] == [q.qid for q in qs]
  for r, q in zip(records, qs):
    assert r["hits"] == 100.0 * answers.hits_at_1(r["answer"], q.answers)
    # R@5 only where the answer reads the retrieved subgraph
    assert (r["recall5"] is None) == (row == "no_retrieval")
    if row in ("none", "blind"):
      assert r["recall5"] == 0.0
    assert r["decoding_seconds"] > 0
    if row == "no_retrieval":  # the prompt the mode decodes from, as prompts writes it
      assert r["prompt_tokens"] == len(prompts.mode_prompt_ids(
          system.fmt, row, q.question, [], system.prompt_style))
    else:
      assert r["prompt_tokens"] > 0
  # the slots each memory answer cites, best gate first, each marked where it names a gold answer
  cites = row in ("graphloom", "shuffled", "none", "blind", "oracle")
  assert all(("cited" in r) == cites for r in records)
  if cites:
    again = answer_batch([q.question for q in qs[:2]],
                         [system.instance_graph(ds.instance_triples(q)) for q in qs[:2]],
                         mode="graphloom")
    if row == "graphloom":  # the same answers, so the same citations
      assert [[c["triple"] for c in r["cited"]] for r in records[:2]] == \
          [[list(c.triple.key()) for c in a.evidence[:pathqa_rows.CITED]] for a in again]
    for r, q in zip(records, qs):
      gates = [c["gate"] for c in r["cited"]]
      assert gates == sorted(gates, reverse=True) and len(gates) <= pathqa_rows.CITED
      for c in r["cited"]:
        gold = {canonical.Canonicalizer(singularize=False)(x) for x in q.answers}
        assert c["names_gold"] == bool({c["triple"][0], c["triple"][2]} & gold)
      if row in ("none", "blind"):
        assert r["cited"] == []
  evidence = [e for _, ev, _ in seen for e in (ev or [None] * len(_))]
  modes = {m for _, _, m in seen}
  assert modes == {"graphloom" if row in ("shuffled", "none", "blind", "oracle") else row}
  # the prefix's object tokens are the graph's entity names, except under `blind`
  assert (max(objects) == 0) == (row == "blind")
  canon = canonical.Canonicalizer(singularize=False)
  if row in ("none", "blind"):
    assert all(e == [] for e in evidence)
  elif row == "oracle":
    for e, q in zip(evidence, qs):
      assert {t.key() for t in e} == {canon.triple(t).key() for t in ds.gold_triples(q)}
  elif row == "shuffled":
    partner = pathqa_rows.shuffled_partners(qs)
    for e, q in zip(evidence, qs):  # the subgraph retrieved for the partner's question
      p = partner[q.topic]
      assert p.topic != q.topic
      graph = system.instance_graph(ds.instance_triples(p), instance_id=p.qid)
      want = system.prepare([p.question], [graph])[0].subgraph.edges
      assert [t.key() for t in e] == [t.key() for t in want]
  else:
    assert all(e is None for e in evidence)


def test_shuffled_partners_are_other_topics():
  ds = pathquestion.load("PQ-2H", root=DATA / "pathquestion")
  partner = pathqa_rows.shuffled_partners(ds.questions)
  topics = {q.topic for q in ds.questions}
  assert set(partner) == topics
  assert all(p.topic != t for t, p in partner.items())
  assert sorted(p.topic for p in partner.values()) == sorted(topics)  # a permutation


def test_report_pairs_rows(tmp_path):
  folder = tmp_path / "rows" / "X"
  (folder / "seed0").mkdir(parents=True)
  recs = lambda hits, r5=0.0: [dict(qid=str(i), hits=h, em=h, f1=h, recall5=r5,  # noqa
                                   seconds=0.1) for i, h in enumerate(hits)]
  for name, hits in (("graphloom", [100.0, 0.0, 100.0, 100.0]),
                     ("lexicon", [100.0, 100.0, 100.0, 100.0])):
    r = recs(hits, 50.0 if name == "graphloom" else None)
    (folder / "seed0" / f"{name}.json").write_text(json.dumps(dict(
        row=name, seed=0, metrics=pathqa_rows.metrics(r), records=r)))
  text = pathqa_rows.write_report(folder)
  assert "| graphloom | 1 | 75.0 | 75.0 | 75.0 | 50.0 |" in text
  assert "| lexicon | 1 | 100.0 | 100.0 | 100.0 | - |" in text  # a reader reads no retrieval
  d = pathqa_rows.seed_paired([dict(seed=0, records=recs([100.0, 0.0, 100.0, 100.0]))],
                              [dict(seed=0, records=recs([100.0] * 4))], resamples=500)
  assert d["delta"] == -25.0 and d["lo"] <= -25.0 <= d["hi"]
  assert np.isclose(pathqa_rows.metrics(recs([100.0, 0.0]))["hits"], 50.0)


def test_seed_paired_averages_seeds_per_question():
  run = lambda seed, hits: dict(seed=seed, records=[dict(qid=str(i), hits=h)  # noqa: E731
                                                    for i, h in enumerate(hits)])
  a = [run(0, [100.0, 0.0, 100.0]), run(1, [0.0, 0.0, 100.0]), run(2, [0.0, 0.0, 0.0])]
  b = [run(0, [0.0, 0.0, 100.0]), run(1, [0.0, 100.0, 100.0])]
  d = pathqa_rows.seed_paired(a, b, resamples=200)
  # seeds 0 and 1 only: per question a = (50, 0, 100), b = (0, 50, 100), d = (50, -50, 0)
  assert d["delta"] == 0.0 and d["seeds"] == 2 and d["questions"] == 3
  assert pathqa_rows.seed_paired(a, [run(5, [0.0] * 3)]) is None  # no seed in common
  assert d["lo"] <= 0.0 <= d["hi"]
  reader = [run(0, [100.0, 100.0, 0.0])]  # seedless: compared with every seed of the other
  assert pathqa_rows.seed_paired(a, reader, resamples=200)["seeds"] == 1  # seed 0 only
  d = pathqa_rows.seed_paired(a, reader, resamples=200, seedless=(False, True))
  # a over seeds 0-2 = (100/3, 0, 200/3) minus (100, 100, 0)
  assert np.isclose(d["delta"], np.mean([100 / 3 - 100, -100, 200 / 3]))
  assert pathqa_rows.seed_paired([run(0, [1.0])], [run(0, [])]) is None  # no common question


def test_report_breaks_down_by_final_relation(tmp_path):
  ds = pathquestion.load("PQ-2H", root=DATA / "pathquestion")
  folder = tmp_path / "rows" / "X"
  (folder / "seed0").mkdir(parents=True)
  qs = ds.questions
  hits = {"graphloom": [100.0 * (i % 2) for i in range(len(qs))],
          "lexicon": [100.0] * len(qs)}
  for name, h in hits.items():
    r = [dict(qid=q.qid, answer="x" if name == "graphloom" else q.answers[0], hits=v, em=v, f1=v,
              recall5=None, seconds=0.1) for q, v in zip(qs, h)]
    (folder / "seed0" / f"{name}.json").write_text(json.dumps(dict(
        row=name, seed=0, metrics=pathqa_rows.metrics(r), records=r)))
  text = pathqa_rows.write_report(folder, ds)
  table = [l for l in text.splitlines() if l.startswith("| 2 |")]
  groups = {}
  for i, q in enumerate(qs):
    groups.setdefault(pathqa_rows.final_relation(q), []).append(hits["graphloom"][i])
  assert len(table) == len(groups)
  for line in table:
    _, hops, rel, n, g, lex = [c.strip() for c in line.split("|")[:6]]
    assert int(n) == len(groups[rel]) and lex == "100"
    assert g == f"{np.mean(groups[rel]):.0f}"
  assert f"- graphloom: 'x' {len(qs)}" in text  # the repeated answer is counted
  other = pathquestion.load("PQ-3H", root=DATA / "pathquestion")
  with pytest.raises(ValueError, match="not in"):
    pathqa_rows.write_report(folder, other)


def test_reader_row_topic_echoes_the_named_entity():
  ds = pathquestion.load("PQ-2H", root=DATA / "pathquestion")
  rows = pathqa_rows.reader_row(ds, ds.questions, "topic", "path")
  for r, q in zip(rows, ds.questions):
    assert r["answer"] == q.path[0].replace("_", " ")
    assert r["hits"] == (100.0 if pathqa_rows.answer_is_topic(q) else 0.0)


def _write_rows(folder, questions, hits: dict, written: dict | None = None, **fields):
  """Row files as benchmarks/pathqa_rows writes them: hits {(row, seed): Hits@1 per question};
  written {(row, seed): answer per question} ("a" where not given)."""
  for (name, seed), h in hits.items():
    said = (written or {}).get((name, seed), ["a"] * len(questions))
    r = [dict(qid=q.qid, answer=a, hits=float(v), em=float(v), f1=float(v), recall5=None,
              seconds=0.1) for q, v, a in zip(questions, h, said)]
    (folder / f"seed{seed}").mkdir(parents=True, exist_ok=True)
    (folder / f"seed{seed}" / f"{name}.json").write_text(json.dumps(dict(
        row=name, seed=seed, **fields, metrics=pathqa_rows.metrics(r), records=r)))
  return folder


def test_report_splits_on_answers_that_are_the_topic_entity(tmp_path):
  from types import SimpleNamespace
  from graphloom_jax.data import pathqa

  def question(i, answer):
    path = (f"e{i}", "r", "m", "s", answer)
    return pathqa.Question(qid=f"q{i}", question="", raw_question="", answers=(answer,),
                           answer_ids=(answer,), paths=(path,), split="test",
                           line_split="test", line=i)
  # q0, q1 lead back to their topic entity; q2-q4 do not
  qs = [question(0, "e0"), question(1, "e1"), question(2, "x"), question(3, "y"),
        question(4, "z")]
  ds = SimpleNamespace(name="X", questions=qs, split=lambda split, protocol: [])
  hits = {("graphloom", 0): [100, 100, 100, 0, 0], ("graphloom", 1): [100, 0, 100, 100, 0],
          ("flat_rag_tuned", 0): [0, 0, 100, 0, 0], ("flat_rag_tuned", 1): [0, 0, 0, 0, 100],
          ("topic", 0): [100, 100, 0, 0, 0]}
  folder = _write_rows(tmp_path / "X", qs, hits)
  text = pathqa_rows.write_report(folder, ds)
  lines = text.splitlines()
  # columns: graphloom, flat_rag_tuned, topic (BREAKDOWN_ROWS order)
  assert "| the topic entity | 2 | 75.0 | 0.0 | 100.0 |" in lines
  assert "| another entity | 3 | 50.0 | 33.3 | 0.0 |" in lines
  # per question over the seeds on q2-q4: graphloom (100, 50, 0), flat_rag_tuned (50, 0, 50)
  want = np.mean([100 - 50, 50 - 0, 0 - 50])
  got = [l for l in lines if l.startswith("- flat_rag_tuned: ")][-1]
  assert got.startswith(f"- flat_rag_tuned: {want:+.1f} [")
  # the seedless reader is paired with both of GraphLoom's seeds: (100, 50, 0) minus 0
  assert [l for l in lines if l.startswith("- topic: ")][-1].startswith("- topic: +50.0 [")


def test_report_splits_on_questions_one_kb_fact_answers(tmp_path):
  from types import SimpleNamespace
  qs = [_one_hop(i, [f"a{i}"], "test") for i in range(4)]
  ds = SimpleNamespace(name="X", questions=qs, split=lambda split, protocol: [])
  hits = {("graphloom", 0): [100, 100, 0, 100], ("graphloom", 1): [100, 0, 0, 0],
          ("flat_rag_tuned", 0): [0, 100, 100, 0], ("one_hop", 0): [100, 0, 100, 0]}
  folder = _write_rows(tmp_path / "X", qs, hits)
  before = pathqa_rows.write_report(folder, ds)
  assert "one KB fact" in before
  lines = before.splitlines()
  # columns: graphloom, flat_rag_tuned, one_hop; q0, q2 answered by one fact, q1, q3 not
  assert "| one KB fact | 2 | 50.0 | 50.0 | 100.0 |" in lines
  assert "| the path | 2 | 50.0 | 50.0 | 0.0 |" in lines
  # on q1, q3, the seed both ran (0): graphloom (100, 100) minus flat_rag_tuned (100, 0)
  got = [l for l in lines if l.startswith("- flat_rag_tuned: ")][-1]
  assert got.startswith("- flat_rag_tuned: +50.0 [")
  # the seedless reader against both of GraphLoom's seeds: (50, 50) minus (0, 0)
  assert [l for l in lines if l.startswith("- one_hop: ")][-1].startswith("- one_hop: +50.0 [")
  # without the one_hop row there is no such table
  (folder / "seed0" / "one_hop.json").unlink()
  assert "one KB fact" not in pathqa_rows.write_report(folder, ds)


def _one_hop(i, answers, split):
  """A one-hop PathQuestion question q<i> answered by `answers`, in `split`."""
  from graphloom_jax.data import pathqa
  path = (f"e{i}", "r", answers[0])
  return pathqa.Question(qid=f"q{i}", question="", raw_question="", answers=tuple(answers),
                         answer_ids=tuple(answers), paths=(path,), split=split,
                         line_split=split, line=i)


def test_report_splits_on_answers_seen_in_training(tmp_path):
  from types import SimpleNamespace
  train = [_one_hop(0, ["The Beatles"], "train"), _one_hop(1, ["Rome"], "train")]
  # q2 and q4 have a gold answer a train question had (after normalisation); q3 does not
  test = [_one_hop(2, ["beatles", "x"], "test"), _one_hop(3, ["Paris"], "test"),
          _one_hop(4, ["rome."], "test")]
  calls = []

  def split(name, protocol):
    calls.append((name, protocol))
    return [q for q in train + test if q.split == name]
  ds = SimpleNamespace(name="X", questions=train + test, split=split)
  hits = {("graphloom", 0): [100, 100, 0], ("graphloom", 1): [0, 100, 0],
          ("lexicon", 0): [100, 0, 100]}
  folder = _write_rows(tmp_path / "X", test, hits, protocol="line")
  lines = pathqa_rows.write_report(folder, ds).splitlines()
  # graphloom over both seeds on q2, q4: (100, 0, 0, 0) -> 25; on q3: (100, 100) -> 100
  assert "| a train answer | 2 | 25.0 | 100.0 |" in lines
  assert "| never a train answer | 1 | 100.0 | 0.0 |" in lines
  assert calls == [("train", "line")]  # the rows' own protocol


@pytest.mark.parametrize("row", ["-router", "-KG-JSA++", "-prefix", "-interleaved",
                                 "-conf_ext"])
def test_component_rows_answer_with_the_rows_settings(system, row, tmp_path, monkeypatch):
  from graphloom_jax.models import heads as heads_lib
  from graphloom_jax.pipeline import GraphLoom

  heads_dir = heads_lib.save_heads(system.heads, tmp_path / "heads", system.config)
  ds = wc2014.load("WC-M", root=DATA / "wc2014")
  qs = ds.questions[:3]
  calls = []
  answer_batch = GraphLoom.answer_batch

  def spy(self, questions, graphs, **kw):
    calls.append((self, kw["mode"]))
    return answer_batch(self, questions, graphs, **kw)

  monkeypatch.setattr(GraphLoom, "answer_batch", spy)
  records = pathqa_rows.component_row(system, str(heads_dir), ds, qs, row, batch=4,
                                      log=lambda *_: None)
  assert [r["qid"] for r in records] == [q.qid for q in qs]
  answering, mode = calls[0]
  assert answering is not system and answering.decoder is system.decoder
  want = {"-router": ("graphloom", "ablation.router", "uniform"),
          "-KG-JSA++": ("routed_text", None, None),
          "-prefix": ("graphloom", "ablation.prefix", False),
          "-interleaved": ("graphloom", "retrieval.second_round", "none"),
          "-conf_ext": ("graphloom", "ablation.drop_features", "conf_ext")}[row]
  assert mode == want[0]
  if want[1]:
    section, key = want[1].split(".")
    assert answering.config[section][key] == want[2] != system.config[section][key]
  # the heads read back are the system's own
  for name, value in heads_lib.flat_state(system.heads).items():
    np.testing.assert_array_equal(heads_lib.flat_state(answering.heads)[name], value)
  for r, q in zip(records, qs):
    assert r["hits"] == 100.0 * answers.hits_at_1(r["answer"], q.answers)
  with pytest.raises(ValueError, match="not a component row"):
    pathqa_rows.component_row(system, str(heads_dir), ds, qs, "graphloom", batch=4)


def test_gold_in_prefix_counts_the_prefix_names():
  from graphloom_jax.configs import tiny
  cfg = tiny.get_config()
  cfg.graph.singularize = False
  ds = pathquestion.load("PQ-3H", root=DATA / "pathquestion")
  qs = ds.questions
  got = pathqa_rows.gold_in_prefix(cfg, ds, qs)
  canon = canonical.Canonicalizer(singularize=False)
  found, counts = [], []
  for q in qs:  # the instance graph's entity names, sorted, as the prefix reads them
    names = sorted({canon(x) for t in ds.instance_triples(q) for x in (t.subject, t.object)})
    counts.append(len(names))
    gold = {answers.normalize_answer(a) for a in q.answers}
    found.append(any(answers.normalize_answer(n) in gold for n in names[:cfg.fusion.max_objects]))
  assert got == dict(questions=len(qs), gold_in_prefix=100.0 * np.mean(found),
                     median_entities=float(np.median(counts)))
  cfg.fusion.max_objects = 1000
  assert pathqa_rows.gold_in_prefix(cfg, ds, qs)["gold_in_prefix"] == 100.0


def test_report_splits_on_answers_the_prefix_names(tmp_path):
  from graphloom_jax.configs import tiny
  cfg = tiny.get_config()
  cfg.graph.singularize = False
  ds = pathquestion.load("PQ-3H", root=DATA / "pathquestion")
  qs = ds.questions
  canon = canonical.Canonicalizer(singularize=False)

  def named(q, r):  # the prefix's object names: the instance graph's entity names, sorted
    names = sorted({canon(x) for t in ds.instance_triples(q) for x in (t.subject, t.object)})
    gold = {answers.normalize_answer(a) for a in q.answers}
    return any(answers.normalize_answer(n) in gold for n in names[:r])
  # the smallest prefix that names some gold answers and misses others
  cfg.fusion.max_objects = next(r for r in range(1, 100)
                                if 0 < sum(named(q, r) for q in qs) < len(qs))
  inside = [named(q, cfg.fusion.max_objects) for q in qs]
  rng = np.random.default_rng(0)
  hits = {("graphloom", s): list(100 * rng.integers(0, 2, len(qs))) for s in (0, 1)}
  folder = _write_rows(tmp_path / "X", qs, hits)
  lines = pathqa_rows.write_report(folder, ds, cfg).splitlines()
  for label, part in (("named in the prefix", inside),
                      ("not named in the prefix", [not x for x in inside])):
    v = [h[j] for h in hits.values() for j in range(len(qs)) if part[j]]
    assert f"| {label} | {sum(part)} | {np.mean(v):.1f} |" in lines
  # no split where the prefix names the evidence's entities, nor without the configuration
  cfg.fusion.objects = "evidence"
  for text in (pathqa_rows.write_report(folder, ds, cfg), pathqa_rows.write_report(folder, ds)):
    assert "named in the prefix" not in text


def test_report_counts_answers_that_name_the_gold(tmp_path):
  from types import SimpleNamespace
  train = [_one_hop(0, ["Rome"], "train")]
  # q1's answer was a train answer, q2's and q3's were not
  test = [_one_hop(1, ["rome"], "test"), _one_hop(2, ["Malia Obama"], "test"),
          _one_hop(3, ["male"], "test")]
  ds = SimpleNamespace(name="X", questions=train + test,
                       split=lambda name, protocol: [q for q in train + test if q.split == name])
  hits = {("graphloom", 0): [100, 0, 0], ("graphloom", 1): [100, 0, 0],
          ("flat_rag", 0): [0, 0, 0]}
  written = {("graphloom", 0): ["Rome", "Sasha", "x"], ("graphloom", 1): ["Rome", "x", "x"],
             ("flat_rag", 0): ["It is in Rome.", "The daughter is Malia Obama.", "female"]}
  folder = _write_rows(tmp_path / "X", test, hits, written)
  lines = pathqa_rows.write_report(folder, ds).splitlines()
  at = lines.index("## The answer names a gold answer (whole words, anywhere in it; mean over "
                   "seeds)")
  # columns: graphloom, then the zero-shot flat_rag
  assert lines[at + 4:at + 7] == ["| any | 3 | 33.3 | 66.7 |",
                                  "| a train answer | 1 | 100.0 | 100.0 |",
                                  "| never a train answer | 2 | 0.0 | 50.0 |"]


def test_evidence_coverage_reads_the_subgraph_answer_batch_reads(system):
  ds = wc2014.load("WC-M", root=DATA / "wc2014")
  qs = ds.questions
  records = pathqa_rows.evidence_coverage(system, ds, qs, batch=3, log=lambda *_: None)
  assert [r["qid"] for r in records] == [q.qid for q in qs]
  canon = canonical.Canonicalizer(singularize=False)
  got = system.answer_batch([q.question for q in qs],
                            [system.instance_graph(ds.instance_triples(q)) for q in qs])
  for r, q, a in zip(records, qs, got):
    held = {t.key() for t in a.retrieved}
    assert r["facts"] == len(a.retrieved)  # the subgraph the answer read
    path = {canon.triple(t).key() for t in ds.gold_triples(q)}
    assert r["path_recall"] == 100.0 * len(path & held) / len(path)
    names = {x for t in a.retrieved for x in (t.subject, t.object)}
    assert r["answer_named"] == bool(names & {canon(x) for x in q.answers})


def test_evidence_coverage_on_hand_made_subgraphs(monkeypatch):
  """Fields by hand: a fact topic -> gold (either direction) is direct; a gold answer as any
  fact's subject or object is named; path recall counts the answer path's triples. The
  subgraph holds canonical names (lower case), as the instance graph does."""
  from types import SimpleNamespace
  from graphloom_jax.graph.triples import Triple
  from graphloom_jax.data import pathqa

  def q(i, path, answers):
    return pathqa.Question(qid=f"q{i}", question=f"question {i}", raw_question="",
                           answers=answers, answer_ids=answers, paths=(path,), split="test",
                           line_split="test", line=i)

  qs = [q(0, ("Ann_B", "r", "mid", "s", "Gold"), ("Gold",)),
        q(1, ("Ann_B", "r", "mid", "s", "Gold"), ("Gold",)),
        q(2, ("Cy", "r", "mid", "s", "Gold"), ("Gold", "Other")),
        q(3, ("Cy", "r", "mid"), ("mid",))]
  t = lambda s, r, o: Triple(s, r, o)  # noqa: E731
  subgraphs = [[t("ann b", "r", "mid"), t("gold", "x", "ann b")],   # direct (reversed), 1/2 path
               [t("ann b", "r", "mid"), t("mid", "s", "gold")],     # named, whole path
               [t("zed", "y", "other")],                            # named, not direct
               [t("cy", "q", "nothing")]]                           # nothing
  ds = SimpleNamespace(instance_triples=lambda q: [],
                       gold_triples=lambda q: [t(pathqa.readable(a), pathqa.readable(b),
                                                 pathqa.readable(c))
                                               for a, b, c in q.path_facts()])
  it = iter(subgraphs)
  system = SimpleNamespace(
      config=SimpleNamespace(graph=SimpleNamespace(singularize=False)),
      instance_graph=lambda triples, instance_id: instance_id,
      prepare=lambda questions, graphs: [SimpleNamespace(subgraph=SimpleNamespace(edges=next(it)))
                                         for _ in questions])
  records = pathqa_rows.evidence_coverage(system, ds, qs, batch=2, log=lambda *_: None)
  assert [(r["facts"], r["answer_named"], r["direct_fact"], r["path_recall"]) for r in records] \
      == [(2, True, True, 50.0), (2, True, False, 100.0), (1, True, False, 0.0),
          (1, False, False, 0.0)]
  s = pathqa_rows.coverage_summary(records)
  assert (s["answer_named"], s["direct_fact"], s["whole_path"], s["path_recall"],
          s["median_facts"]) == (75.0, 25.0, 25.0, 37.5, 1.5)


def test_report_splits_on_what_the_subgraph_holds(tmp_path):
  from types import SimpleNamespace
  qs = [_one_hop(i, [f"a{i}"], "test") for i in range(4)]
  ds = SimpleNamespace(name="X", questions=qs, split=lambda split, protocol: [])
  hits = {("graphloom", 0): [100, 0, 0, 100], ("graphloom", 1): [100, 100, 0, 0],
          ("none", 0): [0, 100, 0, 0]}
  folder = _write_rows(tmp_path / "X", qs, hits)
  assert "What the retrieved subgraph holds" not in pathqa_rows.write_report(folder, ds)
  cov = [dict(qid="q0", facts=4, answer_named=True, direct_fact=True, path_recall=100.0),
         dict(qid="q1", facts=6, answer_named=True, direct_fact=False, path_recall=0.0),
         dict(qid="q2", facts=2, answer_named=False, direct_fact=False, path_recall=0.0),
         dict(qid="q3", facts=8, answer_named=False, direct_fact=False, path_recall=50.0)]
  (folder / pathqa_rows.COVERAGE_FILE).write_text(json.dumps(dict(records=cov)))
  lines = pathqa_rows.write_report(folder, ds).splitlines()
  assert ("Of 4 questions, the subgraph GraphLoom reads (median 5 facts) names a gold answer "
          "for 50.0%, holds a fact linking the topic entity to a gold answer for 25.0% and the "
          "whole answer path for 25.0% (mean path recall 37.5%).") in lines
  # columns graphloom, none: named q0, q1 -> (100, 50) / (0, 100); not named q2, q3
  assert "| named in the subgraph | 2 | 75.0 | 50.0 |" in lines
  assert "| not in the subgraph | 2 | 25.0 | 0.0 |" in lines
  assert "| topic-answer fact retrieved | 1 | 100.0 | 0.0 |" in lines
  assert "| no topic-answer fact | 3 | 33.3 | 33.3 |" in lines
  # coverage of other questions than the rows' is an error that names the file
  (folder / pathqa_rows.COVERAGE_FILE).write_text(json.dumps(dict(records=cov[:3])))
  with pytest.raises(ValueError, match="evidence_coverage.json.*'q3'"):
    pathqa_rows.write_report(folder, ds)


def test_report_says_what_the_router_cites(tmp_path):
  from types import SimpleNamespace
  from graphloom_jax.data import pathqa
  qs = [_one_hop(i, [f"a{i}"], "test") for i in range(3)]
  # q3's answer is its topic entity: left out of the table
  qs.append(pathqa.Question(qid="q3", question="", raw_question="", answers=("e3",),
                            answer_ids=("e3",), paths=(("e3", "r", "e3"),), split="test",
                            line_split="test", line=3))
  ds = SimpleNamespace(name="X", questions=qs, split=lambda split, protocol: [])
  folder = _write_rows(tmp_path / "X", qs, {("graphloom", 0): [100, 0, 0, 100],
                                            ("graphloom", 1): [100, 100, 0, 0]})
  assert "What the router cites" not in pathqa_rows.write_report(folder, ds)
  c = lambda gold: dict(triple=["s", "r", "o"], gate=0.5, names_gold=gold)  # noqa: E731
  cited = {0: [[c(True)], [c(False), c(True)], [], [c(True)]],
           1: [[c(True), c(False)], [c(True)], [c(False)], [c(True)]]}
  for seed, per in cited.items():
    path = folder / f"seed{seed}" / "graphloom.json"
    r = json.loads(path.read_text())
    for x, got in zip(r["records"], per):
      x["cited"] = got
    path.write_text(json.dumps(r))
  lines = pathqa_rows.write_report(folder, ds).splitlines()
  # q0-q2 over both seeds: top slot names gold in 3 of 6 (q0 twice, q1 seed 1), one of the top
  # in 4 of 6; Hits@1 there (100, 100, 100), elsewhere (0, 0, 0)
  assert "| graphloom | 2 | 3 | 50.0 | 66.7 | 100.0 | 0.0 |" in lines
