"""The rows of the PathQuestion / WorldCup2014 comparison (benchmarks/pathqa_rows.py is their
command line): each question of a split answered by `GraphLoom.answer_batch` (open answers) in
a mode or under an evidence control (`system_row`), or by a reader of graph/path_reader.py
(`reader_row`), scored by Hits@1 (`evaluation.answers.hits_at_1`), EM and F1 against the best
gold answer, and R@5 of the answer path's triples among the retrieved ones; `write_report`
gives the paired differences (docs/pathqa.md).
"""

from __future__ import annotations

import collections
import json
import pathlib
import statistics
import time

import numpy as np
from absl import logging

from graphloom_jax import atomic
from graphloom_jax.data import pathquestion, wc2014
from graphloom_jax.data.pathqa import readable
from graphloom_jax.evaluation import answers, intervals, scenekb_rows
from graphloom_jax.evaluation.retrieval_metrics import recall_at_k
from graphloom_jax.graph import canonical, path_reader
from graphloom_jax.pipeline import GraphLoom, controls, instance
from graphloom_jax.pipeline.types import NO_EVIDENCE_MODES


def recall_at(retrieved, gold_keys, k: int = 5) -> float:
  """Share of the gold triples' keys among the first k retrieved triples (0 without gold)."""
  return recall_at_k([t.key() for t in retrieved], gold_keys, k) if gold_keys else 0.0


READER_ROWS = {"lexicon": "lexicon", "oracle_path": "oracle", "topic": "topic",
               "one_hop": "one_hop"}


CONTROL_ROWS = controls.CONTROLS
# The component and router-feature rows, as the SceneKB tables define them (scenekb_rows.GROUPS):
# row -> (answering mode, config overrides); GraphLoom's heads answer under the changed settings.
COMPONENT_ROWS = {name: (mode, overrides) for name, mode, overrides
                  in scenekb_rows.GROUPS["components"] + scenekb_rows.GROUPS["features"]}
# Rows that read no trained parameters: one run stands for every seed.
SEEDLESS = frozenset(READER_ROWS) | {"flat_rag", "no_retrieval"}
# Modes whose answers cite the slots the router chose (`Answer.evidence`), and how many of them a
# record keeps (best gate first).
CITING_MODES = ("graphloom", "routed_text")
CITED = 5


def readers():
  """Dataset name -> its reader module (`load(name, root=)`)."""
  return {"pathquestion": pathquestion, "wc2014": wc2014}


def _record(q, text: str, seconds: float, retrieved=None, gold_keys=frozenset(),
            **extra) -> dict:
  """One question's scores; R@5 (`recall5`) only for rows whose answer reads the retrieved
  subgraph (`retrieved` not None), else None: a reader or a no-retrieval mode has no R@5.
  extra: more fields (a system row's prompt length and decoding seconds)."""
  recall5 = None if retrieved is None else 100.0 * recall_at(retrieved, gold_keys)
  return dict(qid=q.qid, answer=text, gold=list(q.answers),
              **answers.open_answer_scores(text, q.answers), recall5=recall5, seconds=seconds,
              **extra)


def reader_row(ds, questions, reader: str, protocol: str) -> list[dict]:
  """The path reader `reader` (fitted on the train split of `protocol`) on every question."""
  r = path_reader.PathReader(ds.kb).fit(ds.split("train", protocol))
  out = []
  for q in questions:
    t0 = time.perf_counter()
    got = r.read(q, reader)
    text = "" if got.answer is None else readable(got.answer)
    out.append(_record(q, text, time.perf_counter() - t0))
  return out


def shuffled_partners(questions, seed: int = 0) -> dict:
  """topic entity -> the question whose evidence its questions read under `shuffled`: the first
  question of another topic (a derangement of the topics, `controls.partners`), so that no
  question reads the evidence of a paraphrase of itself."""
  topics = sorted({q.topic for q in questions})
  first = {}
  for q in questions:
    first.setdefault(q.topic, q)
  perm = controls.partners(["all"] * len(topics), seed=seed)
  return {t: first[topics[p]] for t, p in zip(topics, perm)}


