"""The SceneKB tables report from the finished rows (evaluation/scenekb_rows.py): results.json,
report.md and PNG plots (main table, ablation bars, reliability diagrams, sensitivity curves,
learning curves). `python -m benchmarks.scenekb_tables --report` writes it."""

from __future__ import annotations

import itertools
import json
import pathlib
import statistics

import numpy as np
from absl import logging

from graphloom_jax.evaluation import intervals
from graphloom_jax.pipeline.types import NO_EVIDENCE_MODES


def _pyplot():
  """pyplot on the file-only Agg backend (the report writes PNGs, it shows nothing)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


COLUMNS = (("mc_accuracy", "MC acc"), ("em", "EM"), ("f1", "F1"), ("h_rate", "H-Rate"),
           ("falsity", "falsity"), ("text_h_rate", "H-Rate, text"),
           ("text_falsity", "falsity, text"), ("abstention", "abstain"), ("recall5", "R@5"),
           ("seconds_per_question", "s/question"))


def _load_rows(out: pathlib.Path) -> dict[str, list[dict]]:
  """{split-n folder: [row results]}."""
  found = {}
  for folder in sorted((out / "rows").glob("*")):
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("seed*/*.json"))]
    cal = [json.loads(p.read_text()) for p in sorted(folder.glob("calibration-*.json"))]
    found[folder.name] = (rows, cal)
  return found


def _agg(rows: list[dict], name: str) -> dict | None:
  """Mean and sample standard deviation (n - 1) over seeds of a row's metrics."""
  runs = [r for r in rows if r["name"] == name]
  if not runs:
    return None
  out = {"seeds": len(runs)}
  for key, _ in COLUMNS + (("supported", ""), ("cited_h_rate", "")):
    # A no-evidence mode has no R@5 (rows written before 2026-12-07 scored the subgraph that
    # the pipeline retrieves for its verifier).
    vals = [r["metrics"][key] for r in runs if r["metrics"].get(key) is not None
            and not (key == "recall5" and r.get("mode") in NO_EVIDENCE_MODES)]
    if vals:
      out[key] = statistics.fmean(vals)
      out[key + "_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
  return out


def _correct(record: dict, metric: str) -> float:
  if metric == "mc_accuracy":
    return 100.0 * (record["choice"] == record["answer_index"])
  return float(record["em"])  # the records hold EM in points already


# Claim rates: (numerator, denominator) record fields, pooled over questions (docs/evaluation.md)
RATIOS = {"h_rate": ("unsupported_claims", "claims"),
          "text_h_rate": ("text_unsupported", "text_claims")}
PAIRED = ("mc_accuracy", "em", "text_h_rate")  # the paired differences the tables print


def _ratio_difference(sides, common, metric, resamples, seed) -> dict | None:
  """A claim rate of the row minus the reference's, each pooled over the paired questions and
  its side's runs (sum of the numerators / sum of the denominators, in %), with a 95% percentile
  bootstrap interval over questions (the same resampling as `paired_difference`)."""
  num, den = RATIOS[metric]
  order = sorted(common)
  counts = np.zeros((2, 2, len(order)))  # side (row, reference), numerator / denominator, q
  for side, runs in enumerate(sides):
    for r in runs:
      got = {x["qid"]: x for x in r["records"]}
      if any(num not in got[q] for q in order):
        return None  # rows written before the field existed
      counts[side] += np.array([[got[q][num] for q in order], [got[q][den] for q in order]])

  def rate(c):
    n, d = c[..., 0, :].sum(-1), c[..., 1, :].sum(-1)
    return 100.0 * np.divide(n, d, out=np.zeros_like(n), where=d > 0)

  est = rate(counts[0]) - rate(counts[1])
  idx = np.random.default_rng(seed).integers(0, len(order), size=(resamples, len(order)))
  boot = rate(counts[0][:, idx].transpose(1, 0, 2)) - rate(counts[1][:, idx].transpose(1, 0, 2))
  lo, hi = np.percentile(boot, [2.5, 97.5])
  return dict(delta=float(est), lo=float(lo), hi=float(hi),
              seeds=min(len(sides[0]), len(sides[1])), questions=len(order))


def paired_difference(rows: list[dict], name: str, metric: str, reference: str = "graphloom",
                      resamples: int = 10_000, seed: int = 0,
                      match_seeds: bool = True) -> dict | None:
  """Row minus reference on the same questions, in points, with a 95% percentile bootstrap
  interval over questions.

  For each seed s that ran both rows, d_{q,s} = x_{q,s}(row) - x_{q,s}(reference), with
  x = 100 * [choice = gold option] (metric mc_accuracy) or EM in points (metric em). A question's
  difference is its mean over those seeds, d_q = mean_s d_{q,s}; the estimate is mean_q d_q,
  and the interval is the 2.5th and 97.5th percentiles of mean_q d_q over `resamples`
  resamplings of the questions with replacement. Only the questions every one of these runs
  answered are paired (None if there are none). Questions are resampled, seeds are not: the
  interval is the spread of the test set, with the seeds averaged in. For mc_accuracy also
  `same_choice`: the percentage of those (question, seed) pairs on which the row picks the
  reference's option, right or wrong (an evidence control that leaves it near 100 shows that
  the evidence does not decide the choice). For a claim rate (`RATIOS`: h_rate, text_h_rate)
  the estimate is the difference of the two rates pooled over the paired questions and seeds,
  and the interval resamples the questions the same way (`_ratio_difference`); None for rows
  that lack the rate's fields.

  match_seeds=False is for a row trained apart from the reference (a tuned text baseline, whose
  seed s shares nothing with the heads' seed s): every run of each side counts, d_q =
  mean_s x_{q,s}(row) - mean_t x_{q,t}(reference) over each side's own seeds, and same_choice
  is over every (row run, reference run) couple. With the same seeds on both sides it is the
  seed-matched estimate. `seeds` is the smaller side's count, `seeds_each` both.
  """
  if match_seeds:
    by_seed = {}
    for r in rows:
      if r["name"] in (name, reference):
        by_seed.setdefault(r["seed"], {})[r["name"]] = r
    pairs = [(v[name], v[reference]) for _, v in sorted(by_seed.items()) if len(v) == 2]
    sides = ([a for a, _ in pairs], [b for _, b in pairs])
  else:
    sides = tuple(sorted((r for r in rows if r["name"] == n), key=lambda r: r["seed"])
                  for n in (name, reference))
    pairs = list(itertools.product(*sides))
  if not sides[0] or not sides[1]:
    return None
  common = set.intersection(*({x["qid"] for x in r["records"]} for side in sides for r in side))
  if not common:
    return None
  if metric in RATIOS:
    got = _ratio_difference(sides, common, metric, resamples, seed)
    return None if got is None else dict(got, seeds_each=[len(sides[0]), len(sides[1])])
  order = [x["qid"] for x in sides[1][0]["records"] if x["qid"] in common]
  vals = [np.array([[_correct(got[q], metric) for q in order]
                    for got in ({y["qid"]: y for y in r["records"]} for r in side)], np.float64)
          for side in sides]  # [runs, questions] per side
  # seed-matched: the mean of the per-seed differences (the same number, summed in that order)
  d = np.mean(vals[0] - vals[1], axis=0) if match_seeds else vals[0].mean(0) - vals[1].mean(0)
  lo, hi = intervals.bootstrap_interval(d, resamples, seed)
  out = dict(delta=float(d.mean()), lo=lo, hi=hi, seeds=min(len(sides[0]), len(sides[1])),
             seeds_each=[len(sides[0]), len(sides[1])], questions=len(d))
  if metric == "mc_accuracy":
    same = []
    for row, ref in pairs:
      got = {x["qid"]: x for x in row["records"]}
      same += [got[x["qid"]]["choice"] == x["choice"] for x in ref["records"]
               if x["qid"] in common]
    out["same_choice"] = 100.0 * float(np.mean(same))
  return out


def compare_files(row_files, reference_files, match_seeds: bool = True) -> dict[str, dict]:
  """`paired_difference` of two sets of row files from any workdirs (for example two sets of
  heads answering the same questions): each file is one row JSON of `run_row` (one seed; the
  files of a side are paired with the other side's by their "seed", or, with
  match_seeds=False, for systems trained apart, each question is averaged over each side's own
  seeds, which may differ in number: `paired_difference`'s match_seeds). Returns
  {"mc_accuracy": ..., "em": ..., "text_h_rate": ...}, each None where nothing pairs. A file
  that is missing, not a row, or a seed given twice on one side is an error naming the file."""
  rows = []
  for side, files in (("row", row_files), ("reference", reference_files)):
    if not files:
      raise ValueError(f"compare: no {side} files given")
    seen = {}
    for f in files:
      path = pathlib.Path(f)
      try:
        r = json.loads(path.read_text())
      except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"compare: cannot read the row file {path} ({e})") from None
      if not isinstance(r, dict) or not isinstance(r.get("records"), list) or "seed" not in r:
        raise ValueError(f"compare: {path} is not a row file (a run_row JSON with 'seed' and "
                         "'records')")
      if r["seed"] in seen:
        raise ValueError(f"compare: {path} and {seen[r['seed']]} are both seed {r['seed']} of "
                         f"the {side} side")
      seen[r["seed"]] = path
      rows.append(dict(r, name=side))
  return {m: paired_difference(rows, "row", m, reference="reference", match_seeds=match_seeds)
          for m in PAIRED}


