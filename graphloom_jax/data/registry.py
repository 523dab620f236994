"""The dataset registry: every dataset that training and evaluation read, as one table.

An entry (`Entry`) names how a split is opened (a `Dataset`: its questions as `Example`s in
split order, and each question's instance graph when the dataset has one), its default split,
the field its breakdown groups by, and its metrics (`Entry.score`: prediction rows -> metrics).
`training.data.load_training_data` and `evaluation.sharded` both read the registry, so adding a
dataset is a reader (in this folder, plus a TFDS builder under `builders/` when it is read
through TFDS) and one entry of `REGISTRY`.

  ds = registry.open_dataset("pathquestion", "validation",
                             registry.Location(root=DIR, config="PQL-3H"))
  ex = ds.examples(0, 8)[0]       # qid, question, gold (what the scorer reads), group, ...
  triples = ds.instance_triples(ex)   # its instance graph's triples (None: the dataset has none)
  registry.score("pathquestion", rows)   # rows: {"text", "choice", "supported", "gold", ...}

Entries:
  scenekb       the embedded benchmark (or one written with build_benchmark --out=DIR): scene
                graphs, WordNet facts as the knowledge source, 4 options, gold triples; every
                mode; trainable
  pathquestion  PathQuestion (PQ-2H, PQ-3H, PQL-2H, PQL-3H) and
  wc2014        WorldCup2014 (WC-1H, WC-2H, WC-M, WC-C): KB neighbourhoods as instance graphs,
                open answers scored by Hits@1, the answer path as gold triples; every mode;
                trainable
  scienceqa, okvqa, mmqa   through their TFDS builders (data/builders), questions only: mode
                "no_retrieval"; not trainable
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import functools
from typing import Any, Callable, Sequence

import numpy as np

from graphloom_jax.evaluation import answers as answer_metrics
from graphloom_jax.evaluation import scienceqa as scienceqa_metrics


@dataclasses.dataclass(frozen=True)
class Example:
  """One question as the pipeline reads it, the trainer teaches it and the scorer scores it."""
  qid: str
  question: str
  gold: dict[str, Any]  # what the entry's `score` compares the prediction with (JSON)
  group: str  # the breakdown key (Entry.group's value), "" for ScienceQA
  options: list[str] | None = None
  # The instance graph's key: examples with the same key read the same graph (a SceneKB
  # scene; for PathQuestion the first question about the same topic entity). None: no graph.
  instance_id: str | None = None
  target: str | None = None  # the answer the trainer teaches (None: not trainable)
  answer_index: int | None = None  # the gold option
  gold_triples: tuple[tuple[str, str, str], ...] = ()  # the supporting facts


class Dataset(abc.ABC):
  """A split as a sequence of Examples; `instance_triples(example)` is its instance graph's
  triples (None: the dataset has none)."""

  name: str
  split: str
  has_graphs: bool = False
  kb_sources: Sequence = ()  # knowledge sources for instance-graph enrichment

  @abc.abstractmethod
  def __len__(self) -> int:
    ...

  @abc.abstractmethod
  def examples(self, start: int, stop: int) -> list[Example]:
    """Examples [start, stop) in split order."""

  def instance_triples(self, example: Example):
    return None


@dataclasses.dataclass(frozen=True)
class Location:
  """Where a dataset's files are and which of its variants to read.
  root: the folder of its files (SceneKB: a build_benchmark --out folder, None the embedded
  copy; PathQuestion / WorldCup2014: the release; TFDS datasets: their official files);
  data_dir: where TFDS files are prepared; config: the variant (PathQuestion "PQ-3H", ...);
  protocol: PathQuestion / WorldCup2014's split protocol ("path" or "line", data/pathqa.py)."""
  root: Any = None
  data_dir: Any = None
  config: str | None = None
  protocol: str = "path"


# ------------------------------------------------------------------------------ SceneKB