def instance_graphs(system: GraphLoom, ds, pool=None):
  """A function question -> its instance graph (`GraphLoom.instance_graph` of
  `ds.instance_triples`), built once per (topic entity, hop count, carried facts), the key the
  graph depends on; with `pool` (a `TriplePool`) the graph retrieves from the pool instead
  (`pipeline.instance.with_pool`)."""
  graphs = {}

  def graph(q):
    key = (q.topic, q.hops, q.facts)
    if key not in graphs:
      graphs[key] = system.instance_graph(ds.instance_triples(q), instance_id=q.qid)
      if pool is not None:
        graphs[key] = instance.with_pool(graphs[key], pool)
    return graphs[key]
  return graph


def system_row(system: GraphLoom, ds, questions, row: str, batch: int, log=logging.info,
               pool=None) -> list[dict]:
  """Every question through answer_batch in the mode `row` names, or under the evidence
  control it names (CONTROL_ROWS: GraphLoom with other evidence); per-question records.

  pool: a `TriplePool` every question retrieves from instead of its own instance graph (the
  scalability setting, `pipeline.instance.with_pool`; rows built by `instance.pool_rows`), or
  None."""
  canon = canonical.Canonicalizer(singularize=system.config.graph.singularize)
  mode = "graphloom" if row in CONTROL_ROWS else row
  graph, cache = instance_graphs(system, ds, pool), {}

  partner = shuffled_partners(questions) if row == "shuffled" else {}
  cites = mode in CITING_MODES
  records, start = [], time.time()
  for s in range(0, len(questions), batch):
    qs = questions[s:s + batch]
    evidence = None
    if row in ("none", "blind"):
      evidence = [[] for _ in qs]
    elif row == "oracle":
      evidence = [controls.oracle_triples([t.key() for t in ds.gold_triples(q)],
                                          graph(q).triples, canon) for q in qs]
    elif row == "shuffled":
      evidence = []
      for q in qs:
        p = partner[q.topic]
        if p.qid not in cache:
          cache[p.qid] = system.prepare([p.question], [graph(p)])[0].subgraph.edges
        evidence.append(cache[p.qid])
    read = [graph(q) for q in qs]
    if row == "blind":
      read = [controls.without_objects(g) for g in read]
    got = system.answer_batch([q.question for q in qs], read, mode=mode, evidence=evidence)
    for q, a in zip(qs, got):
      gold = {canon.triple(t).key() for t in ds.gold_triples(q)}
      online = sum(v for k, v in a.timings.items() if k != "instance_graph")
      reads = mode not in NO_EVIDENCE_MODES
      extra = {}
      if cites:
        names = {canon(x) for x in q.answers}
        extra["cited"] = [dict(triple=list(c.triple.key()), gate=c.gate,
                               names_gold=c.triple.subject in names or c.triple.object in names)
                          for c in a.evidence[:CITED]]
      records.append(_record(q, a.text, online, a.retrieved if reads else None, gold,
                             prompt_tokens=a.prompt_tokens,
                             decoding_seconds=a.timings.get("decoding"),
                             retrieval_seconds=a.timings.get("retrieval"), **extra))
    log(f"  {row}: {len(records)}/{len(questions)} questions, {time.time() - start:.0f}s")
  return records


def component_row(system: GraphLoom, heads_dir: str, ds, questions, row: str, batch: int,
                  log=logging.info) -> list[dict]:
  """Every question answered by GraphLoom's heads from `heads_dir` under the settings of the
  component row `row` (COMPONENT_ROWS: e.g. -router answers with the uniform router, -KG-JSA++
  in the mode routed_text), the rest of `system` (decoder, embedder, query writer) shared."""
  if row not in COMPONENT_ROWS:
    raise ValueError(f"row {row!r}: not a component row; expected one of {sorted(COMPONENT_ROWS)}")
  mode, overrides = COMPONENT_ROWS[row]
  variant = scenekb_rows.variant(system, scenekb_rows.configured(system.config, overrides),
                                 heads_dir, mode)
  return system_row(variant, ds, questions, mode, batch, log)


COVERAGE_FILE = "evidence_coverage.json"


