"""The rows of the SceneKB comparison (benchmarks/scenekb_tables.py is their command line): every
row a mode of `GraphLoom.answer_batch` with its switches (pipeline/ablation.py), an evidence
control (pipeline/controls.py) or the symbolic reader (graph/lookup.py), scored with the
definitions of docs/evaluation.md. `GROUPS` is the row table; `run_row` answers one row and
returns its metrics, per-family figures and per-question records; `row_seeds` / `check_done`
tie each finished row to the heads folder it read.
"""

from __future__ import annotations

import filecmp
import json
import pathlib
import statistics
import time

import jax.numpy as jnp
import numpy as np
from absl import logging

from graphloom_jax import atomic, defaults
from graphloom_jax.data import scenekb
from graphloom_jax.evaluation import answers, calibration, hallucination
from graphloom_jax.graph import canonical, lookup
from graphloom_jax.models import heads as heads_lib
from graphloom_jax.pipeline import GraphLoom, controls, decode, instance, prompts
from graphloom_jax.pipeline.types import NO_EVIDENCE_MODES, TUNED_MODES
from graphloom_jax.training import data


class Scale(float):
  """An override that multiplies the configured value (the sensitivity rows)."""

  def __repr__(self):
    return f"x{float(self)}"


# The thresholds the sensitivity rows scale: row label -> config key. The labels name the keys
# as the committed rows were written (before `eval` was split into correct / verify / decode).
SENSITIVITY = {"graph.tau_edge": "graph.tau_edge", "graph.tau_kb": "graph.tau_kb",
               "eval.tau_eval": "correct.tau_eval", "eval.tau_ent": "verify.tau_ent"}
MAIN = [("symbolic", "symbolic", {}), ("no_retrieval", "no_retrieval", {}),
        ("flat_rag", "flat_rag", {}), ("graphloom", "graphloom", {})]


TUNED = [("no_retrieval_tuned", "no_retrieval_tuned", {}),
         ("flat_rag_tuned", "flat_rag_tuned", {})]


# Modes that read no heads: one run stands for every seed.
HEADLESS = ("symbolic", "no_retrieval", "flat_rag")


GROUPS = {
    "main": MAIN,
    "tuned": TUNED,
    # Evidence controls (pipeline/controls.py): "control" is not a config key, run_row reads it.
    "controls": [("shuffled evidence", "graphloom", {"control": "shuffled"}),
                 ("no evidence", "graphloom", {"control": "none"}),
                 ("no evidence, no object names", "graphloom", {"control": "blind"}),
                 ("oracle evidence", "graphloom", {"control": "oracle"})],
    "components": [
        ("-interleaved", "graphloom", {"retrieval.second_round": "none"}),
        ("-corrective", "graphloom", {"ablation.corrective": False}),
        # Both settings explicitly: the configs differ in their default (verify.revise).
        ("-revision", "graphloom", {"verify.revise": False}),
        ("+revision", "graphloom", {"verify.revise": True}),
        ("-router", "graphloom", {"ablation.router": "uniform"}),
        ("-KG-JSA++", "routed_text", {}),
        ("-prefix", "graphloom", {"ablation.prefix": False}),
    ],
    "features": [(f"-{f}", "graphloom", {"ablation.drop_features": f})
                 for f in ("retrieval_score", "context", "conf_ext", "centrality")],
    "knowledge": [("-KB", "graphloom", {"graph.kb_hops": 0}),
                  ("flat_rag -KB", "flat_rag", {"graph.kb_hops": 0})],
    "sensitivity": [(f"{label} x{f}", "graphloom", {key: Scale(f)})
                    for label, key in SENSITIVITY.items() for f in (0.8, 1.2)],
}


def _set(config, dotted: str, value):
  *path, name = dotted.split(".")
  (defaults.lookup(config, ".".join(path)) if path else config)[name] = value


def configured(base, overrides: dict):
  config = base.copy_and_resolve_references()
  for key, value in overrides.items():
    if isinstance(value, Scale):
      value = float(defaults.lookup(config, key)) * float(value)
    _set(config, key, value)
  return config


