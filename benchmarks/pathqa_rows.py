r"""Rows of the PathQuestion / WorldCup2014 comparison: each question of a split answered by
`GraphLoom.answer_batch` (open answers) in a mode, or under an evidence control, scored by Hits@1
(`evaluation.answers.hits_at_1`), EM and F1 against the best gold answer, and R@5 of the answer
path's triples among the retrieved ones. One JSON per row under
--workdir/rows/<dataset>-<protocol>-<split>-<n>/seed<seed>/, resumable (a finished row is skipped);
`--report` writes report.md beside them with paired differences against GraphLoom and the
lexicon reader (graphloom_jax.graph.path_reader) on the same questions.

  python -m benchmarks.pathqa_rows --config=configs/pathquestion.py \
      --data=pathquestion --data_config=PQL-3H --data_dir=DIR --heads=HEADS \
      --rows=lexicon,no_retrieval,flat_rag,graphloom,shuffled,none,oracle --workdir=OUT

Rows: `lexicon` and `oracle_path` (the readers of graph/path_reader, fitted on train), any
answering mode of `pipeline.types` (`graphloom` needs --heads, a tuned mode --adapters), and the
evidence controls of GraphLoom (`shuffled`: the subgraph retrieved for a question about another
topic entity, over that question's instance graph; `none`: no evidence; `blind`: no evidence
and no entity names in the fusion prefix; `oracle`: the answer path's triples only). Without an
image, the fusion prefix's object tokens are the instance graph's entity names (the first
`fusion.max_objects` in canonical order).
"""

from __future__ import annotations

import json
import pathlib
import statistics
import time

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from graphloom_jax import atomic
from graphloom_jax.data import pathquestion, wc2014
from graphloom_jax.data.pathqa import readable
from graphloom_jax.evaluation import answers
from graphloom_jax.graph import canonical, path_reader
from graphloom_jax.pipeline import GraphLoom, controls


def _define_flags():
  """The command line's flags, defined only when this file runs as a script: importing it
  (tests do) defines none, so it never collides with other modules' flags."""
  global _CONFIG, _DATA, _DATASET, _DIR, _PROTOCOL, _SPLIT, _LIMIT, _HEADS, _ADAPTERS, _ROWS, \
      _SEED, _BATCH, _OUT, _REPORT
  _CONFIG = config_flags.DEFINE_config_file("config", "configs/pathquestion.py",
                                            "GraphLoom config (decoder, thresholds)")
  _DATA = flags.DEFINE_enum("data", "pathquestion", ["pathquestion", "wc2014"], "benchmark")
  _DATASET = flags.DEFINE_string("data_config", "PQL-3H", "dataset: PQ-2H ... WC-C")
  _DIR = flags.DEFINE_string("data_dir", None, "folder with the release files", required=True)
  _PROTOCOL = flags.DEFINE_enum("protocol", "path", ["path", "line"], "split protocol")
  _SPLIT = flags.DEFINE_enum("split", "test", ["validation", "test"], "split")
  _LIMIT = flags.DEFINE_integer("num_examples", 0, "first N questions of the split (0: all)")
  flags.DEFINE_alias("limit", "num_examples")
  _HEADS = flags.DEFINE_string("heads", None, "trained GraphLoom heads (folder)")
  _ADAPTERS = flags.DEFINE_list("adapters", [], "mode=folder of a trained text adapter")
  _ROWS = flags.DEFINE_list("rows", ["lexicon", "no_retrieval", "flat_rag", "graphloom"],
                            "rows to run")
  _SEED = flags.DEFINE_integer("seed", 0, "training seed of the heads (a label for the rows)")
  _BATCH = flags.DEFINE_integer("batch", 8, "questions per answer_batch call")
  _OUT = flags.DEFINE_string("workdir", "runs/pathqa_rows", "output folder")
  flags.DEFINE_alias("out", "workdir")
  _REPORT = flags.DEFINE_bool("report", False, "only write report.md from the rows present")


READER_ROWS = {"lexicon": "lexicon", "oracle_path": "oracle"}
CONTROL_ROWS = controls.CONTROLS


def _readers():
  return {"pathquestion": pathquestion, "wc2014": wc2014}


def recall_at(retrieved, gold_keys, k: int = 5) -> float:
  top = {t.key() for t in retrieved[:k]}
  return len(top & gold_keys) / len(gold_keys) if gold_keys else 0.0


def _record(q, text: str, seconds: float, retrieved=None, gold_keys=frozenset()) -> dict:
  """One question's scores; R@5 (`recall5`) only for rows whose answer reads the retrieved
  subgraph (`retrieved` not None), else None: a reader or a no-retrieval mode has no R@5."""
  em, f1 = answers.best_answer_metrics(text, q.answers)
  recall5 = None if retrieved is None else 100.0 * recall_at(list(retrieved), gold_keys)
  return dict(qid=q.qid, answer=text, gold=list(q.answers), hits=100.0 * answers.hits_at_1(
      text, q.answers), em=100.0 * em, f1=100.0 * f1, recall5=recall5, seconds=seconds)


def reader_row(ds, questions, reader: str, protocol: str) -> list[dict]:
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


def system_row(system: GraphLoom, ds, questions, row: str, batch: int, log=print) -> list[dict]:
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
  got = {r["qid"]: r["hits"] for r in b}
  d = np.array([r["hits"] - got[r["qid"]] for r in a if r["qid"] in got], np.float64)
  if not len(d):
    return None
  idx = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)))
  lo, hi = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
  return dict(delta=float(d.mean()), lo=float(lo), hi=float(hi), questions=len(d))


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


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  ds = _readers()[_DATA.value].load(_DATASET.value, root=_DIR.value)
  questions = ds.split(_SPLIT.value, _PROTOCOL.value)
  questions = questions[:_LIMIT.value] if _LIMIT.value else questions
  folder = pathlib.Path(_OUT.value) / "rows" / (
      f"{_DATASET.value}-{_PROTOCOL.value}-{_SPLIT.value}-{len(questions)}")
  if _REPORT.value:
    print(write_report(folder))
    return
  seed_dir = folder / f"seed{_SEED.value}"
  seed_dir.mkdir(parents=True, exist_ok=True)
  system = None
  for row in _ROWS.value:
    path = seed_dir / f"{row}.json"
    if path.exists():
      print(f"{row}: done already ({path})")
      continue
    start = time.time()
    if row in READER_ROWS:
      records = reader_row(ds, questions, READER_ROWS[row], _PROTOCOL.value)
    else:
      if system is None:
        adapters = dict(a.split("=", 1) for a in _ADAPTERS.value)
        system = GraphLoom.from_config(_CONFIG.value, heads=_HEADS.value, adapters=adapters,
                                       kb_sources=[])
      records = system_row(system, ds, questions, row, _BATCH.value)
    result = dict(row=row, seed=_SEED.value, dataset=_DATASET.value, protocol=_PROTOCOL.value,
                  split=_SPLIT.value, heads=_HEADS.value, metrics=metrics(records),
                  wall_seconds=time.time() - start, records=records)
    atomic.atomic_write_text(path, json.dumps(result, indent=1) + "\n")
    print(f"{row}: Hits@1 {result['metrics']['hits']:.1f} EM {result['metrics']['em']:.1f} "
          f"({result['wall_seconds']:.0f}s)", flush=True)
  print(write_report(folder))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
