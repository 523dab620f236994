"""evaluation.scenekb_rows (the SceneKB tables' rows) on a small drawn SceneKB v2 with the tiny
config: rows, their metrics against hand-computed values from the records, and the report."""

import json

import numpy as np
import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import build_benchmark, scenekb
from graphloom_jax.evaluation import hallucination, scenekb_report, scenekb_rows
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import GraphLoom, graphloom

from fakes import HashEmbed


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
  root = tmp_path_factory.mktemp("v2")
  build_benchmark.build(root, num_scenes=30, seed=3, version=2)
  cfg = tiny.get_config()
  dec = decoder_lib.from_config(cfg.model)
  heads = graphloom.new_heads(cfg, dec, 16, seed=1)
  system = GraphLoom(cfg, dec, HashEmbed(), heads,
                     kb_sources=[scenekb.load("train", root=root).kb_source()])
  return root, cfg, system


def test_rows_metrics_and_report(bench, tmp_path):
  root, cfg, system = bench
  kb = scenekb.load("test", root=root)
  truth = hallucination.GroundTruth.load(root)
  questions = scenekb.round_robin(kb.questions, 6)
  r = scenekb_rows.run_row(system, kb, questions, "graphloom", truth, batch=3, log=lambda s: 0)
  recs, m = r["records"], r["metrics"]
  assert m["questions"] == len(recs) == 6
  assert m["mc_accuracy"] == pytest.approx(
      100 * np.mean([x["choice"] == x["answer_index"] for x in recs]))
  assert m["answer_false_rate"] == pytest.approx(100 * np.mean([x["hallucinated"] for x in recs]))
  claims = max(sum(x["claims"] for x in recs), 1)  # a random decoder may claim nothing
  assert m["h_rate"] == pytest.approx(100 * sum(x["unsupported_claims"] for x in recs) / claims)
  assert m["falsity"] == pytest.approx(100 * sum(x["false_claims"] for x in recs) / claims)
  assert m["abstention"] == pytest.approx(100 * np.mean([x["abstained"] for x in recs]))
  # the text rates leave GraphLoom's cited triples out of the same claims
  for x in recs:
    assert x["claims"] - len(x["cited"]) <= x["text_claims"] <= x["claims"]
    assert x["text_unsupported"] <= x["unsupported_claims"]
  text = max(sum(x["text_claims"] for x in recs), 1)
  assert m["text_h_rate"] == pytest.approx(100 * sum(x["text_unsupported"] for x in recs) / text)
  assert m["text_falsity"] == pytest.approx(100 * sum(x["text_false"] for x in recs) / text)
  assert m["em"] == pytest.approx(np.mean([x["em"] for x in recs]))
  for x, q in zip(recs, questions):
    assert x["qid"] == q.qid and 0.0 <= x["recall5"] <= 1.0
  # a gold answer is no hallucination, a made-up object is
  v = hallucination.HallucinationVerifier(truth)
  assert not v.check_answer(questions[0].qid, questions[0].answer_texts[0]).hallucinated
  assert v.check_answer(questions[0].qid, "zeppelin").hallucinated

  out = tmp_path / "results"
  rows_dir = out / "rows" / "test-6" / "seed0"
  rows_dir.mkdir(parents=True)
  config = scenekb_rows.configured(cfg, {"verify.tau_ent": scenekb_rows.Scale(0.8),
                                            "ablation.router": "uniform"})
  assert config.verify.tau_ent == pytest.approx(0.8 * cfg.verify.tau_ent)
  assert cfg.verify.tau_ent == tiny.get_config().verify.tau_ent  # the base config is not changed
  uniform = GraphLoom(config, system.decoder, system.embedder, system.heads,
                      kb_sources=system.kb_sources)
  u = scenekb_rows.run_row(uniform, kb, questions[:3], "graphloom", truth, batch=3,
                             log=lambda s: 0)
  for name, row in (("graphloom", r), ("-router", u), ("eval.tau_ent x0.8", r)):
    row = dict(row, name=name, seed=0, group="x", mode="graphloom")
    (rows_dir / f"{name}.json").write_text(json.dumps(row))
  path = scenekb_report.write(out, [], scenekb_rows.GROUPS)
  text = path.read_text()
  assert "| graphloom | 1 |" in text and "| -router | 1 |" in text
  summary = json.loads((out / "results.json").read_text())
  assert summary["test-6"]["rows"]["graphloom"]["mc_accuracy"] == pytest.approx(
      json.loads((rows_dir / "graphloom.json").read_text())["metrics"]["mc_accuracy"])
  assert (out / "test-6-ablations.png").exists() and (out / "test-6-sensitivity.png").exists()