class SceneKBData(Dataset):
  """SceneKB through its loader: questions in file order, scene graphs, and the benchmark's
  WordNet facts as the knowledge source for instance-graph enrichment."""

  has_graphs = True

  def __init__(self, split: str, where: Location = Location()):
    from graphloom_jax.data import scenekb
    self.name, self.split = "scenekb", split
    self.kb = scenekb.load(split, root=where.root)
    self.kb_sources = [self.kb.kb_source()]

  def __len__(self):
    return len(self.kb.questions)

  def examples(self, start, stop):
    return [scenekb_example(q) for q in self.kb.questions[start:stop]]

  def instance_triples(self, example):
    return self.kb.scene_graph(example.instance_id)


def scenekb_example(q) -> Example:
  """A SceneKB question (an `mmqa.Question` whose `extra` carries instance_id, options,
  answer_index and gold_triples) as an Example."""
  for key in ("instance_id", "options", "answer_index", "gold_triples"):
    if key not in q.extra:
      raise KeyError(f"question {q.qid!r}: record has no {key!r} (expected the SceneKB extra "
                     "fields)")
  index = int(q.extra["answer_index"])
  options = list(q.extra["options"])
  return Example(q.qid, q.question, {"answers": list(q.answer_texts), "option": index},
                 q.family, options, q.extra["instance_id"],
                 target=q.answer_texts[0] if q.answers else options[index], answer_index=index,
                 gold_triples=tuple(tuple(t) for t in q.extra["gold_triples"]))


# ------------------------------------------------------------------------------ PathQuestion

def _path_reader(name: str):
  from graphloom_jax.data import pathquestion, wc2014
  return {"pathquestion": pathquestion, "wc2014": wc2014}[name]


class PathQAData(Dataset):
  """A PathQuestion / WorldCup2014 split (graphloom_jax.data.pathqa): the KB neighbourhood of
  the topic entity as the instance graph, no knowledge-base enrichment (the graph is already
  the KB), open answers."""

  has_graphs = True

  def __init__(self, name: str, split: str, ds, questions: Sequence):
    self.name, self.split, self.ds, self.questions = name, split, ds, list(questions)
    # Questions with the same topic entity, hop count and carried facts (paraphrases of one
    # path among them) read the same KB neighbourhood: one instance graph, keyed by the first
    # of them in split order.
    first = {}
    for q in self.questions:
      first.setdefault((q.topic, q.hops, q.facts), q.qid)
    self._by_qid = {q.qid: q for q in self.questions}
    self._graph_id = {q.qid: first[(q.topic, q.hops, q.facts)] for q in self.questions}

  @classmethod
  def open(cls, name: str, split: str, where: Location) -> "PathQAData":
    """The split of the release in where.root, variant where.config, under where.protocol."""
    reader = _path_reader(name)
    if where.config not in reader.NAMES:
      raise ValueError(f"dataset {name!r} needs its variant: config {where.config!r} is not "
                       f"one of {reader.NAMES}")
    if where.root is None:
      raise ValueError(f"dataset {name!r} is read from its release files: give the folder "
                       "that holds them")
    ds = reader.load(where.config, root=where.root)
    return cls(name, split, ds, ds.split(split, where.protocol))

  @classmethod
  def of_questions(cls, ds, questions: Sequence) -> "PathQAData":
    """Given questions of a loaded `pathqa.PathQA` as a split."""
    return cls(ds.source.removeprefix("kb:"), "", ds, questions)

  def __len__(self):
    return len(self.questions)

  def question(self, example: Example):
    """The reader's `pathqa.Question` of an example."""
    return self._by_qid[example.qid]

  def examples(self, start, stop):
    return [Example(q.qid, q.question, {"answers": list(q.answers)}, f"{q.hops}-hop",
                    instance_id=self._graph_id[q.qid], target=q.answers[0],
                    gold_triples=tuple((t.subject, t.relation, t.object)
                                       for t in self.ds.gold_triples(q)))
            for q in self.questions[start:stop]]

  def instance_triples(self, example):
    return self.ds.instance_triples(self._by_qid[example.instance_id])


