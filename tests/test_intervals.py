"""evaluation.intervals, the one bootstrap every table uses: its draws against a loop written
here, its interval against scipy's percentile bootstrap, and the pairing of questions."""

import numpy as np
import pytest
from scipy import stats

from graphloom_jax.evaluation import intervals


def test_interval_is_the_percentiles_of_resampled_means():
  rng = np.random.default_rng(3)
  x = rng.integers(0, 2, 120) * 100.0
  lo, hi = intervals.bootstrap_interval(x, resamples=400, seed=7)
  draw = np.random.default_rng(7)
  idx = draw.integers(0, len(x), size=(400, len(x)))
  means = [np.mean([x[i] for i in row]) for row in idx]
  np.testing.assert_allclose([lo, hi], np.percentile(means, [2.5, 97.5]), rtol=1e-12)


def test_interval_agrees_with_scipy_percentile_bootstrap():
  x = np.random.default_rng(0).normal(2.0, 5.0, 300)
  lo, hi = intervals.bootstrap_interval(x, resamples=20_000)
  ci = stats.bootstrap((x,), np.mean, n_resamples=20_000, method="percentile",
                       random_state=1).confidence_interval
  assert abs(lo - ci.low) < 0.05 and abs(hi - ci.high) < 0.05
  assert lo < x.mean() < hi


def test_paired_difference_pairs_shared_questions_in_order():
  a = {"q1": 100.0, "q2": 0.0, "q3": 100.0, "q4": 100.0}
  b = {"q2": 100.0, "q3": 100.0, "q4": 0.0, "q9": 0.0}
  p = intervals.paired_difference(a, b, resamples=500, seed=2)
  assert p["questions"] == 3 and p["delta"] == pytest.approx((-100 + 0 + 100) / 3)
  assert (p["lo"], p["hi"]) == intervals.bootstrap_interval([-100.0, 0.0, 100.0], 500, 2)
  same = intervals.paired_difference(a, a)
  assert same["delta"] == same["lo"] == same["hi"] == 0.0
  assert intervals.paired_difference(a, {"x": 1.0}) is None


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]]])
def test_empty_or_matrix_input_is_an_error(bad):
  with pytest.raises(ValueError, match="bootstrap_interval"):
    intervals.bootstrap_interval(bad)