def test_no_evidence_rows_have_no_recall(bench):
  """A no-retrieval answer reads no subgraph: its records and row carry no R@5 (the pipeline
  retrieves for its verifier only), where GraphLoom's R@5 scores the subgraph it read."""
  root, cfg, system = bench
  kb = scenekb.load("test", root=root)
  truth = hallucination.GroundTruth.load(root)
  questions = scenekb.round_robin(kb.questions, 3)
  r = scenekb_rows.run_row(system, kb, questions, "no_retrieval", truth, batch=3,
                           log=lambda s: 0)
  assert [x["recall5"] for x in r["records"]] == [None] * 3
  assert r["metrics"]["recall5"] is None
  g = scenekb_rows.run_row(system, kb, questions, "graphloom", truth, batch=3, log=lambda s: 0)
  assert all(0.0 <= x["recall5"] <= 1.0 for x in g["records"])
  assert g["metrics"]["recall5"] == pytest.approx(100 * np.mean([x["recall5"]
                                                                 for x in g["records"]]))
  # Rows written before no-evidence modes stopped scoring R@5 print none either.
  old = [{"name": "no_retrieval", "mode": "no_retrieval", "metrics": {"recall5": 52.1}},
         {"name": "graphloom", "mode": "graphloom", "metrics": {"recall5": 52.1}}]
  assert "recall5" not in scenekb_report._agg(old, "no_retrieval")
  assert scenekb_report._fmt(scenekb_report._agg(old, "no_retrieval"), "recall5") == "-"
  assert scenekb_report._agg(old, "graphloom")["recall5"] == pytest.approx(52.1)


def test_text_claims_leave_the_cited_triples_out():
  """A record's text_* counts are its claims of origin "answer" and "asserted"; the row's
  text_h_rate / text_falsity are their rates (hand-made claims)."""
  C = hallucination.PaperClaim
  paper = hallucination.Assessment(False, [
      C((), "answer", False, True), C((), "cited", True, True), C((), "cited", True, False),
      C((), "asserted", False, False)])
  f = scenekb_rows._paper_fields(paper)
  assert (f["claims"], f["unsupported_claims"], f["false_claims"]) == (4, 2, 2)
  assert (f["text_claims"], f["text_unsupported"], f["text_false"]) == (2, 2, 1)
  other = scenekb_rows._paper_fields(hallucination.Assessment(False, [C((), "answer", True, True)]))
  recs = [dict(f, abstained=False, hallucinated=True), dict(other, abstained=False,
                                                             hallucinated=False)]
  m = scenekb_rows._paper_metrics(recs)
  assert m["h_rate"] == pytest.approx(40.0) and m["falsity"] == pytest.approx(40.0)
  assert m["text_h_rate"] == pytest.approx(200 / 3) and m["text_falsity"] == pytest.approx(100 / 3)
  old = [{k: v for k, v in r.items() if not k.startswith("text_")} for r in recs]
  assert "text_h_rate" not in scenekb_rows._paper_metrics(old)  # rows written before the fields


def test_rows_resolve_and_unknown_rows_fail():
  names = [n for _, n, *_ in scenekb_rows.select_rows(["main", "-prefix"])]
  assert names == ["symbolic", "no_retrieval", "flat_rag", "graphloom", "-prefix"]
  assert len(scenekb_rows.select_rows(["sensitivity"])) == 8
  with pytest.raises(ValueError, match="unknown row"):
    scenekb_rows.select_rows(["-everything"])


