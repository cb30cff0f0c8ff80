"""How noisy a scored corpus is, from its scores: the noisy share and the expected share of
mismatched pairs, each with a bootstrap interval."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ncclean.data.results import NOISY, PARTITIONS
from ncclean.data.scored import Scored

_BOOTSTRAP_ROWS = 100_000


def bootstrap_interval(values: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``. Above 100,000 values the
    resamples are drawn from a seeded subsample of that size, which widens the interval
    slightly (conservative) and bounds the work for any corpus size."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    if len(values) > _BOOTSTRAP_ROWS:
        values = values[rng.choice(len(values), _BOOTSTRAP_ROWS, replace=False)]
    means = np.array([values[rng.integers(0, len(values), len(values))].mean()
                      for _ in range(n_boot)])
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


@dataclass(frozen=True)
class NoiseEstimate:
    """How noisy the corpus is, from the scores: the share of valid pairs in ``noisy`` and the
    expected share of mismatched pairs, ``mean(1 - clean_prob)``, each with a bootstrap 95%
    interval; and the method's own estimate (its mixture's noisy weight) when it gave one."""

    noisy_share: float
    noisy_share_ci: tuple[float, float]
    expected: float
    expected_ci: tuple[float, float]
    method_estimate: float | None

    def as_dict(self) -> dict:
        return {"noisy_share": self.noisy_share, "noisy_share_ci95": list(self.noisy_share_ci),
                "expected_noise": self.expected, "expected_noise_ci95": list(self.expected_ci),
                "method_estimate": self.method_estimate}


def noise_estimate(scored: Scored, seed: int = 0) -> NoiseEstimate:
    """The :class:`NoiseEstimate` of ``scored``'s valid rows; ``seed`` draws the bootstraps."""
    valid = scored.valid
    noisy = (scored.partition[valid] == PARTITIONS.index(NOISY)).astype(np.float64)
    expected = 1.0 - scored.clean_prob[valid].astype(np.float64)
    method = scored.sidecar.get("estimated_noise_rate")
    return NoiseEstimate(
        noisy_share=float(noisy.mean()) if len(noisy) else float("nan"),
        noisy_share_ci=bootstrap_interval(noisy, seed=seed),
        expected=float(expected.mean()) if len(expected) else float("nan"),
        expected_ci=bootstrap_interval(expected, seed=seed + 1),
        method_estimate=float(method) if method is not None else None)