def recall_at(retrieved, gold, k: int = 5) -> float:
  top = {t.key() for t in retrieved[:k]}
  gold = {tuple(g) for g in gold}
  return len(top & gold) / len(gold) if gold else 0.0


def _online(a) -> float:
  return sum(v for k, v in a.timings.items() if k not in ("instance_graph", "options"))


def control_evidence(system: GraphLoom, questions, graphs, control: str, pairing, cache: dict
                     ) -> list[list]:
  """The subgraph each question reads under an evidence control (pipeline/controls.py):
  shuffled, the subgraph retrieved for its partner (`pairing`, same family) over the partner's
  instance graph; none, nothing; oracle, its gold supporting triples."""
  if control in ("none", "blind"):
    return [[] for _ in questions]
  if control == "oracle":
    canon = canonical.Canonicalizer()
    return [controls.oracle_triples(q.extra["gold_triples"],
                                    graphs[q.extra["instance_id"]].triples, canon)
            for q in questions]
  if control != "shuffled":
    raise ValueError(f"control={control!r}; expected one of {controls.CONTROLS}")
  out = []
  for q in questions:
    p = pairing[q.qid]
    if p.qid not in cache:
      cache[p.qid] = system.prepare([p.question], [graphs[p.extra["instance_id"]]])[0] \
          .subgraph.edges
    out.append(cache[p.qid])
  return out


def symbolic_row(system: GraphLoom, kb, questions, truth) -> dict:
  """The symbolic reader (graph.lookup) over the pipeline's instance graph of each question
  with the question's structured query: MC accuracy is its expected accuracy (uniform among
  the options that satisfy the query, all four when none does), the open answer is the best
  supported entity."""
  canon = canonical.Canonicalizer()
  verifier = hallucination.HallucinationVerifier(truth)
  records, start = [], time.time()
  for q in questions:
    if "query" not in q.extra:
      raise ValueError(f"question {q.qid}: no structured query; the symbolic row needs a "
                       "benchmark drawn with build_benchmark --version=3")
    _, triples, _ = instance.scenekb(kb, q.extra["instance_id"], config=system.config)
    index = lookup.TripleIndex(triples, name=canon)
    t0 = time.perf_counter()
    ch = lookup.choose(q.extra["query"], q.extra["options"], index)
    text = lookup.answer(q.extra["query"], index) or ""
    seconds = time.perf_counter() - t0
    paper = hallucination.assess(verifier, q.qid, text, [t.key() for t in triples])
    records.append(dict(
        qid=q.qid, family=q.family, answer=text, gold=q.answer_texts, choice=ch.pool()[0],
        mc_expected=ch.expected_correct(q.extra["answer_index"]),
        answer_index=q.extra["answer_index"],
        hallucinated=verifier.check_answer(q.qid, text).hallucinated, **_paper_fields(paper),
        em=answers.mean_answer_metrics([text], [q.answer_texts])["em"], seconds=seconds))
  metrics = dict(**_common_metrics(records, questions, _expected_correct),
                 wall_seconds=time.time() - start)
  return dict(metrics=metrics, by_family=_by_family(records, _expected_correct), records=records)


def run_row(system: GraphLoom, kb, questions, mode: str, truth, batch: int, log=logging.info,
            control: str | None = None) -> dict:
  """One row: every question through answer_batch (under an evidence control if given);
  metrics and per-question records."""
  if mode == "symbolic":
    return symbolic_row(system, kb, questions, truth)
  graphs = {}
  got = []
  start = time.time()
  pairing = {}
  if control == "shuffled":
    partner = controls.partners([q.family for q in questions], seed=0)
    pairing = {q.qid: questions[p] for q, p in zip(questions, partner)}
  cache: dict = {}
  for s in range(0, len(questions), batch):
    qs = questions[s:s + batch]
    for q in qs + [pairing[q.qid] for q in qs if q.qid in pairing]:
      i = q.extra["instance_id"]
      if i not in graphs:
        graphs[i] = system.instance_graph(kb.scene_graph(i), instance_id=i)
    evidence = (control_evidence(system, qs, graphs, control, pairing, cache)
                if control else None)
    read = [graphs[q.extra["instance_id"]] for q in qs]
    if control == "blind":
      read = [controls.without_objects(g) for g in read]
    got += system.answer_batch([q.question for q in qs], read,
                               options=[q.extra["options"] for q in qs], mode=mode,
                               evidence=evidence)
    log(f"  {len(got)}/{len(questions)} questions, {time.time() - start:.0f}s")
  verifier = hallucination.HallucinationVerifier(truth)
  records = [_answer_record(verifier, q, a, mode) for q, a in zip(questions, got)]
  n_cited = sum(len(r["cited"]) for r in records)
  metrics = dict(
      **_common_metrics(records, questions, _chose_gold),
      recall5=_mean_recall(records),
      supported=100 * float(np.mean([r["supported"] for r in records])),
      revised=int(sum(r["revised"] for r in records)),
      cited_h_rate=(100 * sum(r["cited_unsupported"] for r in records) / n_cited
                    if n_cited else None),
      wall_seconds=time.time() - start)
  return dict(metrics=metrics, by_family=_by_family(records, _chose_gold), records=records)