def test_seed_aggregate_is_mean_and_sample_std():
  """The main rows' mean +- std over seeds: numpy's mean and ddof=1 standard deviation."""
  runs = [{"name": "graphloom", "metrics": {"mc_accuracy": v, "em": e}}
          for v, e in ((77.3, 24.7), (83.0, 36.0), (81.0, 20.7))]
  a = scenekb_report._agg(runs + [{"name": "flat_rag", "metrics": {"mc_accuracy": 1.0}}],
                          "graphloom")
  assert a["seeds"] == 3
  for key, vals in (("mc_accuracy", [77.3, 83.0, 81.0]), ("em", [24.7, 36.0, 20.7])):
    np.testing.assert_allclose(a[key], np.mean(vals), rtol=1e-12)
    np.testing.assert_allclose(a[key + "_std"], np.std(vals, ddof=1), rtol=1e-12)
  assert "f1" not in a and scenekb_report._fmt(a, "f1") == "-"
  assert scenekb_report._fmt(a, "em") == f"{np.mean([24.7, 36.0, 20.7]):.1f} ± " \
      f"{np.std([24.7, 36.0, 20.7], ddof=1):.1f}"


def test_family_table_means_each_rows_seeds_per_family():
  """The per-family table: every main / tuned / control row present, in the groups' order,
  each cell the mean over the row's seeds of its family's MC / EM / text H-Rate; rows of other
  groups (components) and rows without families stay out."""
  def fam_row(name, seed, compare, compose):
    fams = {f: {"n": 2, "mc_accuracy": v[0], "em": v[1], "text_h_rate": v[2]}
            for f, v in (("Compare", compare), ("Compose", compose))}
    return {"name": name, "seed": seed, "by_family": fams}

  rows = [fam_row("graphloom", 0, (50, 0, 40), (100, 50, 20)),
          fam_row("graphloom", 1, (100, 50, 60), (0, 0, 80)),
          fam_row("flat_rag_tuned", 0, (0, 0, 100), (50, 50, 50)),
          fam_row("-router", 0, (1, 1, 1), (1, 1, 1)),
          {"name": "symbolic", "seed": 0, "by_family": {}}]
  md = scenekb_report._family_table(rows, scenekb_rows.GROUPS)
  body = [line for line in md if line.startswith("| ") and not line.startswith("| row")]
  assert body == ["| graphloom | 2 | 75 / 25 / 50 | 50 / 25 / 50 |",
                  "| flat_rag_tuned | 1 | 0 / 0 / 100 | 50 / 50 / 50 |"]
  assert "| row | seeds | Compare | Compose |" in md
  assert scenekb_report._family_table(rows[3:], scenekb_rows.GROUPS) == []


def test_the_rows_define_no_flags():
  """The rows and the report are library modules: importing them defines no absl flags, so
  the tables' command line (benchmarks/scenekb_tables.py) cannot collide with another's."""
  import importlib

  from absl import flags
  before = set(flags.FLAGS)
  for module in (scenekb_rows, scenekb_report):
    importlib.reload(module)
  assert set(flags.FLAGS) == before
  assert callable(scenekb_rows.gate_stats)


def _row(name, seed, mc, em, qids=None):
  qids = qids or [f"q{i}" for i in range(len(mc))]
  return {"name": name, "seed": seed, "metrics": {}, "records": [
      {"qid": q, "choice": 0, "answer_index": 0 if c else 1, "em": 100.0 * e}
      for q, c, e in zip(qids, mc, em)]}