def evidence_coverage(system: GraphLoom, ds, questions, batch: int = 8, log=logging.info
                      ) -> list[dict]:
  """Per question, what GraphLoom's retrieved subgraph holds: stages 1-4 as `answer_batch` runs
  them (`GraphLoom.prepare`: retrieval, correction, the slot bank), without heads or decoding,
  so one run stands for every seed of the heads. Record fields (canonical names, as the
  instance graph holds them):

  - `facts`: the subgraph's size;
  - `answer_named`: a retrieved fact names a gold answer as its subject or object (always true
    when a gold answer is the topic entity, which every fact of its neighbourhood touches);
  - `direct_fact`: a retrieved fact links the topic entity and a gold answer, in either
    direction (the one fact the `one_hop` reader reads, where one exists);
  - `path_recall`: the share of the answer path's triples retrieved, at any rank, in percent.
  """
  canon = canonical.Canonicalizer(singularize=system.config.graph.singularize)
  graph, out, start = instance_graphs(system, ds), [], time.time()
  for s in range(0, len(questions), batch):
    qs = questions[s:s + batch]
    for q, item in zip(qs, system.prepare([q.question for q in qs], [graph(q) for q in qs])):
      edges = item.subgraph.edges
      topic = canon(readable(q.topic))
      gold = {canon(a) for a in q.answers}
      path = {canon.triple(t).key() for t in ds.gold_triples(q)}
      held = {t.key() for t in edges}
      out.append(dict(
          qid=q.qid, facts=len(edges),
          answer_named=any(t.subject in gold or t.object in gold for t in edges),
          direct_fact=any((t.subject == topic and t.object in gold)
                          or (t.object == topic and t.subject in gold) for t in edges),
          path_recall=100.0 * len(path & held) / len(path) if path else 0.0))
    log(f"  coverage: {len(out)}/{len(questions)} questions, {time.time() - start:.0f}s")
  return out


def coverage_summary(records: list[dict]) -> dict:
  """Shares (percent) of questions whose subgraph names a gold answer / holds a topic-answer
  fact / holds the whole answer path, mean path recall and the median subgraph size."""
  share = lambda k: 100.0 * float(np.mean([bool(r[k]) for r in records]))  # noqa: E731
  return dict(questions=len(records), answer_named=share("answer_named"),
              direct_fact=share("direct_fact"),
              whole_path=100.0 * float(np.mean([r["path_recall"] == 100.0 for r in records])),
              path_recall=float(np.mean([r["path_recall"] for r in records])),
              median_facts=float(np.median([r["facts"] for r in records])))


def coverage_split(rows: dict[str, list[dict]], names: list[str], coverage: list[dict]
                   ) -> list[str]:
  """Markdown lines: the subgraph's coverage (`coverage_summary` of `evidence_coverage`'s
  records for these questions) and the rows' Hits@1 (mean over seeds) where the retrieved
  subgraph names a gold answer and where it does not, where it holds a topic-answer fact and
  where it does not: a row's misses where the answer was retrieved are the reader's, the others
  retrieval's."""
  qids = {x["qid"] for run in rows[names[0]] for x in run["records"]}
  by_qid = {r["qid"]: r for r in coverage}
  missing = sorted(qids - set(by_qid))
  if missing:
    raise ValueError(f"{COVERAGE_FILE}: no record for {len(missing)} questions of the rows "
                     f"(first: {missing[0]!r}); run --coverage on the same questions")
  records = [by_qid[q] for q in sorted(qids)]
  c = coverage_summary(records)
  named = {r["qid"] for r in records if r["answer_named"]}
  direct = {r["qid"] for r in records if r["direct_fact"]}
  return [
      "", "## What the retrieved subgraph holds (`evidence_coverage`, no heads)", "",
      f"Of {c['questions']} questions, the subgraph GraphLoom reads (median "
      f"{c['median_facts']:.0f} facts) names a gold answer for {c['answer_named']:.1f}%, "
      f"holds a fact linking the topic entity to a gold answer for {c['direct_fact']:.1f}% "
      f"and the whole answer path for "
      f"{c['whole_path']:.1f}% (mean path recall {c['path_recall']:.1f}%).",
      *_hits_table(rows, names, (("named in the subgraph", named),
                                 ("not in the subgraph", qids - named),
                                 ("topic-answer fact retrieved", direct),
                                 ("no topic-answer fact", qids - direct)),
                   "Hits@1 by what the retrieved subgraph holds (mean over seeds)")]


