"""MetricWriter: one JSON line and one TensorBoard scalar per value, hyperparameters once, and
nothing at all on a process other than 0; GRAIL training writes its InfoNCE curves with it."""

import json
import math

import jax
import pytest

import fakes
from graphloom_jax.training import metric_writers


def test_scalars_go_to_jsonl_and_tensorboard(tmp_path):
  w = metric_writers.MetricWriter(tmp_path)
  assert w.tensorboard  # the [test] extra carries tensorboardX
  w.write_hparams({"lr": 0.1, "phase": {"steps": 3}})
  w.write_scalars(0, {"val": 2.5})
  w.write_scalars(10, {"train": 1.25, "val": float("nan")})
  w.close()
  lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert lines == [{"step": 0, "val": 2.5}, {"step": 10, "train": 1.25, "val": None}]
  assert json.loads((tmp_path / "hparams.json").read_text()) == {"lr": 0.1,
                                                                 "phase": {"steps": 3}}
  events = fakes.tensorboard_scalars(tmp_path / "tensorboard")
  assert [tag for tag, *_ in events].count("hparams/text_summary") == 1  # the text, once
  got = sorted(e for e in events if e[0] != "hparams/text_summary")
  assert got[:2] == [("train", 10, 1.25), ("val", 0, 2.5)]
  assert got[2][:2] == ("val", 10) and math.isnan(got[2][2])


def test_only_process_zero_writes(tmp_path, monkeypatch):
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  w = metric_writers.MetricWriter(tmp_path / "w")
  w.write_hparams({"lr": 0.1})
  w.write_scalars(1, {"val": 1.0})
  w.close()
  assert not w.active and not w.tensorboard and not (tmp_path / "w").exists()


def test_without_tensorboardx_only_the_jsonl_is_written(tmp_path, monkeypatch):
  monkeypatch.setattr(metric_writers, "summary_writer", lambda folder, **_: None)
  w = metric_writers.MetricWriter(tmp_path)
  w.write_scalars(3, {"val": 1.0})
  w.close()
  assert not w.tensorboard and not (tmp_path / "tensorboard").exists()
  assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 3, "val": 1.0}


@pytest.mark.parametrize("bad", [{"val": "x"}, {"val": None}])
def test_a_non_number_names_itself(tmp_path, bad):
  w = metric_writers.MetricWriter(tmp_path)
  with pytest.raises(TypeError, match="metric 'val': expected a number"):
    w.write_scalars(0, bad)
  w.close()
  assert not (tmp_path / "metrics.jsonl").exists()  # nothing half-written