def test_paired_difference_against_scipy_bootstrap():
  """Row minus graphloom per question, averaged over the seeds both ran; the interval is the
  percentile bootstrap over questions, checked against scipy.stats.bootstrap."""
  from scipy import stats
  rng = np.random.default_rng(4)
  n = 300
  ref = [rng.random(n) < 0.8 for _ in range(3)]
  abl = [rng.random(n) < 0.7 for _ in range(3)]
  ref_em = [rng.random(n) < 0.3 for _ in range(3)]
  rows = [_row("graphloom", s, ref[s], ref_em[s]) for s in range(3)]
  rows += [_row("-router", s, abl[s], ref_em[s]) for s in range(2)]  # seed 2 not run
  p = scenekb_report.paired_difference(rows, "-router", "mc_accuracy")
  d = np.mean([100.0 * (abl[s].astype(float) - ref[s]) for s in range(2)], axis=0)
  assert p["seeds"] == 2 and p["questions"] == n
  np.testing.assert_allclose(p["delta"], d.mean(), rtol=1e-12)
  ci = stats.bootstrap((d,), np.mean, n_resamples=20_000, method="percentile",
                       confidence_level=0.95, random_state=0).confidence_interval
  assert abs(p["lo"] - ci.low) < 0.3 and abs(p["hi"] - ci.high) < 0.3
  assert p["lo"] < p["delta"] < p["hi"] < 0  # 10 points worse on 300 questions: resolved
  same = scenekb_report.paired_difference(rows, "-router", "em")  # identical EM: exactly zero
  assert same["delta"] == same["lo"] == same["hi"] == 0.0
  assert scenekb_report.paired_difference(rows, "-prefix", "em") is None
  # only the questions both answered are paired
  short = [_row("-router", 0, abl[0][:50], ref_em[0][:50])]
  p = scenekb_report.paired_difference(rows[:1] + short, "-router", "mc_accuracy")
  assert p["questions"] == 50
  np.testing.assert_allclose(p["delta"], 100 * np.mean(abl[0][:50].astype(float) - ref[0][:50]))
  assert scenekb_report.paired_difference(
      rows[:1] + [_row("-router", 0, abl[0], ref_em[0], qids=[f"x{i}" for i in range(n)])],
      "-router", "em") is None


def test_paired_claim_rate_difference_pools_claims_over_questions_and_seeds():
  """text_h_rate: each side's rate is its unsupported / all text claims summed over the paired
  questions and seeds; the interval resamples questions (checked against scipy's bootstrap of
  the same statistic); rows without the fields pair to None."""
  from scipy import stats
  rng = np.random.default_rng(7)
  n = 200
  def row(name, s, claims, unsup):
    r = _row(name, s, [1] * n, [0] * n)
    for x, c, u in zip(r["records"], claims, unsup):
      x.update(text_claims=int(c), text_unsupported=int(u))
    return r
  sides = {}
  for name, p in (("graphloom", 0.3), ("flat_rag_tuned", 0.5)):
    claims = [rng.integers(1, 4, n) for _ in range(2)]
    sides[name] = [(c, rng.binomial(c, p)) for c in claims]
  rows = [row(k, s, *v[s]) for k, v in sides.items() for s in range(2)]
  got = scenekb_report.paired_difference(rows, "flat_rag_tuned", "text_h_rate")
  rate = lambda k: 100 * sum(u.sum() for _, u in sides[k]) / sum(c.sum() for c, _ in sides[k])
  assert got["delta"] == pytest.approx(rate("flat_rag_tuned") - rate("graphloom"))
  assert got["seeds"] == 2 and got["questions"] == n
  cols = [sum(v[s][i] for s in range(2)) for k in ("flat_rag_tuned", "graphloom")
          for v in [sides[k]] for i in (0, 1)]  # per question, over seeds: c, u, c, u
  stat = lambda c1, u1, c0, u0, axis=-1: 100 * (u1.sum(axis) / c1.sum(axis)
                                               - u0.sum(axis) / c0.sum(axis))
  ci = stats.bootstrap(tuple(cols), stat, paired=True, n_resamples=20_000, method="percentile",
                       random_state=0).confidence_interval
  assert abs(got["lo"] - ci.low) < 0.5 and abs(got["hi"] - ci.high) < 0.5
  assert 0 < got["lo"] < got["delta"] < got["hi"]
  bare = [_row(k, 0, [1] * n, [0] * n) for k in sides]
  assert scenekb_report.paired_difference(bare, "flat_rag_tuned", "text_h_rate") is None