def prefix_names_gold(config, ds, questions) -> tuple[set, list[int]]:
  """The qids of `questions` whose fusion prefix object names (`fusion.objects = "graph"`: the
  first `fusion.max_objects` object names of the question's instance graph, as
  `pipeline.instance` builds it) hold a gold answer (normalised), and each instance graph's
  entity count."""
  r = config.fusion.max_objects
  found, counts = set(), []
  for q in questions:
    _, _, objects = instance.build_graph(ds.instance_triples(q), config=config, kb_sources=[],
                                         instance_id=q.qid)
    gold = {answers.normalize_answer(a) for a in q.answers}
    if any(answers.normalize_answer(o) in gold for o in objects[:r]):
      found.add(q.qid)
    counts.append(len(objects))
  return found, counts


def gold_in_prefix(config, ds, questions) -> dict:
  """How often the fusion prefix's object names hold a gold answer (`prefix_names_gold`), and
  the instance graphs' median entity count."""
  found, counts = prefix_names_gold(config, ds, questions)
  return dict(questions=len(questions), gold_in_prefix=100.0 * len(found) / len(questions),
              median_entities=float(np.median(counts)))


def metrics(records: list[dict]) -> dict:
  """Means over the questions (R@5 None for rows that read no retrieval)."""
  recall = [r["recall5"] for r in records if r.get("recall5") is not None]
  return dict(questions=len(records),
              **{k: float(np.mean([r[k] for r in records])) for k in ("hits", "em", "f1")},
              recall5=float(np.mean(recall)) if recall else None,
              seconds_per_question=statistics.median(r["seconds"] for r in records))


def seed_paired(a_runs: list[dict], b_runs: list[dict], resamples: int = 10_000, seed: int = 0,
                seedless: tuple[bool, bool] = (False, False)) -> dict | None:
  """Row a minus row b in Hits@1 over their runs (one per seed), with a 95% bootstrap interval
  over questions. Only the seeds both rows ran count, except that a seedless row (`seedless`
  for a and b: a reader or a zero-shot mode, whose one run stands for every seed) is compared
  with every run of the other. Each question's Hits@1 is averaged over the counted runs of each
  row first, so the interval resamples questions with the seeds averaged in (not the seeds)."""
  if not any(seedless):
    both = {r["seed"] for r in a_runs} & {r["seed"] for r in b_runs}
    a_runs = [r for r in a_runs if r["seed"] in both]
    b_runs = [r for r in b_runs if r["seed"] in both]
  if not a_runs or not b_runs:
    return None

  def mean_hits(runs):
    per = [{x["qid"]: x["hits"] for x in r["records"]} for r in runs]
    common = set.intersection(*(set(p) for p in per))
    return {q: float(np.mean([p[q] for p in per])) for q in per[0] if q in common}

  d = intervals.paired_difference(mean_hits(a_runs), mean_hits(b_runs), resamples, seed)
  return None if d is None else dict(d, seeds=min(len(a_runs), len(b_runs)))


BREAKDOWN_ROWS = ("graphloom", "oracle", "none", "shuffled", "flat_rag_tuned",
                  "no_retrieval_tuned", "lexicon", "topic", "one_hop")
ZERO_SHOT_ROWS = ("flat_rag", "no_retrieval")  # added to `contains_split`, where they can score


def final_relation(q) -> str:
  """The readable last relation of a question's first answer path ("__music__album__artist" ->
  "artist")."""
  return q.paths[0][-2].split("__")[-1] if q.paths and len(q.paths[0]) > 1 else "-"


def answer_is_topic(q) -> bool:
  """Whether a gold answer is the question's topic entity (its path leads back to the entity
  the question names), where copying that name from the question (the `topic` reader) is
  right."""
  return q.path[0] in q.answer_ids


def _restricted(runs: list[dict], qids: set) -> list[dict]:
  return [dict(r, records=[x for x in r["records"] if x["qid"] in qids]) for r in runs]