# ------------------------------------------------------------------------------ TFDS datasets

def _scienceqa_example(r: dict) -> Example:
  problem = {k: v for k, v in r.items() if k != "image"}  # pixels stay in the dataset
  question = f"Context: {r['hint']}\n{r['question']}" if r["hint"] else r["question"]
  return Example(r["pid"], question, {"answer": int(r["answer"]), "problem": problem}, "",
                 list(r["choices"]), answer_index=int(r["answer"]))


def _okvqa_example(r: dict) -> Example:
  return Example(str(r["question_id"]), r["question"], {"answers": list(r["answers"])},
                 r["question_type_name"] or r["question_type"])


def _mmqa_example(r: dict) -> Example:
  return Example(r["qid"], r["question"], {"answers": [a["answer"] for a in r["answers"]]},
                 r["type"])


class TFDSData(Dataset):
  """A dataset through its TFDS builder (graphloom_jax.data.builders), prepared under
  where.data_dir from the official files in where.root, read lazily through grain."""

  def __init__(self, name: str, split: str, where: Location, builder: str,
               convert: Callable[[dict], Example]):
    from graphloom_jax.data import builders
    if where.root is None:
      raise ValueError(f"dataset {name!r} is read from its official files: give manual_dir "
                       f"(--manual_dir), the folder that holds them")
    if where.data_dir is None:
      raise ValueError(f"dataset {name!r} needs data_dir, where its TFDS files are prepared")
    self.name, self.split, self._convert = name, split, convert
    self.source = builders.grain_source(builder, split, where.data_dir, manual_dir=where.root)

  def __len__(self):
    return len(self.source)

  def examples(self, start, stop):
    return [self._convert(r) for r in self.source[start:stop]]


# ------------------------------------------------------------------------------ metrics

def _answer_scores(rows: Sequence[dict]) -> dict:
  m = answer_metrics.mean_answer_metrics([r["text"] for r in rows],
                                         [r["gold"]["answers"] for r in rows])
  return {"em": m["em"], "f1": m["f1"]}


def _mc_accuracy(rows: Sequence[dict], key: str) -> float:
  return 100 * float(np.mean([r["choice"] == r["gold"][key] for r in rows]))


def _scenekb_scores(rows):
  return {**_answer_scores(rows), "mc_accuracy": _mc_accuracy(rows, "option")}


def _path_scores(rows):
  """Hits@1 and EM / F1 against the best of the gold answer set, the per-question scores of
  the PathQuestion tables (`evaluation.answers.open_answer_scores`)."""
  per = [answer_metrics.open_answer_scores(r["text"], r["gold"]["answers"]) for r in rows]
  return {"hits_at_1": float(np.mean([s["hits"] for s in per])),
          "em": float(np.mean([s["em"] for s in per])),
          "f1": float(np.mean([s["f1"] for s in per]))}


def _okvqa_scores(rows):
  return {"vqa_accuracy": answer_metrics.mean_vqa_accuracy(
      [r["text"] for r in rows], [r["gold"]["answers"] for r in rows])["accuracy"]}


def _scienceqa_problem(gold: dict):
  from graphloom_jax.data.scienceqa import Problem
  p = dict(gold["problem"])
  p["image"] = p.pop("image_file") or None
  p["choices"] = tuple(p["choices"])
  return Problem(**p)


def _scienceqa_scores(rows):
  official = scienceqa_metrics.scienceqa_accuracy(
      [r["choice"] for r in rows], [_scienceqa_problem(r["gold"]) for r in rows])
  return {"accuracy": official["average"], "scienceqa": official}


def _by_group(rows: Sequence[dict], fn: Callable[[list[dict]], dict]) -> dict:
  groups = collections.defaultdict(list)
  for r in rows:
    groups[r["group"]].append(r)
  return {g: {**fn(rs), "count": len(rs)} for g, rs in sorted(groups.items())}


