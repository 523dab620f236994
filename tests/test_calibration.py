"""ECE and reliability diagrams against hand-computed cases."""

import matplotlib.image
import numpy as np
import pytest

from graphloom_jax.evaluation import calibration


def test_ece_hand_computed():
  # 2 bins. Bin [0, .5): p .1, .2 (mean .15), outcomes 0, 1 (mean .5): |.5 - .15| * 2/4 = .175.
  # Bin [.5, 1]: p .85, .95, 1.0 (mean .9333), outcomes 1, 1, 0 (mean .6667): .2667 * 3/5.
  p = [0.1, 0.2, 0.85, 0.95, 1.0]
  y = [0, 1, 1, 1, 0]
  r = calibration.reliability(p, y, n_bins=2)
  want = abs(0.5 - 0.15) * 2 / 5 + abs(2 / 3 - (0.85 + 0.95 + 1.0) / 3) * 3 / 5
  assert r.ece == pytest.approx(want, abs=1e-12)
  np.testing.assert_array_equal(r.counts, [2, 3])
  np.testing.assert_allclose(r.accuracy, [0.5, 2 / 3])


def test_ece_perfect_and_mask():
  # Each bin's outcome rate equals its confidence exactly -> ECE 0; the masked entry would break it.
  p = np.array([0.25] * 4 + [0.75] * 4 + [0.9])
  y = np.array([1, 0, 0, 0, 1, 1, 1, 0, 0])
  mask = np.arange(9) < 8
  assert calibration.ece(p, y, n_bins=10, mask=mask) == pytest.approx(0.0, abs=1e-12)
  assert calibration.ece(p, y, n_bins=10) > 0.05


def test_ece_matches_loop_reference_on_random_data():
  rng = np.random.default_rng(0)
  p = rng.uniform(size=1000)
  y = (rng.uniform(size=1000) < p ** 2).astype(float)
  total = 0.0
  for b in range(15):
    lo, hi = b / 15, (b + 1) / 15
    sel = (p >= lo) & ((p < hi) if b < 14 else (p <= hi))
    if sel.any():
      total += sel.sum() / p.size * abs(y[sel].mean() - p[sel].mean())
  assert calibration.ece(p, y) == pytest.approx(total, abs=1e-12)


def test_bad_inputs():
  with pytest.raises(ValueError, match="probability 1 is 1.5"):
    calibration.ece([0.2, 1.5], [0, 1])
  with pytest.raises(ValueError, match="outcomes must be 0 or 1"):
    calibration.ece([0.2, 0.5], [0, 0.5])
  with pytest.raises(ValueError, match="2 entries but outcomes has 3"):
    calibration.ece([0.2, 0.5], [0, 1, 1])
  with pytest.raises(ValueError, match="n_bins=0"):
    calibration.ece([0.2], [0], n_bins=0)


def test_reliability_diagram_png(tmp_path):
  rng = np.random.default_rng(1)
  p = rng.uniform(size=200)
  y = (rng.uniform(size=200) < p).astype(float)
  panels = {"uncalibrated": calibration.reliability(p ** 0.3, y),
            "calibrated": calibration.reliability(p, y)}
  assert panels["uncalibrated"].ece > panels["calibrated"].ece
  path = calibration.reliability_diagram(tmp_path / "rel.png", panels)
  img = matplotlib.image.imread(path)
  assert img.ndim == 3 and img.shape[1] > img.shape[0] > 100