def _hits_table(rows: dict[str, list[dict]], names: list[str], parts, heading: str,
                value=lambda record: record["hits"]) -> list[str]:
  """Markdown lines: each row's Hits@1 (or `value` of a record; mean over its seeds' records)
  on each part, `parts` a sequence of (label, set of qids)."""
  out = ["", f"## {heading}", "", "| answer | questions | " + " | ".join(names) + " |",
         "|---|---|" + "---|" * len(names)]
  for label, part in parts:
    cells = []
    for n in names:
      v = [value(x) for run in rows[n] for x in run["records"] if x["qid"] in part]
      cells.append(f"{np.mean(v):.1f}" if v else "-")
    out.append(f"| {label} | {len(part)} | " + " | ".join(cells) + " |")
  return out


def _split_paired(rows: dict[str, list[dict]], names: list[str], inside: set, labels, heading,
                  others: str) -> list[str]:
  """`_hits_table` on the questions in `inside` and the others (`labels`: their two labels),
  with GraphLoom's paired difference to each row on the others (`others` says what they are)."""
  qids = {x["qid"] for run in rows[names[0]] for x in run["records"]}
  other = qids - inside
  out = _hits_table(rows, names, ((labels[0], qids & inside), (labels[1], other)), heading)
  if "graphloom" in rows and other:
    out += ["", f"GraphLoom minus each row on the questions {others} (paired, seeds both ran):",
            ""]
    for n in names:
      if n == "graphloom":
        continue
      d = seed_paired(_restricted(rows["graphloom"], other), _restricted(rows[n], other),
                      seedless=(False, n in SEEDLESS))
      if d is not None:
        out.append(f"- {n}: {d['delta']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}]")
  return out


def topic_split(rows: dict[str, list[dict]], by_qid: dict, names: list[str]) -> list[str]:
  """Markdown lines: the rows' Hits@1 (mean over seeds) on the questions whose answer is the
  topic entity and on the others, with the paired difference to GraphLoom on the others."""
  qids = {x["qid"] for run in rows[names[0]] for x in run["records"]}
  echo = {q for q in qids if answer_is_topic(by_qid[q])}
  return _split_paired(rows, names, echo, ("the topic entity", "another entity"),
                       "Hits@1 where the answer is the question's topic entity, and elsewhere "
                       "(mean over seeds)", "whose answer is another entity")


def one_hop_split(rows: dict[str, list[dict]], names: list[str]) -> list[str]:
  """Markdown lines: the rows' Hits@1 (mean over seeds) on the questions the one-hop reader
  answers (the `one_hop` row: one KB fact from the topic entity holds the answer) and on the
  others, where the answer needs the path, with the paired difference to GraphLoom there;
  nothing when the `one_hop` row has not run."""
  if "one_hop" not in rows:
    return []
  direct = {x["qid"] for run in rows["one_hop"] for x in run["records"] if x["hits"] > 0}
  return _split_paired(rows, names, direct, ("one KB fact", "the path"),
                       "Hits@1 where one KB fact from the topic entity answers (the one_hop "
                       "reader), and where the answer needs the path (mean over seeds)",
                       "that need the path")


def routing_table(rows: dict[str, list[dict]], by_qid: dict) -> list[str]:
  """Markdown lines: for each row whose records keep the slots its answers cite (`cited`, the
  CITING_MODES rows run since 2026-12-07), on the questions whose answer is not the topic entity
  (where every fact of the neighbourhood names it): how often the slot with the largest gate, and
  any of the CITED best, names a gold answer, and Hits@1 where the largest-gate slot does and
  where it does not (mean over seeds); nothing when no row kept them."""
  names = [n for n, runs in rows.items()
           if all("cited" in x for run in runs for x in run["records"])]
  if not names:
    return []
  out = ["", "## What the router cites (slots at the answer steps, largest gate first; questions "
         "whose answer is another entity than the topic; mean over seeds)", "",
         "| row | seeds | questions | top slot names a gold answer | one of the top "
         f"{CITED} does | Hits@1 where the top slot names it | Hits@1 elsewhere |",
         "|---|---|---|---|---|---|---|"]
  for n in names:
    recs = [x for run in rows[n] for x in run["records"]
            if not answer_is_topic(by_qid[x["qid"]])]
    if not recs:
      continue
    top = [bool(x["cited"]) and x["cited"][0]["names_gold"] for x in recs]
    anywhere = [any(c["names_gold"] for c in x["cited"]) for x in recs]
    hit = lambda keep: [x["hits"] for x, t in zip(recs, top) if t == keep]  # noqa: E731
    cell = lambda v: f"{np.mean(v):.1f}" if v else "-"  # noqa: E731
    out.append(f"| {n} | {len(rows[n])} | {len(recs) // len(rows[n])} | "
               f"{100.0 * np.mean(top):.1f} | {100.0 * np.mean(anywhere):.1f} | "
               f"{cell(hit(True))} | {cell(hit(False))} |")
  return out


