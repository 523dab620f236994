"""GRAIL on answer paths (PathQuestion / WorldCup2014 evidence sets) and the decoder-written
query baselines (evaluation.written_queries), on the hand-written release fixtures.

The expected evidence sets are rebuilt here from the fixture files with plain string handling,
not through graphloom_jax.data.pathqa.
"""

import pathlib

import jax
import numpy as np
import pytest

from graphloom_jax.data import grail_sets
from graphloom_jax.evaluation import grail_eval, grail_tasks, written_queries
from graphloom_jax.retrieval import grail, grail_data

from fakes import HashEmbed, assert_usage_errors

DATA = pathlib.Path(__file__).parent / "data"
PQ = DATA / "pathquestion"


class _Embed(HashEmbed):
  dim = 16


def _read_fixture(question_file, kb_file):
  """(facts in KB order, [(question, [path facts])]) straight from the files."""
  facts = []
  for line in (PQ / kb_file).read_text().splitlines():
    parts = [p for p in line.split("\t") if p]
    if len(parts) == 3:
      facts.append(tuple(parts))
  questions = []
  for line in (PQ / question_file).read_text().splitlines():
    if not line.strip():
      continue
    q, _, path = line.split("\t")
    path = path.split("#<end>#")[0].split("#")
    hops = [tuple(path[i:i + 3]) for i in range(0, len(path) - 2, 2)]
    questions.append((q.replace("_", " "), hops))
  return facts, questions


def _text(fact):
  return " ".join(x.replace("_", " ") for x in fact)


@pytest.fixture(scope="module")
def pq_set():
  return grail_sets.load_evidence_set("pathquestion", pathqa_dir=str(PQ),
                                      pathqa_configs="PQ-2H,PQ-3H")


def test_path_evidence_set_matches_the_files(pq_set):
  es = pq_set
  want_pool = []
  for kb in ("2H-kb.txt", "3H-kb.txt"):
    for f in _read_fixture("PQ-2H.txt", kb)[0]:
      if _text(f) not in want_pool:
        want_pool.append(_text(f))
  assert es.pool.texts == want_pool
  assert set(es.pool.modality.tolist()) == {grail_data.MODALITIES.index("text")}
  want_q = ([("PQ-2H", q) for q in _read_fixture("PQ-2H.txt", "2H-kb.txt")[1]]
            + [("PQ-3H", q) for q in _read_fixture("PQ-3H.txt", "3H-kb.txt")[1]])
  assert len(es.questions) == len(want_q)
  for q, (family, (text, hops)) in zip(es.questions, want_q):
    assert q.family == family and q.question == text
    assert [es.pool.texts[i] for i in q.gold] == [_text(h) for h in hops]
    assert not set(q.gold) & set(q.distractors)
  assert es.hide == "last" and es.macro_over == ("PQ-2H", "PQ-3H")
  # Paraphrases of one path share its split.
  by_path = {}
  for q in es.questions:
    by_path.setdefault(q.gold, set()).add(q.split)
  assert all(len(s) == 1 for s in by_path.values())


def test_completion_hides_the_last_hop(pq_set):
  es = pq_set
  inst = grail_data.completion_instances(es, range(len(es.questions)), 4)
  assert len(inst) == len(es.questions)  # one instance per question, every path >= 2 hops
  for qi, ctx, miss in zip(inst.question, inst.context, inst.missing):
    gold = es.questions[qi].gold
    assert miss == gold[-1]
    assert ctx.tolist() == list(gold[:-1]) + [-1] * (4 - len(gold) + 1)
  each = grail_data.EvidenceSet(es.name, es.pool, es.questions, hide="each")
  assert len(grail_data.completion_instances(each, range(len(es.questions)), 4)) == sum(
      len(q.gold) for q in es.questions)
  with pytest.raises(ValueError, match="hide must be one of"):
    grail_data.EvidenceSet("x", es.pool, es.questions, hide="first")
  sub = es.subset([0, len(es.questions) - 1])
  assert sub.hide == "last" and sub.macro_over == es.macro_over