def _fmt_delta(p: dict | None) -> str:
  if p is None:
    return "-"
  return f"{p['delta']:+.1f} [{p['lo']:+.1f}, {p['hi']:+.1f}]"


def _fmt(a: dict, key: str) -> str:
  if key not in a:
    return "-"
  if key == "seconds_per_question":
    return f"{a[key]:.2f}"
  if a["seeds"] > 1:
    return f"{a[key]:.1f} ± {a[key + '_std']:.1f}"
  return f"{a[key]:.1f}"


def _table(aggs: dict[str, dict], paired: bool = False) -> list[str]:
  """One line per aggregated row; with `paired`, its paired differences from graphloom too."""
  extra = (["ΔMC vs graphloom [95% CI]", "ΔEM vs graphloom [95% CI]",
            "ΔH-Rate, text [95% CI]", "same option as graphloom %"] if paired else [])
  lines = ["| row | seeds | " + " | ".join([c for _, c in COLUMNS] + extra) + " |",
           "|---|---|" + "---|" * (len(COLUMNS) + len(extra))]
  for n, a in aggs.items():
    cells = [_fmt(a, k) for k, _ in COLUMNS]
    if paired:
      cells += [_fmt_delta(a["paired"][m]) if "paired" in a else "" for m in PAIRED]
      mc = a.get("paired", {}).get("mc_accuracy")
      cells.append(f"{mc['same_choice']:.0f}" if mc else "")
    lines.append(f"| {n} | {a['seeds']} | " + " | ".join(cells) + " |")
  return lines


