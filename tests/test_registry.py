"""The dataset registry (graphloom_jax.data.registry) that training and evaluation both read:
the PathQuestion entry's examples against the reader, its Hits@1 / EM / F1 computed by hand, a
dataset added as one reader plus one entry and read by featurisation and by the sharded
evaluation, and `launch.evaluate` on the PathQuestion fixture."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import pathquestion, registry
from graphloom_jax.data.pathqa import readable
from graphloom_jax.evaluation import sharded
from graphloom_jax.graph.triples import Triple
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import GraphLoom
from graphloom_jax.training import data

from fakes import HashEmbed

ROOT = pathlib.Path(__file__).resolve().parents[1]
PQ = ROOT / "tests" / "data" / "pathquestion"


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_path_examples_are_the_readers_questions(split):
  ds = pathquestion.load("PQ-2H", root=PQ)
  questions = ds.split(split)
  got = registry.open_dataset("pathquestion", split, registry.Location(root=PQ,
                                                                       config="PQ-2H"))
  examples = got.examples(0, len(got))
  assert len(got) == len(questions) and got.has_graphs and not got.kb_sources
  first_of_path = {}
  for ex, q in zip(examples, questions):
    assert (ex.qid, ex.question, ex.gold["answers"], ex.target) == (
        q.qid, q.question, list(q.answers), q.answers[0])
    assert ex.options is None and ex.group == "2-hop"
    # the gold triples are the answer path's hops, in readable names
    p = q.path
    assert ex.gold_triples == tuple((readable(p[i]), readable(p[i + 1]), readable(p[i + 2]))
                                    for i in range(0, len(p) - 2, 2))
    # questions with one topic entity and hop count read one KB neighbourhood: they share
    # the instance graph of the first of them
    first = first_of_path.setdefault((q.topic, q.hops, q.facts), q)
    assert ex.instance_id == first.qid
    assert got.instance_triples(ex) == ds.instance_triples(first)


def test_path_datasets_refuse_bad_locations_and_singular_names():
  with pytest.raises(ValueError, match="config 'PQ-9H' is not one of"):
    registry.open_dataset("pathquestion", "test", registry.Location(root=PQ, config="PQ-9H"))
  with pytest.raises(ValueError, match="give the folder"):
    registry.open_dataset("wc2014", "test", registry.Location(config="WC-1H"))
  with pytest.raises(FileNotFoundError, match="PQL-3H.txt"):
    registry.open_dataset("pathquestion", "test", registry.Location(root=PQ, config="PQL-3H"))
  with pytest.raises(ValueError, match="unknown dataset 'webqsp'"):
    registry.open_dataset("webqsp")
  cfg = tiny.get_config()
  with pytest.raises(ValueError, match="singularize"):
    registry.entry("wc2014").check_config(cfg)
  registry.entry("scenekb").check_config(cfg)


def test_path_scores_by_hand():
  gold = {"answers": ["london", "greater london"]}
  rows = [dict(text="The London.", gold=gold, group="2-hop", supported=True),
          dict(text="greater london area", gold=gold, group="2-hop", supported=False),
          dict(text="", gold=gold, group="3-hop", supported=False)]
  got = registry.score("pathquestion", rows)
  # "the london." normalises to "london" (articles and punctuation go): a hit, EM 1, F1 1;
  # "greater london area" against "greater london": precision 2/3, recall 1, F1 0.8, no hit;
  # the empty answer scores nothing
  assert got["hits_at_1"] == pytest.approx(100 / 3)
  assert got["em"] == pytest.approx(100 / 3)
  assert got["f1"] == pytest.approx(100 * 1.8 / 3)
  assert got["count"] == 3 and got["supported"] == pytest.approx(100 / 3)
  assert got["by_hops"]["2-hop"] == pytest.approx(
      {"hits_at_1": 50.0, "em": 50.0, "f1": 90.0, "count": 2})
  assert got["by_hops"]["3-hop"]["count"] == 1
  with pytest.raises(ValueError, match="no predictions"):
    registry.score("wc2014", [])


# ------------------------------------------------------------------------------ a new dataset

class ToyData(registry.Dataset):
  """A dataset of one JSON file: [{"qid", "question", "answer", "facts": [[s, r, o], ...],
  "gold": [[s, r, o], ...]}]; each question's facts are its instance graph."""

  has_graphs = True

  def __init__(self, split, where):
    self.name, self.split = "toy", split
    self.rows = [r for r in json.loads(pathlib.Path(where.root, "toy.json").read_text())
                 if r["split"] == split]

  def __len__(self):
    return len(self.rows)

  def examples(self, start, stop):
    return [registry.Example(r["qid"], r["question"], {"answers": [r["answer"]]}, "",
                             instance_id=r["qid"], target=r["answer"],
                             gold_triples=tuple(map(tuple, r["gold"])))
            for r in self.rows[start:stop]]

  def instance_triples(self, example):
    row = next(r for r in self.rows if r["qid"] == example.instance_id)
    return [Triple(s, r, o, 0.9, "toy") for s, r, o in row["facts"]]