def test_macro_is_over_the_sets_families():
  ranks = np.asarray([1, 7, 3, 30])
  question = np.asarray([0, 1, 2, 3])
  families = {0: "PQ-2H", 1: "PQ-2H", 2: "PQL-3H", 3: "Compose"}
  t = grail_tasks.recall_table(ranks, question, families, (5,), ("PQ-2H", "PQL-3H"))
  assert t["R@5"]["per_family"] == {"Compose": 0.0, "PQ-2H": 0.5, "PQL-3H": 1.0}
  assert t["R@5"]["macro"] == pytest.approx(0.75)
  assert grail_tasks.recall_table(ranks, question, families, (5,))["R@5"]["macro"] == 0.0


@pytest.mark.parametrize("configs,message", [
    ("", "needs pathqa_configs"), ("PQ-9H", "is not one of"), ("WC-2H", "is not one of")])
def test_bad_path_configs_name_the_key(configs, message):
  with pytest.raises(ValueError, match=message):
    grail_sets.load_evidence_set("pathquestion", pathqa_dir=str(PQ), pathqa_configs=configs)
  with pytest.raises(ValueError, match="needs pathqa_dir"):
    grail_sets.load_evidence_set("pathquestion", pathqa_configs="PQ-2H")
  with pytest.raises(ValueError, match="unknown data set 'pq'"):
    grail_sets.load_evidence_set("pq")


def test_wc2014_questions_carry_their_facts_as_distractors():
  es = grail_sets.load_evidence_set("wc2014", pathqa_dir=str(DATA / "wc2014"),
                                    pathqa_configs="WC-2H")
  assert es.questions and all(len(q.gold) == 2 for q in es.questions)
  assert all(q.family == "WC-2H" for q in es.questions)
  assert any(q.distractors for q in es.questions)


@pytest.mark.parametrize("argv,flag", [
    (["launch.train_grail", "--config.grail.data=pathquestion"],
     "--config.grail.data=pathquestion"),
    (["launch.evaluate_retrieval", "--task=evidence_completion", "--data=pathquestion"],
     "--data=pathquestion"),
])
def test_path_launchers_name_the_missing_keys(tmp_path, argv, flag):
  assert_usage_errors(argv, [
      ([], f"{flag} needs --config.grail.pathqa_dir=FOLDER"),
      ([f"--config.grail.pathqa_dir={PQ}", "--config.grail.pathqa_configs=PQ-2H,WC-2H"],
       "--config.grail.pathqa_configs='PQ-2H,WC-2H': expected a comma-separated list")],
      tmp_path / "out")


# ------------------------------------------------------------------ decoder-written queries


def test_prompts_and_query_texts():
  q, ctx = "who is the father of ada lovelace ?", ["ada lovelace parents lord byron"]
  assert q in written_queries.prompt("closed_book", q, ctx)
  assert ctx[0] not in written_queries.prompt("closed_book", q, ctx)
  for m in ("ircot", "answer_augmented"):
    p = written_queries.prompt(m, q, ctx)
    assert q in p and f"- {ctx[0]}" in p
  assert "- (none)" in written_queries.prompt("ircot", q, [])
  assert written_queries.query_text("answer_augmented", q, " Lord Byron. He was a poet.") == \
      f"{q} Lord Byron."
  assert written_queries.query_text("ircot", q, "Next, find where London is.\nMore") == \
      "Next, find where London is."
  assert written_queries.query_text("closed_book", q, "  ") == q
  assert written_queries.first_sentence("3.5 metres tall. Yes") == "3.5 metres tall."
  with pytest.raises(ValueError, match="unknown written-query method 'hyde'"):
    written_queries.prompt("hyde", q)