# ------------------------------------------------------------------------------ the table

@dataclasses.dataclass(frozen=True)
class Entry:
  """One dataset. open(split, where) -> Dataset; scores(rows) -> the metrics of a list of
  prediction rows; group: the name of the breakdown (`by_<group>` in the metrics; None: none);
  trainable: its examples carry targets and gold triples (training reads its "train" and
  "validation" splits)."""
  open: Callable[[str, Location], Dataset]
  default_split: str
  scores: Callable[[Sequence[dict]], dict]
  group: str | None = None
  trainable: bool = False
  check: Callable[[Any], None] | None = None  # check(config): refuses settings it cannot use

  def check_config(self, config) -> None:
    """Raises ValueError naming the config key when `config` cannot read this dataset."""
    if self.check is not None:
      self.check(config)

  def score(self, rows: Sequence[dict]) -> dict:
    """count, supported (share of answers whose claims all passed verification), the
    entry's metrics and, with a group, the same per group (`by_<group>`)."""
    out = {"count": len(rows), "supported": 100 * float(np.mean([r["supported"] for r in rows])),
           **self.scores(rows)}
    if self.group is not None:
      out[f"by_{self.group}"] = _by_group(rows, self.scores)
    return out


def _check_path_config(config) -> None:
  if config.graph.singularize:
    raise ValueError("config.graph.singularize=True would rename KB entities to singular forms "
                     "('Hard Times' -> 'hard time') that are not their answers; set it to False "
                     "(configs/pathquestion.py does)")


def _tfds(name: str, builder: str, convert) -> Callable[[str, Location], Dataset]:
  return lambda split, where: TFDSData(name, split, where, builder, convert)


REGISTRY: dict[str, Entry] = {
    "scenekb": Entry(SceneKBData, "test", _scenekb_scores, "family", trainable=True),
    "pathquestion": Entry(functools.partial(PathQAData.open, "pathquestion"), "test",
                          _path_scores, "hops", trainable=True, check=_check_path_config),
    "wc2014": Entry(functools.partial(PathQAData.open, "wc2014"), "test", _path_scores, "hops",
                    trainable=True, check=_check_path_config),
    "scienceqa": Entry(_tfds("scienceqa", "scienceqa", _scienceqa_example), "test",
                       _scienceqa_scores),
    "okvqa": Entry(_tfds("okvqa", "okvqa", _okvqa_example), "val", _okvqa_scores,
                   "question_type"),
    "mmqa": Entry(_tfds("mmqa", "mmqa/questions", _mmqa_example), "dev", _answer_scores,
                  "type"),
}
DATASETS = tuple(REGISTRY)


def entry(name: str) -> Entry:
  if name not in REGISTRY:
    raise ValueError(f"unknown dataset {name!r}; expected one of {DATASETS}")
  return REGISTRY[name]


def open_dataset(name: str, split: str | None = None, where: Location = Location()) -> Dataset:
  """The split `split` (None: the entry's default split) of the dataset `name`."""
  e = entry(name)
  return e.open(split or e.default_split, where)


def score(name: str, rows: Sequence[dict]) -> dict:
  """The metrics of the dataset `name` from prediction rows (predictions.jsonl), percentages:
    every dataset   count, supported (share of answers whose claims all passed verification)
    scenekb         em, f1 (MMQA scorer), mc_accuracy (4-way), by_family
    pathquestion, wc2014   hits_at_1, em, f1 (against the best gold answer), by_hops
    mmqa            em, f1 (official MultimodalQA scorer), by_type
    okvqa           vqa_accuracy (official VQA accuracy), by_question_type
    scienceqa       accuracy and the official breakdowns (NAT SOC LAN TXT IMG NO G1-6 G7-12)
  """
  if not rows:
    raise ValueError("score: no predictions")
  return entry(name).score(rows)