def _bars(path, aggs: dict[str, dict], names, reference="graphloom"):
  """The rows' paired differences from the reference (all seeds both ran), 95% CI whiskers."""
  plt = _pyplot()
  got = [(n, aggs[n]["paired"]) for n in names
         if n in aggs and aggs[n].get("paired", {}).get("mc_accuracy") is not None]
  if not got:
    return None
  fig, ax = plt.subplots(figsize=(8, 4.5))
  x = range(len(got))
  for off, (key, label) in zip((-0.2, 0.2), (("mc_accuracy", "MC acc"), ("em", "EM"))):
    d = [p[key] for _, p in got]
    ax.bar([i + off for i in x], [v["delta"] for v in d], width=0.4, label=label,
           yerr=[[v["delta"] - v["lo"] for v in d], [v["hi"] - v["delta"] for v in d]],
           capsize=3)
  ax.axhline(0, color="k", lw=0.8)
  seeds = sorted({p["mc_accuracy"]["seeds"] for _, p in got})
  # one seed count for all rows goes in the title; several, under each row's name
  ax.set_xticks(list(x), [n if len(seeds) == 1 else f"{n}\n{p['mc_accuracy']['seeds']} seeds"
                          for n, p in got], rotation=30, ha="right")
  ax.set_ylabel(f"Δ points vs {reference}")
  title = "paired difference, 95% bootstrap CI"
  if len(seeds) == 1:
    title += f" ({seeds[0]} seed{'s' if seeds[0] > 1 else ''})"
  ax.set_title(title, fontsize=10)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def _reliability(path, cal):
  plt = _pyplot()
  if not cal:
    return None
  # Above: utility against gate per bin; below: how many slots each bin holds.
  fig, (ax, hist) = plt.subplots(2, 1, figsize=(5, 6), sharex=True,
                                 gridspec_kw={"height_ratios": (3, 1)})
  ax.plot([0, 1], [0, 1], "k--", lw=0.8)
  width = 0.8 / (len(cal) * max(len(cal[0]["counts"]), 1))
  for k, c in enumerate(cal):
    pts = [(p, y, n) for p, y, n in zip(c["confidence"], c["accuracy"], c["counts"]) if n > 0]
    line, = ax.plot([p for p, *_ in pts], [y for _, y, _ in pts], "o-",
                    label=f"{c['name']} (ECE {c['ece']:.3f}, n = {int(sum(c['counts'])):,})")
    hist.bar([p + (k - (len(cal) - 1) / 2) * width for p, *_ in pts], [n for *_, n in pts],
             width=width, color=line.get_color())
  ax.set_ylabel("slot utility (holds a gold triple)")
  ax.legend(fontsize=8)
  hist.set_yscale("log")
  hist.set_ylabel("slots per bin")
  hist.set_xlabel("router gate (first answer step)")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def _sensitivity(path, rows):
  plt = _pyplot()
  ref = _agg([r for r in rows if r["seed"] == 0], "graphloom")
  if ref is None:
    return None
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  drawn = False
  keys = ("graph.tau_edge", "graph.tau_kb", "eval.tau_eval", "eval.tau_ent")  # row labels
  for k, key in enumerate(keys):
    pts = [(1.0, ref)]
    for f in (0.8, 1.2):
      a = _agg(rows, f"{key} x{f}")
      if a is not None:
        pts.append((f, a))
    if len(pts) == 1:
      continue
    drawn = True
    pts.sort(key=lambda p: p[0])
    # Each threshold's points are shifted a little along x so that equal curves stay visible;
    # whiskers: the standard deviation over seeds where a point has more than one.
    shift = (k - (len(keys) - 1) / 2) * 0.012
    for ax, metric in zip(axes, ("mc_accuracy", "em")):
      ax.errorbar([f + shift for f, _ in pts], [a[metric] for _, a in pts],
                  yerr=[a.get(metric + "_std", 0.0) for _, a in pts], fmt="o-", capsize=3,
                  label=key, alpha=0.85)
  if not drawn:
    plt.close(fig)
    return None
  for ax, (metric, label) in zip(axes, (("mc_accuracy", "MC accuracy"), ("em", "EM"))):
    ax.set_xlabel("threshold / default (points shifted apart)")
    ax.set_ylabel(label)
    low, high = ax.get_ylim()
    mid = ref[metric]
    ax.set_ylim(min(low, mid - 5), max(high, mid + 5))  # at least ±5 points: no zoom on noise
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def _learning(path, workdirs):
  plt = _pyplot()
  curves = []
  for w in workdirs:
    log = w / "metrics.jsonl"
    if not log.exists():
      continue
    recs = []
    for line in log.read_text().splitlines():
      try:
        recs.append(json.loads(line))
      except json.JSONDecodeError:
        continue
    train = [(r["step"], r["loss"]) for r in recs if "loss" in r]
    val = [(r["step"], r["s_val"], r["s_ans"], r.get("s_faith")) for r in recs if "s_val" in r]
    curves.append((w.name, train, val))
  if not curves:
    return None, []
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
  for name, train, val in curves:
    axes[0].plot([s for s, _ in train], [v for _, v in train], label=name)
    axes[1].plot([s for s, *_ in val], [v for _, v, *_ in val], "o-", label=f"{name} S_val")
    axes[1].plot([s for s, *_ in val], [a for _, _, a, _ in val], "x--", label=f"{name} S_ans")
  axes[0].set_xlabel("step")
  axes[0].set_ylabel("training loss")
  axes[1].set_xlabel("step")
  axes[1].set_ylabel("validation")
  for ax in axes:
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path, curves