def test_write_batches_and_checks_lengths():
  seen = []

  def generate(prompts):
    seen.append(len(prompts))
    return [f"answer {len(p)}" for p in prompts]

  qs = [f"question {i}" for i in range(5)]
  texts = written_queries.write(generate, "answer_augmented", qs, [["x"]] * 5, batch_size=2)
  assert seen == [2, 2, 1]
  assert texts == [f"{q} answer {len(written_queries.prompt('answer_augmented', q, ['x']))}"
                   for q in qs]
  with pytest.raises(ValueError, match="5 questions but 4 contexts"):
    written_queries.write(generate, "ircot", qs, [[]] * 4)
  with pytest.raises(ValueError, match="returned 0 completions for 2 prompts"):
    written_queries.write(lambda p: [], "ircot", qs[:2])


def test_written_rows_search_like_query_only(pq_set):
  """A writer that echoes the question gives Query-only's ranks exactly; another text gets the
  ranks of that text's vector, computed here by brute force."""
  es = pq_set
  emb_model = _Embed()
  emb = es.embed(emb_model)
  cfg = grail.GrailConfig(dim=16)
  params = grail.init_params(jax.random.key(0), cfg)
  retriever = grail.GrailRetriever(params, cfg, emb.pool, es.pool.modality)
  questions = list(range(len(es.questions)))
  result = grail_tasks.evidence_completion({"query": (retriever, "query")}, es, emb, questions, 4)
  inst = grail_data.completion_instances(es, questions, 4)
  echo = lambda prompts: [p.split("Question: ")[1].split("\n")[0] + "." for p in prompts]
  grail_eval.written_query_rows(result, retriever, es, inst, emb_model, echo, ["closed_book"],
                                latency_queries=2, log=lambda *_: None)
  got = result["methods"]["closed_book"]
  # The echo adds a period; HashEmbed hashes bytes, so compare against the echoed text's ranks.
  qv = np.asarray(retriever.encode_queries(emb_model.embed(got["query_texts"])))
  pool = np.asarray(retriever.pool)
  s = qv @ pool.T
  for b, row in enumerate(inst.context):
    s[b, row[row >= 0]] = -np.inf
  t = s[np.arange(len(inst)), inst.missing][:, None]
  assert got["ranks"] == (1 + (s > t).sum(1)).tolist()
  assert got["query_texts"] == [es.questions[i].question + "." for i in inst.question]
  assert result["latency"]["closed_book"]["queries"] == 2
  plain = lambda prompts: [p.split("Question: ")[1].split("\n")[0] for p in prompts]
  grail_eval.written_query_rows(result, retriever, es, inst, emb_model, plain, ["closed_book"],
                                latency_queries=1, log=lambda *_: None)
  assert result["methods"]["closed_book"]["ranks"] == result["methods"]["query"]["ranks"]
  assert "macro over PQ-2H/PQ-3H" in grail_eval.completion_table(
      {**result, "macro_over": list(es.macro_over)}).replace("macro-averaged", "macro")


def test_paired_recall_resamples_paths_not_paraphrases():
  """Hand-computed: two paraphrases of path 0 and one question of path 1; a wins on path 0's
  first paraphrase only, so per path the differences are 50 and 0 points."""
  result = {"methods": {"a": {"ranks": [1, 9, 3]}, "b": {"ranks": [8, 9, 2]}}}
  d = grail_tasks.paired_recall(result, "a", "b", k=5, groups=[0, 0, 1])
  assert d["delta"] == pytest.approx(25.0) and d["questions"] == 2 and d["instances"] == 3
  assert 0.0 <= d["lo"] <= d["delta"] <= d["hi"] <= 50.0
  flat = grail_tasks.paired_recall(result, "a", "b", k=5)
  assert flat["delta"] == pytest.approx(100 / 3) and flat["questions"] == 3
  result["instance_group"] = [0, 0, 1]
  assert grail_tasks.paired_recall(result, "a", "b", k=5) == d