def test_paired_difference_counts_the_same_choices():
  """same_choice: the share of (question, seed) pairs where the row picks the reference's option,
  whether right or wrong, over the questions both answered; EM differences carry none."""
  def row(name, seed, choices, gold):
    return {"name": name, "seed": seed, "metrics": {}, "records": [
        {"qid": f"q{i}", "choice": c, "answer_index": g, "em": 0.0}
        for i, (c, g) in enumerate(zip(choices, gold))]}
  gold = [0, 1, 2, 3]
  rows = [row("graphloom", 0, [0, 1, 0, 0], gold), row("shuffled", 0, [0, 2, 0, 1], gold),
          row("graphloom", 1, [1, 1, 2, 3], gold), row("shuffled", 1, [1, 1, 2, 3], gold)]
  p = scenekb_report.paired_difference(rows, "shuffled", "mc_accuracy")
  assert p["same_choice"] == 100.0 * 6 / 8  # seed 0: 2 of 4 (a wrong choice kept counts too)
  assert p["delta"] == -12.5  # seed 0: -25, seed 1: 0
  assert "same_choice" not in scenekb_report.paired_difference(rows, "shuffled", "em")


def test_paired_difference_apart_averages_each_side_over_its_own_seeds():
  """match_seeds=False (a baseline trained apart from the heads): each question's difference is
  the row's mean over its 2 seeds minus the heads' mean over their 3, the interval the bootstrap
  of those differences, same_choice over all 6 (row run, heads run) couples and a claim rate
  pooled over each side's own runs; with equal seeds it is the seed-matched estimate. The
  report's `tuned` group uses it."""
  from graphloom_jax.evaluation import intervals
  rng = np.random.default_rng(11)
  n = 150
  gold = rng.integers(0, 4, n)
  choices = {("graphloom", s): rng.integers(0, 4, n) for s in range(3)}
  choices.update({("flat_rag_tuned", s): np.where(rng.random(n) < 0.5, gold, 3) for s in range(2)})
  claims = {k: rng.integers(1, 4, n) for k in choices}
  unsup = {k: rng.binomial(c, 0.3 if k[0] == "graphloom" else 0.6) for k, c in claims.items()}
  rows = []
  for (name, s), c in choices.items():
    rows.append({"name": name, "seed": s, "metrics": {}, "records": [
        {"qid": f"q{i}", "choice": int(c[i]), "answer_index": int(gold[i]),
         "em": 100.0 * (c[i] == gold[i]), "text_claims": int(claims[name, s][i]),
         "text_unsupported": int(unsup[name, s][i])} for i in range(n)]})
  got = scenekb_report.paired_difference(rows, "flat_rag_tuned", "mc_accuracy",
                                         match_seeds=False)
  mean = lambda name, k: np.mean([100.0 * (choices[name, s] == gold) for s in range(k)], axis=0)
  d = mean("flat_rag_tuned", 2) - mean("graphloom", 3)
  assert got["seeds_each"] == [2, 3] and got["seeds"] == 2 and got["questions"] == n
  np.testing.assert_allclose(got["delta"], d.mean(), rtol=1e-12)
  lo, hi = intervals.bootstrap_interval(d, 10_000, 0)
  assert (got["lo"], got["hi"]) == pytest.approx((lo, hi))
  same = np.mean([choices["flat_rag_tuned", a] == choices["graphloom", b]
                  for a in range(2) for b in range(3)])
  assert got["same_choice"] == pytest.approx(100.0 * same)
  # seed-matched pairing leaves heads seed 2 out: a different estimate
  matched = scenekb_report.paired_difference(rows, "flat_rag_tuned", "mc_accuracy")
  assert matched["seeds"] == 2 and matched["delta"] != pytest.approx(got["delta"])
  rate = lambda name, k: 100.0 * (sum(unsup[name, s].sum() for s in range(k))
                                  / sum(claims[name, s].sum() for s in range(k)))
  h = scenekb_report.paired_difference(rows, "flat_rag_tuned", "text_h_rate", match_seeds=False)
  assert h["delta"] == pytest.approx(rate("flat_rag_tuned", 2) - rate("graphloom", 3))
  assert h["seeds_each"] == [2, 3] and h["lo"] < h["delta"] < h["hi"]
  # with the same seeds on both sides the two pairings agree
  equal = [r for r in rows if r["seed"] < 2]
  for metric in ("mc_accuracy", "em", "text_h_rate"):
    a = scenekb_report.paired_difference(equal, "flat_rag_tuned", metric)
    b = scenekb_report.paired_difference(equal, "flat_rag_tuned", metric, match_seeds=False)
    assert (b["delta"], b["lo"], b["hi"]) == pytest.approx((a["delta"], a["lo"], a["hi"]))
  assert scenekb_report.paired_difference(rows, "no_retrieval_tuned", "em",
                                          match_seeds=False) is None
  # the report's tuned group pairs this way
  md, summary = scenekb_report._group_tables(rows, {"tuned": [("flat_rag_tuned",)]})
  assert summary["flat_rag_tuned"]["paired"]["mc_accuracy"]["seeds_each"] == [2, 3]
  assert any("over all seeds of each side" in line for line in md)


