"""The training workdir survives kills at awkward moments, refuses a second trainer, keeps a
finished run's result, and keeps metrics.jsonl and TensorBoard with each step once."""

import json

import jax
import numpy as np
import pytest

import fakes
from graphloom_jax.training import trainer
from test_trainer import setup  # noqa: F401  (the shared tiny-config fixture)


class Killed(Exception):
  pass


def _trainer(setup, workdir, cfg=None, **kwargs):
  base, dec, tr, va = setup[:4]
  kwargs.setdefault("log", lambda *_: None)
  return trainer.Trainer(cfg or base, dec.model, tr, va, workdir, progress=False, **kwargs)


def _train(setup, workdir, cfg=None, **kwargs):
  t = _trainer(setup, workdir, cfg, **kwargs)
  try:
    return t, t.train()
  finally:
    t.close()


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def _records(workdir):
  return [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished(setup, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("finished")
  t, result = _train(setup, workdir)
  return t, result, workdir


def test_kill_between_best_and_latest_checkpoint_resumes(setup, finished, tmp_path,
                                                         monkeypatch):
  full, full_result, _ = finished
  real_save = trainer.Trainer._save

  def save(self, manager):
    if manager is self.latest and self.step == 6:  # best/6 is written, checkpoints/6 is not
      raise Killed()
    real_save(self, manager)

  monkeypatch.setattr(trainer.Trainer, "_save", save)
  with pytest.raises(Killed):
    _train(setup, tmp_path)
  monkeypatch.undo()
  resumed, result = _train(setup, tmp_path)
  assert resumed.step == 6
  for a, b in zip(_leaves(full.params), _leaves(resumed.params)):
    np.testing.assert_array_equal(a, b)
  assert result == pytest.approx(full_result)


def test_second_trainer_on_the_same_workdir_fails_at_once(setup, tmp_path):
  first = _trainer(setup, tmp_path)
  try:
    with pytest.raises(trainer.WorkdirBusyError, match=f"{tmp_path} is in use by another "
                       "trainer"):
      _trainer(setup, tmp_path)
  finally:
    first.close()
  _trainer(setup, tmp_path).close()  # free again once the first has closed


def test_rerunning_a_finished_run_keeps_its_result(setup, finished):
  _, result, workdir = finished
  before = _records(workdir)
  again, again_result = _train(setup, workdir)
  assert again.step == 6 and result and again_result == result
  assert _records(workdir) == before


def test_rerunning_an_early_stopped_run_does_not_train_on(setup, tmp_path, monkeypatch):
  cfg = setup[0].copy_and_resolve_references()
  cfg.train.eval_every = 2
  cfg.train.patience = 1
  scores = iter([0.5, 0.4, 0.9, 0.9])
  monkeypatch.setattr(trainer.Trainer, "evaluate", lambda self, arrays=None: {
      "s_ans": 0.0, "s_faith": 0.0, "s_val": next(scores)})
  t, result = _train(setup, tmp_path, cfg)
  assert t.step == 4 and result["s_val"] == 0.4
  again, again_result = _train(setup, tmp_path, cfg)
  assert again.step == 4 and again_result == result


def test_torn_last_metrics_line_dropped_with_a_warning(setup, finished, tmp_path):
  import shutil

  _, result, source = finished
  shutil.copytree(source, tmp_path / "w")
  path = tmp_path / "w" / "metrics.jsonl"
  good = _records(tmp_path / "w")
  with open(path, "ab") as f:
    f.write(b'{"step": 7, "lo\xc3')  # a kill in the middle of a line (and of a character)
  messages = []
  _, again = _train(setup, tmp_path / "w", log=messages.append)
  assert _records(tmp_path / "w") == good and again == result
  assert any("metrics.jsonl line 5" in m and "torn" in m for m in messages), messages


def test_corrupt_metrics_line_in_the_middle_is_an_error(setup, finished, tmp_path):
  import shutil

  _, _, source = finished
  shutil.copytree(source, tmp_path / "w")
  path = tmp_path / "w" / "metrics.jsonl"
  lines = path.read_text().splitlines()
  lines[1] = lines[1][:10]
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(ValueError, match="metrics.jsonl line 2: not a JSON record"):
    _train(setup, tmp_path / "w")


def test_tensorboard_trimmed_on_resume(setup, finished, tmp_path):
  cfg = setup[0].copy_and_resolve_references()
  cfg.train.log_every = 1
  cfg.train.checkpoint_every = 4

  def kill(step):
    if step == 5:  # step 5 is logged after the step-4 checkpoint, then lost
      raise Killed()

  with pytest.raises(Killed):
    _train(setup, tmp_path, cfg, on_step=kill)
  _train(setup, tmp_path, cfg)
  # TensorBoard orders a folder's events by step, whichever file they are in.
  losses = sorted((s, v) for tag, s, v in fakes.tensorboard_scalars(tmp_path / "tensorboard")
                  if tag == "loss")
  assert [s for s, _ in losses] == [1, 2, 3, 4, 5, 6]
  want = [(r["step"], r["loss"]) for r in _records(tmp_path) if "loss" in r]
  np.testing.assert_allclose([v for _, v in losses], [v for _, v in want], rtol=1e-6)