def train_answers(ds, protocol: str) -> frozenset:
  """The normalised gold answers (`answers.normalize_answer`) of the train split."""
  return frozenset(answers.normalize_answer(a) for q in ds.split("train", protocol)
                   for a in q.answers)


def _seen_parts(rows: dict[str, list[dict]], by_qid: dict, name: str, seen: frozenset
                ) -> tuple[tuple[str, set], tuple[str, set]]:
  """The questions of row `name` with a gold answer among `seen` and the others, as
  `_hits_table` parts."""
  qids = {x["qid"] for run in rows[name] for x in run["records"]}
  known = {q for q in qids if any(answers.normalize_answer(a) in seen
                                  for a in by_qid[q].answers)}
  return ("a train answer", known), ("never a train answer", qids - known)


def seen_split(rows: dict[str, list[dict]], by_qid: dict, names: list[str], seen: frozenset
               ) -> list[str]:
  """Markdown lines: the rows' Hits@1 (mean over seeds) on the questions with a gold answer
  among the train split's answers (`seen`) and on the others, where a row must write a name it
  was never trained to write."""
  return _hits_table(rows, names, _seen_parts(rows, by_qid, names[0], seen),
                     "Hits@1 where a gold answer is also a train question's answer, and "
                     "elsewhere (mean over seeds)")


def contains_split(rows: dict[str, list[dict]], by_qid: dict, names: list[str],
                   seen: frozenset) -> list[str]:
  """Markdown lines: how often each row's answer names a gold answer anywhere in it
  (`answers.answer_contains`, mean over seeds), on all questions and split as `seen_split`:
  a row that writes sentences (the zero-shot modes) is credited for reading the evidence even
  where its format fails Hits@1."""
  parts = _seen_parts(rows, by_qid, names[0], seen)
  return _hits_table(rows, names, (("any", parts[0][1] | parts[1][1]), *parts),
                     "The answer names a gold answer (whole words, anywhere in it; mean over "
                     "seeds)", lambda x: 100.0 * answers.answer_contains(
                         x["answer"], by_qid[x["qid"]].answers))


def prefix_split(rows: dict[str, list[dict]], names: list[str], named: set) -> list[str]:
  """Markdown lines: the rows' Hits@1 (mean over seeds) on the questions whose gold answer is
  among the fusion prefix's object names (`named`, from `prefix_names_gold`) and on the
  others, where no row is handed the answer's name except through its evidence."""
  qids = {x["qid"] for run in rows[names[0]] for x in run["records"]}
  return _hits_table(rows, names, (("named in the prefix", qids & named),
                                   ("not named in the prefix", qids - named)),
                     "Hits@1 where the fusion prefix's object names hold a gold answer, and "
                     "elsewhere (mean over seeds)")