def test_finished_row_must_match_the_seeds_heads(tmp_path):
  """Seed N is the N-th --heads folder: a finished row made from other heads is not reused; a
  byte-identical copy of its heads is the same seed."""
  for name, data in (("s0", b"heads zero"), ("copy", b"heads zero"), ("s1", b"heads one")):
    (tmp_path / name).mkdir()
    (tmp_path / name / "heads.safetensors").write_bytes(data)
  path = tmp_path / "-router.json"
  path.write_text(json.dumps({"heads": str(tmp_path / "s0")}))
  scenekb_rows.check_done(path, str(tmp_path / "s0"))
  scenekb_rows.check_done(path, str(tmp_path / "copy"))
  scenekb_rows.check_done(path, None)  # text rows read no heads
  with pytest.raises(ValueError, match="was run with heads"):
    scenekb_rows.check_done(path, str(tmp_path / "s1"))
  path.write_text(json.dumps({"heads": str(tmp_path / "gone")}))
  scenekb_rows.check_done(path, str(tmp_path / "s1"))  # nothing to compare with: kept


def test_row_seeds_are_heads_indices():
  """Seed N reads the N-th --heads folder in every group; text rows run once, as seed 0;
  --seeds keeps some of them, and an index outside --heads is an error."""
  heads = ["a", "b", "c"]
  assert scenekb_rows.row_seeds("graphloom", heads) == [(0, "a"), (1, "b"), (2, "c")]
  assert scenekb_rows.row_seeds("routed_text", heads, [2, 1]) == [(1, "b"), (2, "c")]
  assert scenekb_rows.row_seeds("flat_rag", heads) == [(0, None)]
  assert scenekb_rows.row_seeds("no_retrieval", heads, [1]) == []
  with pytest.raises(ValueError, match="indices into --heads"):
    scenekb_rows.row_seeds("graphloom", heads, [3])


