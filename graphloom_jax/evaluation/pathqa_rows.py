"""The rows of the PathQuestion / WorldCup2014 comparison (benchmarks/pathqa_rows.py is their
command line): each question of a split answered by `GraphLoom.answer_batch` (open answers) in
a mode or under an evidence control (`system_row`), or by a reader of graph/path_reader.py
(`reader_row`), scored by Hits@1 (`evaluation.answers.hits_at_1`), EM and F1 against the best
gold answer, and R@5 of the answer path's triples among the retrieved ones; `write_report`
gives the paired differences (docs/pathqa.md).
"""

from __future__ import annotations

import json
import pathlib
import statistics
import time

import numpy as np
from absl import logging

from graphloom_jax import atomic
from graphloom_jax.data import pathquestion, wc2014
from graphloom_jax.data.pathqa import readable
from graphloom_jax.evaluation import answers, intervals
from graphloom_jax.evaluation.retrieval_metrics import recall_at_k
from graphloom_jax.graph import canonical, path_reader
from graphloom_jax.pipeline import GraphLoom, controls


def recall_at(retrieved, gold_keys, k: int = 5) -> float:
  """Share of the gold triples' keys among the first k retrieved triples (0 without gold)."""
  return recall_at_k([t.key() for t in retrieved], gold_keys, k) if gold_keys else 0.0


READER_ROWS = {"lexicon": "lexicon", "oracle_path": "oracle"}


CONTROL_ROWS = controls.CONTROLS


def readers():
  """Dataset name -> its reader module (`load(name, root=)`)."""
  return {"pathquestion": pathquestion, "wc2014": wc2014}


def _record(q, text: str, seconds: float, retrieved=None, gold_keys=frozenset()) -> dict:
  """One question's scores; R@5 (`recall5`) only for rows whose answer reads the retrieved
  subgraph (`retrieved` not None), else None: a reader or a no-retrieval mode has no R@5."""
  recall5 = None if retrieved is None else 100.0 * recall_at(retrieved, gold_keys)
  return dict(qid=q.qid, answer=text, gold=list(q.answers),
              **answers.open_answer_scores(text, q.answers), recall5=recall5, seconds=seconds)


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


def system_row(system: GraphLoom, ds, questions, row: str, batch: int, log=logging.info
               ) -> list[dict]:
  """Every question through answer_batch in the mode `row` names, or under the evidence
  control it names (CONTROL_ROWS: GraphLoom with other evidence); per-question records."""
  canon = canonical.Canonicalizer(singularize=system.config.graph.singularize)
  mode = "graphloom" if row in CONTROL_ROWS else row
  graphs, cache = {}, {}

  def graph(q):
    key = (q.topic, q.hops, q.facts)
    if key not in graphs:
      graphs[key] = system.instance_graph(ds.instance_triples(q), instance_id=q.qid)
    return graphs[key]

  partner = shuffled_partners(questions) if row == "shuffled" else {}
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
      reads = mode not in ("no_retrieval", "no_retrieval_tuned")
      records.append(_record(q, a.text, online, a.retrieved if reads else None, gold))
    log(f"  {row}: {len(records)}/{len(questions)} questions, {time.time() - start:.0f}s")
  return records


def metrics(records: list[dict]) -> dict:
  """Means over the questions (R@5 None for rows that read no retrieval)."""
  recall = [r["recall5"] for r in records if r.get("recall5") is not None]
  return dict(questions=len(records),
              **{k: float(np.mean([r[k] for r in records])) for k in ("hits", "em", "f1")},
              recall5=float(np.mean(recall)) if recall else None,
              seconds_per_question=statistics.median(r["seconds"] for r in records))


def paired(a: list[dict], b: list[dict], resamples: int = 10_000, seed: int = 0) -> dict | None:
  """a - b Hits@1 on the questions both answered, with a 95% percentile bootstrap interval."""
  return intervals.paired_difference({r["qid"]: r["hits"] for r in a},
                                     {r["qid"]: r["hits"] for r in b}, resamples, seed)


def write_report(folder: pathlib.Path) -> str:
  rows = {}
  for p in sorted(folder.glob("seed*/*.json")):
    r = json.loads(p.read_text())
    rows.setdefault(r["row"], []).append(r)
  lines = [f"# {folder.name}", "",
           "Hits@1 / EM / F1 / R@5 in points; Δ: paired difference in Hits@1 [95% bootstrap "
           "interval over questions], mean over the seeds both rows ran.", "",
           "| row | seeds | Hits@1 | EM | F1 | R@5 | s/question | Δ vs graphloom | Δ vs lexicon |",
           "|---|---|---|---|---|---|---|---|---|"]

  def delta(name, ref):
    if ref not in rows or name == ref:
      return "-"
    ds = [paired(a["records"], b["records"]) for a in rows[name] for b in rows[ref]
          if a["seed"] == b["seed"] or ref in READER_ROWS]
    ds = [d for d in ds if d]
    if not ds:
      return "-"
    d = ds[0] if len(ds) == 1 else dict(delta=float(np.mean([x["delta"] for x in ds])),
                                        lo=float(np.mean([x["lo"] for x in ds])),
                                        hi=float(np.mean([x["hi"] for x in ds])))
    return f"{d['delta']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}]"

  for name, runs in rows.items():
    m = [r["metrics"] for r in runs]
    cell = lambda k: ("-" if any(x.get(k) is None for x in m)  # noqa: E731
                      else f"{np.mean([x[k] for x in m]):.1f}")
    lines.append(f"| {name} | {len(runs)} | {cell('hits')} | {cell('em')} | {cell('f1')} | "
                 f"{cell('recall5')} | {np.mean([x['seconds_per_question'] for x in m]):.2f} | "
                 f"{delta(name, 'graphloom')} | {delta(name, 'lexicon')} |")
  text = "\n".join(lines) + "\n"
  atomic.atomic_write_text(folder / "report.md", text)
  return text