def breakdown(rows: dict[str, list[dict]], ds, config=None, coverage=None) -> list[str]:
  """Markdown lines: Hits@1 per (hop count, final relation) of the rows in BREAKDOWN_ROWS that
  ran (mean over their seeds), largest groups first, each row's most repeated answers, and
  Hits@1 split by whether a gold answer is a train answer (`seen_split`, the train split of
  the rows' protocol), how often the answer names a gold one (`contains_split`, the same
  split, with the zero-shot rows), by whether the answer is the topic entity (`topic_split`),
  by whether one KB fact answers (`one_hop_split`, when the `one_hop` row ran), what the router
  cites (`routing_table`, rows that kept their cited slots) and, given the
  rows' `config` (`fusion.objects = "graph"`), by whether the prefix names it
  (`prefix_split`), and given `evidence_coverage`'s records (`coverage`), by what the
  retrieved subgraph holds (`coverage_split`)."""
  by_qid = {q.qid: q for q in ds.questions}
  names = [n for n in BREAKDOWN_ROWS if n in rows]
  if not names:
    return []
  hits = {n: {} for n in names}
  for n in names:
    for run in rows[n]:
      for x in run["records"]:
        hits[n].setdefault(x["qid"], []).append(x["hits"])
  groups = {}
  for qid in hits[names[0]]:
    if qid not in by_qid:
      raise ValueError(f"breakdown: question {qid!r} of the rows is not in {ds.name}")
    q = by_qid[qid]
    groups.setdefault((q.hops, final_relation(q)), []).append(qid)
  out = ["", "## Hits@1 by hop count and final relation (mean over seeds)", "",
         "| hops | final relation | questions | " + " | ".join(names) + " |",
         "|---|---|---|" + "---|" * len(names)]
  for (hops, rel), qids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
    cells = []
    for n in names:
      v = [np.mean(hits[n][q]) for q in qids if q in hits[n]]
      cells.append(f"{np.mean(v):.0f}" if v else "-")
    out.append(f"| {hops} | {rel} | {len(qids)} | " + " | ".join(cells) + " |")
  out += ["", "Most repeated answers (seed 0 or the only run; count of questions):", ""]
  for n in names:
    run = min(rows[n], key=lambda r: r["seed"])
    counts = collections.Counter(x["answer"] for x in run["records"]).most_common(3)
    out.append(f"- {n}: " + ", ".join(f"{a!r} {c}" for a, c in counts))
  protocol = min(rows[names[0]], key=lambda r: r["seed"]).get("protocol", "path")
  seen = train_answers(ds, protocol)
  out += seen_split(rows, by_qid, names, seen)
  out += contains_split(rows, by_qid, names + [n for n in ZERO_SHOT_ROWS if n in rows], seen)
  out += topic_split(rows, by_qid, names)
  out += one_hop_split(rows, names)
  out += routing_table(rows, by_qid)
  if config is not None and config.fusion.objects == "graph":
    qids = sorted({x["qid"] for run in rows[names[0]] for x in run["records"]})
    named, _ = prefix_names_gold(config, ds, [by_qid[q] for q in qids])
    out += prefix_split(rows, names, named)
  if coverage is not None:
    out += coverage_split(rows, names, coverage)
  return out


def write_report(folder: pathlib.Path, ds=None, config=None) -> str:
  """report.md of the rows under `folder`; with `ds` (the rows' dataset) also the breakdown by
  hop count and final relation (`breakdown`; `config`, the rows' configuration, adds the split
  by the prefix's object names; `folder`/COVERAGE_FILE, when `evidence_coverage` wrote it, the
  split by what the retrieved subgraph holds)."""
  rows = {}
  for p in sorted(folder.glob("seed*/*.json")):
    r = json.loads(p.read_text())
    rows.setdefault(r["row"], []).append(r)
  lines = [f"# {folder.name}", "",
           "Hits@1 / EM / F1 / R@5 in points; Δ: paired difference in Hits@1 [95% bootstrap "
           "interval over questions], each question's Hits@1 averaged over the seeds both rows "
           "ran (`seed_paired`).", "",
           "| row | seeds | Hits@1 | EM | F1 | R@5 | s/question | Δ vs graphloom | Δ vs lexicon |",
           "|---|---|---|---|---|---|---|---|---|"]

  def delta(name, ref):
    if ref not in rows or name == ref:
      return "-"
    d = seed_paired(rows[name], rows[ref], seedless=(name in SEEDLESS, ref in SEEDLESS))
    return "-" if d is None else f"{d['delta']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}]"

  for name, runs in rows.items():
    m = [r["metrics"] for r in runs]
    cell = lambda k: ("-" if any(x.get(k) is None for x in m)  # noqa: E731
                      else f"{np.mean([x[k] for x in m]):.1f}")
    lines.append(f"| {name} | {len(runs)} | {cell('hits')} | {cell('em')} | {cell('f1')} | "
                 f"{cell('recall5')} | {np.mean([x['seconds_per_question'] for x in m]):.2f} | "
                 f"{delta(name, 'graphloom')} | {delta(name, 'lexicon')} |")
  if ds is not None:
    cover = folder / COVERAGE_FILE
    coverage = json.loads(cover.read_text())["records"] if cover.exists() else None
    lines += breakdown(rows, ds, config, coverage)
  text = "\n".join(lines) + "\n"
  atomic.atomic_write_text(folder / "report.md", text)
  return text