def test_tables_root_needs_a_benchmark_and_reads_the_embedded_gzipped_one(tmp_path):
  """--root: a folder without truth.jsonl(.gz) is a usage error naming it, before anything is
  loaded or written; the embedded (gzipped) SceneKB passes the check."""
  import pathlib
  import subprocess
  import sys
  from graphloom_jax.data import mmqa
  repo = pathlib.Path(__file__).resolve().parents[1]
  proc = subprocess.run([sys.executable, "-m", "benchmarks.scenekb_tables", f"--root={tmp_path}",
                         f"--workdir={tmp_path / 'out'}"], cwd=repo, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode != 0
  assert f"--root={tmp_path}: no truth.jsonl(.gz)" in proc.stderr + proc.stdout
  assert not (tmp_path / "out").exists()
  assert mmqa.find_file(scenekb.FOLDER, "truth").name == "truth.jsonl.gz"


def test_compare_pairs_row_files_from_two_workdirs_by_seed(tmp_path):
  """--compare / --against: two sets of row files (any folders) paired by their seed, the same
  numbers as paired_difference on the rows renamed, or with --apart averaged over each side's
  own seeds; bad files are usage errors naming them."""
  import pathlib
  import subprocess
  import sys
  a = [_row("graphloom", s, [1, 1, 0, 1, s], [1, 0, 0, 1, 0]) for s in range(2)]
  b = [_row("graphloom", s, [1, 0, 0, 0, 1], [0, 0, 0, 1, 0]) for s in range(2)]
  files = {}
  for side, rows in (("a", a), ("b", b)):
    for r in rows:
      path = tmp_path / side / f"seed{r['seed']}" / "graphloom.json"
      path.parent.mkdir(parents=True)
      path.write_text(json.dumps(r))
      files.setdefault(side, []).append(str(path))
  got = scenekb_report.compare_files(files["a"], files["b"][::-1])  # paired by seed, not order
  # by hand: MC per question over both seeds, a - b = [0, 100, 0, 100, -50] -> mean 30
  assert got["mc_accuracy"]["delta"] == pytest.approx(30.0)
  assert got["mc_accuracy"]["seeds"] == 2 and got["mc_accuracy"]["questions"] == 5
  assert got["em"]["delta"] == pytest.approx(20.0)  # EM a - b = [100, 0, 0, 0, 0]
  with pytest.raises(ValueError, match="both seed 0 of the row side"):
    scenekb_report.compare_files([files["a"][0]] * 2, files["b"])
  (tmp_path / "bad.json").write_text("{\"records\": 3}")
  with pytest.raises(ValueError, match="bad.json is not a row file"):
    scenekb_report.compare_files([str(tmp_path / "bad.json")], files["b"])
  with pytest.raises(ValueError, match="cannot read the row file .*missing.json"):
    scenekb_report.compare_files([str(tmp_path / "missing.json")], files["b"])
  repo = pathlib.Path(__file__).resolve().parents[1]
  proc = subprocess.run([sys.executable, "-m", "benchmarks.scenekb_tables",
                         "--compare=" + ",".join(files["a"]), "--against=" + ",".join(files["b"])],
                        cwd=repo, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert "MC: +30.0 [" in proc.stdout and "EM: +20.0 [" in proc.stdout
  assert "over 5 questions, 2 seed(s), same option" in proc.stdout
  # trained apart: one seed (5) against the reference's two, each question averaged over each
  # side's own seeds; by hand c - mean(b) = MC [0, 100, 100, 0, -100], EM [0, 100, 0, -100, 0]
  c = tmp_path / "c" / "graphloom.json"
  c.parent.mkdir()
  c.write_text(json.dumps(_row("graphloom", 5, [1, 1, 1, 0, 0], [0, 1, 0, 0, 0])))
  assert scenekb_report.compare_files([str(c)], files["b"])["mc_accuracy"] is None  # no seed 5
  got = scenekb_report.compare_files([str(c)], files["b"], match_seeds=False)
  assert got["mc_accuracy"]["delta"] == pytest.approx(20.0)
  assert got["mc_accuracy"]["seeds_each"] == [1, 2]
  assert got["em"]["delta"] == pytest.approx(0.0)
  proc = subprocess.run([sys.executable, "-m", "benchmarks.scenekb_tables", f"--compare={c}",
                         "--against=" + ",".join(files["b"]), "--apart"],
                        cwd=repo, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert "MC: +20.0 [" in proc.stdout and "1 against 2 seed(s)" in proc.stdout
