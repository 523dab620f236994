"""Scalar metrics as the training loops write them: a JSON line per record and TensorBoard events.

`MetricWriter(workdir)` appends `{"step": ..., **scalars}` to WORKDIR/metrics.jsonl and, with the
[tensorboard] extra (tensorboardX), writes the same scalars to WORKDIR/tensorboard; the
hyperparameters go once, as a JSON text summary ("hparams") and WORKDIR/hparams.json. Only
process 0 writes (`jax.process_index() == 0`); on other processes every method is a no-op, so
a multi-process job writes each file once. `tensorboard --logdir WORKDIR/tensorboard` opens the
events.
"""

import json
import math
import pathlib

import jax

from graphloom_jax import atomic, optional


def summary_writer(folder, **kwargs):
  """A tensorboardX SummaryWriter on `folder`, or None when the [tensorboard] extra is absent."""
  if not optional.available("tensorboardX"):
    return None
  return optional.require("tensorboardX", "TensorBoard events").SummaryWriter(str(folder),
                                                                              **kwargs)


def _number(key, v) -> float:
  try:
    return float(v)
  except (TypeError, ValueError):
    raise TypeError(f"metric {key!r}: expected a number, got {v!r}") from None


class MetricWriter:
  """Process 0's metrics.jsonl + TensorBoard writer under `workdir` (see the module docstring)."""

  def __init__(self, workdir, *, jsonl_name: str = "metrics.jsonl"):
    self.active = jax.process_index() == 0
    self.workdir = pathlib.Path(workdir)
    self.jsonl = self.workdir / jsonl_name
    self._tb = None
    if self.active:
      self.workdir.mkdir(parents=True, exist_ok=True)
      self._tb = summary_writer(self.workdir / "tensorboard")

  @property
  def tensorboard(self) -> bool:
    """Whether TensorBoard events are written (process 0 with tensorboardX installed)."""
    return self._tb is not None

  def write_scalars(self, step: int, scalars: dict) -> None:
    """One record: a JSON line {"step": step, **scalars} and a TensorBoard scalar per key
    (non-finite values are written as null in the JSON line)."""
    if not self.active:
      return
    values = {k: _number(k, v) for k, v in scalars.items()}
    record = {"step": int(step), **{k: v if math.isfinite(v) else None
                                    for k, v in values.items()}}
    with open(self.jsonl, "a", encoding="utf-8") as f:
      f.write(json.dumps(record, sort_keys=True) + "\n")
    if self._tb is not None:
      for k, v in values.items():
        self._tb.add_scalar(k, v, int(step))
      self._tb.flush()

  def write_hparams(self, hparams: dict) -> None:
    """The run's hyperparameters, once: WORKDIR/hparams.json and a TensorBoard text summary."""
    if not self.active:
      return
    text = json.dumps(hparams, indent=1, sort_keys=True, default=str)
    atomic.atomic_write_text(self.workdir / "hparams.json", text + "\n")
    if self._tb is not None:
      self._tb.add_text("hparams", f"```\n{text}\n```", 0)
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
      self._tb = None