def _answer_record(verifier, q, a, mode: str) -> dict:
  """One answered question's record: its answer, choice, claims and retrieval."""
  verdict = verifier.check_answer(q.qid, a.text)
  cited = verifier.check_claims(q.extra["instance_id"],
                                [c.triple.key() for c in a.evidence]) if a.evidence else None
  paper = hallucination.assess(
      verifier, q.qid, a.text, [t.key() for t in given_evidence(a, mode)],
      cited=[c.triple.key() for c in a.evidence] if mode == "graphloom" else ())
  return dict(
      qid=q.qid, family=q.family, answer=a.text, gold=q.answer_texts, choice=a.choice,
      answer_index=q.extra["answer_index"], hallucinated=verdict.hallucinated,
      **_paper_fields(paper),
      em=answers.mean_answer_metrics([a.text], [q.answer_texts])["em"],
      recall5=(None if mode in NO_EVIDENCE_MODES
               else recall_at(a.retrieved, q.extra["gold_triples"])),
      supported=a.supported,
      revised=a.revised, seconds=_online(a),
      cited=[list(c.triple.key()) for c in a.evidence],
      cited_unsupported=(sum(not c.supported for c in cited.claims) if cited else 0))


def _mean_recall(records: list[dict]) -> float | None:
  """R@5 in points over the answers whose mode read retrieved evidence (None for the
  no-evidence modes: the pipeline retrieves for their verifier, not for their decoder)."""
  got = [r["recall5"] for r in records if r["recall5"] is not None]
  return 100 * float(np.mean(got)) if got else None


def _chose_gold(record: dict) -> bool:
  return record["choice"] == record["answer_index"]


def _expected_correct(record: dict) -> float:
  return record["mc_expected"]


def _common_metrics(records, questions, correct) -> dict:
  """Every row's metrics: MC accuracy (mean of `correct(record)`), EM / F1 of the
  answers, the paper's claim rates and the median seconds per question."""
  return dict(
      questions=len(questions),
      mc_accuracy=100 * float(np.mean([correct(r) for r in records])),
      **{k: v for k, v in answers.mean_answer_metrics(
          [r["answer"] for r in records], [q.answer_texts for q in questions]).items()
         if k in ("em", "f1")},
      **_paper_metrics(records),
      seconds_per_question=statistics.median(r["seconds"] for r in records))


def _by_family(records, correct) -> dict:
  """MC accuracy, EM and the claim rates of each question family."""
  out = {}
  for fam in sorted({r["family"] for r in records}):
    rs = [r for r in records if r["family"] == fam]
    out[fam] = dict(n=len(rs), mc_accuracy=100 * float(np.mean([correct(r) for r in rs])),
                    em=float(np.mean([r["em"] for r in rs])), **_paper_metrics(rs))
  return out


def given_evidence(a, mode: str) -> list:
  """The triples an answer's mode was given to read: the retrieved subgraph (GraphLoom's slot
  bank is built from it, Flat-RAG's prompt holds it), the routed triples (routed_text's
  prompt), nothing (no_retrieval and its trained variant)."""
  if mode in NO_EVIDENCE_MODES:
    return []
  if mode == "routed_text":
    return [c.triple for c in a.evidence]
  return list(a.retrieved)