def _prompt_selection(out: pathlib.Path) -> list[str]:
  """The report's section on the baseline prompt chosen on validation (none if not run)."""
  sel = out / "prompt_selection.json"
  if not sel.exists():
    return []
  s = json.loads(sel.read_text())
  md = [f"## Baseline prompt (chosen on {s['questions']} validation questions)", "",
        "| style / mode | MC acc | EM | F1 | H-Rate |", "|---|---|---|---|---|"]
  for k, m in s["results"].items():
    md.append(f"| {k} | {m['mc_accuracy']:.1f} | {m['em']:.1f} | {m['f1']:.1f} | "
              f"{m['h_rate']:.1f} |")
  return md + ["", f"Chosen: **{s['chosen']}** (Flat-RAG EM, then F1, then no-retrieval EM "
               "and F1).", ""]


# Row groups trained apart from the heads (their seed s shares nothing with the heads' seed s):
# their paired differences average each side over all of its own seeds.
APART = ("tuned",)


def _group_tables(rows, groups: dict) -> tuple[list[str], dict]:
  """Each row group's table (with paired differences outside `main`) and the aggregates."""
  md, summary = [], {}
  for group, spec in groups.items():
    names = [n for n, *_ in spec]
    if group != "main":
      names = ["graphloom"] + names
    aggs = {n: a for n in names if (a := _agg(rows, n)) is not None}
    if group != "main":
      for n, a in aggs.items():
        if n != "graphloom":
          a["paired"] = {m: paired_difference(rows, n, m, match_seeds=group not in APART)
                         for m in PAIRED}
    summary.update(aggs)
    lines = _table(aggs, paired=group != "main")
    if len(lines) > 2 + (group != "main"):
      md += [f"### {group}", ""] + lines + [""]
      if group != "main":
        md += ["Δ: the row minus graphloom on the same questions and seeds, in points, with a "
               "95% bootstrap interval over questions (`scenekb_report.paired_difference`)."
               + (" The rows here are trained apart from the heads: each question is averaged "
                  "over all seeds of each side (`match_seeds=False`)." if group in APART else ""),
               ""]
      if group == "main" and any(a["seeds"] > 1 for a in aggs.values()):
        md += ["Rows with several seeds: mean ± sample standard deviation over the training "
               "seeds (the heads). The text rows read no heads and decode greedily: one run.",
               ""]
  return md, summary


