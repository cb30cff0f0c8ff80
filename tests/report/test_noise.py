"""The noise estimate of a scored corpus and its bootstrap intervals."""

import numpy as np
import pytest

from ncclean.data.results import INVALID, NOISY, PARTITIONS
from ncclean.data.scored import Scored
from ncclean.report.noise import bootstrap_interval, noise_estimate


def test_bootstrap_interval_covers_the_mean_and_is_seeded(rng):
    values = (rng.random(5000) < 0.3).astype(float)
    lo, hi = bootstrap_interval(values, seed=1)
    assert lo < values.mean() < hi and hi - lo < 0.05
    assert bootstrap_interval(values, seed=1) == (lo, hi)
    big = np.concatenate([values] * 40)  # above the subsample size: still bounded work
    lo2, hi2 = bootstrap_interval(big, n_boot=50)
    assert lo2 < big.mean() < hi2


def test_noise_estimate_counts_valid_rows_only():
    codes = np.array([PARTITIONS.index(NOISY)] * 30 + [0] * 60 + [PARTITIONS.index(INVALID)] * 10,
                     dtype=np.int8)
    prob = np.r_[np.full(30, 0.1), np.full(60, 0.9), np.full(10, np.nan)].astype(np.float32)
    estimate = noise_estimate(Scored(None, codes, prob, None, {"estimated_noise_rate": 0.3}))
    assert estimate.noisy_share == 30 / 90 and estimate.method_estimate == 0.3
    assert estimate.expected == pytest.approx((30 * 0.9 + 60 * 0.1) / 90)
    lo, hi = estimate.noisy_share_ci
    assert lo <= estimate.noisy_share <= hi
