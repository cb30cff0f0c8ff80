"""The one noise estimate of a scored corpus and its interval."""

import numpy as np
import pytest

from ncclean.data.results import INVALID, NOISY, PARTITIONS
from ncclean.data.scored import Scored
from ncclean.report.noise import bootstrap_interval, describe, noise_estimate


def test_bootstrap_interval_covers_the_mean_and_is_seeded(rng):
    values = (rng.random(5000) < 0.3).astype(float)
    lo, hi = bootstrap_interval(values, seed=1)
    assert lo < values.mean() < hi and hi - lo < 0.05
    assert bootstrap_interval(values, seed=1) == (lo, hi)
    big = np.concatenate([values] * 40)  # above the subsample size: still bounded work
    lo2, hi2 = bootstrap_interval(big, n_boot=50)
    assert lo2 < big.mean() < hi2


def test_the_run_records_estimate_is_the_one_estimate():
    codes = np.array([PARTITIONS.index(NOISY)] * 30 + [0] * 60 + [PARTITIONS.index(INVALID)] * 10,
                     dtype=np.int8)
    prob = np.r_[np.full(30, 0.1), np.full(60, 0.9), np.full(10, np.nan)].astype(np.float32)
    side = {"method": "clip", "estimated_noise_rate": 0.3, "estimated_noise_ci95": [0.25, 0.36]}
    estimate = noise_estimate(Scored(None, codes, prob, None, side))
    assert estimate.as_dict() == {"rate": 0.3, "ci95": [0.25, 0.36], "source": "clip's estimate"}
    assert describe(estimate.as_dict()) == "30.0% (95% CI 25.0% - 36.0%)"
    # a method without an interval: its estimate alone, as score printed it
    alone = noise_estimate(Scored(None, codes, prob, None, {"estimated_noise_rate": 0.3}))
    assert alone.ci95 is None and describe(alone.as_dict()) == "30.0%"


def test_without_an_estimate_the_expected_noise_of_valid_rows_with_a_bootstrap():
    codes = np.array([PARTITIONS.index(NOISY)] * 30 + [0] * 60 + [PARTITIONS.index(INVALID)] * 10,
                     dtype=np.int8)
    prob = np.r_[np.full(30, 0.1), np.full(60, 0.9), np.full(10, np.nan)].astype(np.float32)
    estimate = noise_estimate(Scored(None, codes, prob, None, {}))
    assert estimate.rate == pytest.approx((30 * 0.9 + 60 * 0.1) / 90)
    lo, hi = estimate.ci95
    assert lo <= estimate.rate <= hi and estimate.source == "mean(1 - clean_prob)"