FAMILY_GROUPS = ("main", "tuned", "controls")  # the groups the per-family table lists


def _family_table(rows, groups: dict) -> list[str]:
  """MC acc / EM / H-Rate over the answer text per question family, mean over the seeds of
  each row of `FAMILY_GROUPS` present (the order of `groups`)."""
  names = [n for g in FAMILY_GROUPS for n, *_ in groups.get(g, [])]
  runs = {n: [r for r in rows if r["name"] == n and r.get("by_family")] for n in names}
  runs = {n: rs for n, rs in runs.items() if rs}
  if not runs:
    return []
  fams = sorted(next(iter(runs.values()))[0]["by_family"])

  def cell(rs, fam):
    vals = []
    for key in ("mc_accuracy", "em", "text_h_rate"):
      got = [r["by_family"][fam][key] for r in rs
             if r["by_family"].get(fam, {}).get(key) is not None]
      vals.append(f"{statistics.fmean(got):.0f}" if got else "-")
    return " / ".join(vals)

  n = {next(iter(runs.values()))[0]["by_family"][f].get("n", "?") for f in fams}
  md = ["### per question family: MC acc / EM / H-Rate of the answer text", "",
        f"Mean over the row's seeds; {'/'.join(str(x) for x in sorted(n, key=str))} questions "
        "per family and seed.", "",
        "| row | seeds | " + " | ".join(fams) + " |", "|---|---|" + "---|" * len(fams)]
  for name, rs in runs.items():
    md.append(f"| {name} | {len(rs)} | " + " | ".join(cell(rs, f) for f in fams) + " |")
  return md + [""]


def write(out: pathlib.Path, workdirs: list[pathlib.Path], groups: dict) -> pathlib.Path:
  """report.md (and its figures) in `out` from the rows there; `groups`: the row groups of
  `scenekb_rows.GROUPS` (name -> rows), in the order the report lists them."""
  found = _load_rows(out)
  md = [f"# SceneKB tables ({out.name})", "",
        "Made by `python -m benchmarks.scenekb_tables --report` from the rows under `rows/`; "
        "how each row was run is in `graphloom_jax/evaluation/scenekb_rows.py` (`GROUPS`). "
        "H-Rate, falsity and abstention are defined in `docs/evaluation.md` (rows made before "
        "SceneKB v3 hold v2's H-Rate, the share of answers with a false claim, and no "
        "falsity).", ""]
  md += _prompt_selection(out)
  summary = {}
  for split, (rows, cal) in found.items():
    tables, aggs = _group_tables(rows, groups)
    summary[split] = {"rows": aggs, "calibration": cal}
    md += [f"## {split}", ""] + tables + _family_table(rows, groups)
    plots = {
        "ablations": _bars(out / f"{split}-ablations.png", aggs,
                           [n for g in ("components", "features", "knowledge")
                            for n, *_ in groups[g]]),
        "reliability": _reliability(out / f"{split}-reliability.png", cal),
        "sensitivity": _sensitivity(out / f"{split}-sensitivity.png", rows),
    }
    for c in cal:
      md.append(f"- router `{c['name']}` ({c['heads']}): gate ECE (15 bins) {c['ece']:.3f} over "
                f"{c['questions']} questions, useful-slot rate {c['useful_slot_rate']:.3f}")
    md += [f"![{k}]({p.name})" for k, p in plots.items() if p is not None] + [""]
  png, curves = _learning(out / "learning-curves.png", workdirs)
  if curves:
    md += ["## Learning curves", ""]
    for name, train, val in curves:
      md += [f"- `{name}`: " + ", ".join(f"step {s}: S_val {v:.3f} (S_ans {a:.3f})"
                                         for s, v, a, _ in val)]
    md += ["", f"![learning curves]({png.name})", ""]
  (out / "results.json").write_text(json.dumps(summary, indent=1))
  path = out / "report.md"
  path.write_text("\n".join(md) + "\n")
  logging.info(f"wrote {path}")
  return path