def _paper_fields(paper) -> dict:
  """A record's claim counts: over all of the answer's claims, and over those of its text
  alone (`text_*`: the bound question claim and the asserted evidence lines, GraphLoom's cited
  triples left out, so that a mode that cites is compared with one that does not on the same
  kind of claim)."""
  text = [c for c in paper.claims if c.origin != "cited"]
  return dict(claims=len(paper.claims), abstained=paper.abstained,
              unsupported_claims=sum(not c.supported for c in paper.claims),
              false_claims=sum(not c.true for c in paper.claims),
              text_claims=len(text), text_unsupported=sum(not c.supported for c in text),
              text_false=sum(not c.true for c in text))


def _paper_metrics(records) -> dict:
  """The paper's H-Rate (unsupported claims / claims), falsity (false claims / claims),
  the same two over the answer text's claims alone (`_paper_fields`), abstention, all in %, and
  the share of answers with a false claim (v2's H-Rate)."""
  n = sum(r["claims"] for r in records)
  text = {}
  if all("text_claims" in r for r in records):  # rows written before 2026-12-06 lack them
    t = sum(r["text_claims"] for r in records)
    text = dict(text_h_rate=100 * sum(r["text_unsupported"] for r in records) / t if t else 0.0,
                text_falsity=100 * sum(r["text_false"] for r in records) / t if t else 0.0)
  return dict(h_rate=100 * sum(r["unsupported_claims"] for r in records) / n if n else 0.0,
              falsity=100 * sum(r["false_claims"] for r in records) / n if n else 0.0,
              **text,
              abstention=100 * float(np.mean([r["abstained"] for r in records])),
              answer_false_rate=100 * float(np.mean([r["hallucinated"] for r in records])),
              h_rate_definition="paper")


def select_rows(names):
  out = []
  for n in names:
    if n in GROUPS:
      out += [(g, *row) for g in [n] for row in GROUPS[n]]
    else:
      found = [(g, *row) for g, rows in GROUPS.items() for row in rows if row[0] == n]
      if not found:
        raise ValueError(f"--rows: unknown row or group {n!r}; groups {sorted(GROUPS)}")
      out += found
  return out


def base_system(base, heads_dir, root) -> GraphLoom:
  """The decoder, embedder and KB every row's system shares."""
  system = GraphLoom.from_config(base, heads=heads_dir)
  system.kb_sources = [scenekb.load("train", root=root).kb_source()]
  return system


def variant(system: GraphLoom, config, heads_dir, mode: str = "graphloom"):
  """A system for one row: `heads_dir` holds GraphLoom's heads, or the adapter of a tuned
  mode."""
  heads, adapters = None, {}
  if heads_dir and mode in TUNED_MODES:
    adapters = {mode: heads_lib.load_heads(heads_dir, config, system.decoder,
                                           system.embed_dim, kind="tuned_prefix")}
  elif heads_dir:
    heads = heads_lib.load_heads(heads_dir, config, system.decoder, system.embed_dim,
                                 kind="graphloom")
  return GraphLoom(config, system.decoder, system.embedder, heads, writer=system.writer,
                   kb_sources=system.kb_sources, wordnet=system.wordnet, adapters=adapters)


def select_prompt(base, root, out: pathlib.Path, num: int, batch: int, styles=()) -> dict:
  """baseline.prompt on validation: for each style, Flat-RAG and no-retrieval EM / F1 / MC;
  the chosen style has the best Flat-RAG (EM, F1), then no-retrieval (EM, F1)."""
  kb = scenekb.load("validation", root=root)
  truth = hallucination.GroundTruth.load(root)
  questions = scenekb.round_robin(kb.questions, num)
  system = base_system(base, None, root)
  path = out / "prompt_selection.json"
  results = {}
  if path.exists():
    old = json.loads(path.read_text())
    if old["questions"] == len(questions):
      results = old["results"]
  for style in styles or prompts.STYLES:
    config = configured(base, {"baseline.prompt": style})
    sys_ = variant(system, config, None)
    for mode in ("flat_rag", "no_retrieval"):
      logging.info(f"prompt {style}, {mode}")
      r = run_row(sys_, kb, questions, mode, truth, batch)
      results[f"{style}/{mode}"] = r["metrics"]
      logging.info(f"  {json.dumps(r['metrics'])}")
  done = [s for s in prompts.STYLES if f"{s}/flat_rag" in results
          and f"{s}/no_retrieval" in results]
  best = max(done, key=lambda s: tuple(results[f"{s}/{m}"][k] for m in ("flat_rag", "no_retrieval")
                                       for k in ("em", "f1")))
  summary = dict(split="validation", questions=len(questions), results=results, chosen=best)
  atomic.atomic_write_json(path, summary)
  logging.info(f"chosen baseline prompt: {best}")
  return summary