def _toy_rows():
  people = [("ada", "paris"), ("bob", "rome"), ("cy", "oslo"), ("di", "lima")]
  return [{"qid": f"toy:{i}", "split": "train" if i < 3 else "validation",
           "question": f"where does {p} live?", "answer": c,
           "facts": [[p, "lives in", c], [p, "likes", "tea"], [c, "is in", "europe"]],
           "gold": [[p, "lives in", c]]} for i, (p, c) in enumerate(people)]


def test_a_dataset_is_one_reader_and_one_entry(tmp_path, monkeypatch):
  (tmp_path / "toy.json").write_text(json.dumps(_toy_rows()))
  monkeypatch.setitem(registry.REGISTRY, "toy", registry.Entry(
      ToyData, "validation", registry.REGISTRY["pathquestion"].scores, trainable=True))
  cfg = tiny.get_config()
  cfg.train.data, cfg.train.data_root = "toy", str(tmp_path)
  dec = decoder_lib.from_config(cfg.model)
  # training: the features of the entry's train and validation splits
  tr, va = data.load_training_data(cfg, dec, tmp_path / "features", embedder=HashEmbed(),
                                   log=lambda *_: None)
  assert tr["tokens"].shape[0] == 3 and va["tokens"].shape[0] == 1
  assert not any(k.startswith("mc_") for k in tr)
  assert (tr["slot_utility"].sum(-1) > 0).all()  # the gold fact is a slot marked useful
  # evaluation: the same entry through the shard plan and the registry's metrics
  system = GraphLoom(cfg, dec, HashEmbed(), kb_sources=[])
  ds = registry.open_dataset("toy", None, registry.Location(root=tmp_path))
  plan = sharded.make_plan(ds, num_examples=0, batch_size=1, mode="flat_rag", heads=None,
                           config=cfg)
  ev = sharded.Evaluation(tmp_path / "eval", plan)
  ev.publish_plan(writer=True)
  ev.run(lambda exs, first: sharded.answer_shard(system, ds, exs, "flat_rag", first), ds,
         progress=False)
  metrics = ev.gather()
  rows = [json.loads(l) for l in (tmp_path / "eval" / sharded.PREDICTIONS).read_text()
          .splitlines()]
  assert [r["qid"] for r in rows] == ["toy:3"] and metrics["count"] == 1
  assert metrics == {**metrics, **registry.score("toy", rows)} and "by_hops" not in metrics
  # the evidence read is the toy question's instance graph
  assert {t["subject"] for t in rows[0]["retrieved"]} <= {"di", "lima"}


# ------------------------------------------------------------------------------ the launcher

def test_launch_evaluate_reads_pathquestion(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  args = [sys.executable, "-m", "launch.evaluate", "--config=configs/tiny.py",
          "--config.model.max_seq_len=1024", "--config.model.arch.max_position_embeddings=1024",
          "--heads=random", "--dataset=pathquestion", "--data_config=PQ-2H",
          f"--manual_dir={PQ}", "--split=train", "--batch_size=4", "--progress=false"]
  refused = subprocess.run(args + [f"--workdir={tmp_path / 'refused'}"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
  assert refused.returncode != 0 and "singularize" in refused.stderr
  out = tmp_path / "pq"
  done = subprocess.run(args + ["--config.graph.singularize=false", f"--workdir={out}"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stderr[-4000:]
  rows = [json.loads(l) for l in (out / sharded.PREDICTIONS).read_text().splitlines()]
  questions = pathquestion.load("PQ-2H", root=PQ).split("train")
  assert [r["qid"] for r in rows] == [q.qid for q in questions]
  metrics = json.loads((out / sharded.METRICS).read_text())
  assert metrics["dataset"] == "pathquestion" and metrics["count"] == len(questions)
  assert metrics == {**metrics, **registry.score("pathquestion", rows)}
  assert [r["gold"]["answers"] for r in rows] == [list(q.answers) for q in questions]