def adapter_folders(pairs) -> dict[str, list[str]]:
  """--adapters mode=folder pairs -> mode -> folders in seed order."""
  out: dict[str, list[str]] = {}
  for pair in pairs:
    mode, sep, folder = pair.partition("=")
    if not sep or mode not in TUNED_MODES or not folder:
      raise ValueError(f"--adapters: {pair!r}; expected MODE=FOLDER with MODE one of "
                           f"{TUNED_MODES}")
    out.setdefault(mode, []).append(folder)
  return out


def row_seeds(mode: str, heads: list[str], only: list[int] = ()) -> list[tuple[int, str | None]]:
  """(seed, heads folder) runs of a row: seed N is the N-th --heads folder in every group; the
  text baselines read no heads, so their one run (seed 0) stands for every seed. `only` keeps
  the listed seeds."""
  if any(not 0 <= i < max(len(heads), 1) for i in only):
    raise ValueError(f"--seeds={list(only)}: seeds are indices into --heads "
                         f"({len(heads)} given)")
  runs = [(0, None)] if mode in HEADLESS else list(enumerate(heads))
  return [r for r in runs if not only or r[0] in only]


def check_done(path: pathlib.Path, heads_dir):
  """A finished row counts for seed N only if it read the heads that --heads names N-th: the
  same folder, or a folder whose heads.safetensors has the same bytes (a committed copy)."""
  done = json.loads(path.read_text()).get("heads")
  if heads_dir is None or done is None:
    return
  a, b = pathlib.Path(done), pathlib.Path(heads_dir)
  if a.resolve() == b.resolve():
    return
  fa, fb = a / "heads.safetensors", b / "heads.safetensors"
  if fa.exists() and fb.exists():
    if filecmp.cmp(fa, fb, shallow=False):
      return
    raise ValueError(f"{path} was run with heads {done}, not {heads_dir}: give --heads in "
                         "the order of the finished seeds, or move the row away")
  logging.info(f"{path}: made from heads {done}, which is not here to compare with {heads_dir}; "
        "kept")


def gate_calibration(system, kb, questions, seq_len, name, heads_dir) -> dict:
  """Router gates at the first step of the gold answer against slot utility: ECE (15 bins) and
  the reliability curve."""
  g, u, m = gate_stats(system, kb, questions, seq_len)
  r = calibration.reliability(g, u, n_bins=15, mask=m)
  return dict(name=name, heads=heads_dir, ece=float(r.ece), counts=r.counts.tolist(),
              confidence=np.nan_to_num(r.confidence, nan=-1).tolist(),
              accuracy=np.nan_to_num(r.accuracy, nan=-1).tolist(),
              useful_slot_rate=float(u[m].mean()), questions=len(questions))


def gate_stats(system, kb, questions, seq_len):
  """First-answer-step gates [N, M], utilities and validity from the gold-answer rows."""
  feats = data.featurize(system, kb, questions, seq_len)
  out = []
  for s in range(0, len(questions), 8):
    batch = {k: jnp.asarray(v[s:s + 8]) for k, v in feats.items()}
    _, gates, _ = decode.score_rows(system._heads_def, system._heads_state,
                                    system._backbone_def, system._backbone_state, batch,
                                    first_layer=system.first_layer)
    first = np.argmax(feats["loss_mask"][s:s + 8], axis=1)
    out.append(np.take_along_axis(np.asarray(gates), first[:, None, None], axis=1)[:, 0])
  g = np.concatenate(out)
  return g, feats["slot_utility"], feats["slot_valid"]
