"""How noisy a scored corpus is: one estimate of the share of mismatched pairs, with its
interval."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    """How noisy the corpus is: one estimate of the share of mismatched valid pairs, its 95%
    interval (``None`` where the method gives none) and where it comes from. The run record's
    estimate (``estimated_noise_rate`` with ``estimated_noise_ci95``, the figures ``score``
    printed) where the method gave one; otherwise the expected share, ``mean(1 - clean_prob)``,
    with a bootstrap interval."""

    rate: float
    ci95: tuple[float, float] | None
    source: str

    def as_dict(self) -> dict:
        return {"rate": self.rate, "ci95": None if self.ci95 is None else list(self.ci95),
                "source": self.source}


def noise_estimate(scored: Scored, seed: int = 0) -> NoiseEstimate:
    """The :class:`NoiseEstimate` of ``scored``; ``seed`` draws the bootstrap where one is
    needed."""
    side = scored.sidecar
    if side.get("estimated_noise_rate") is not None:
        interval = side.get("estimated_noise_ci95")
        return NoiseEstimate(rate=float(side["estimated_noise_rate"]),
                             ci95=None if interval is None else (float(interval[0]),
                                                                 float(interval[1])),
                             source=f"{side.get('method', 'the method')}'s estimate"
                             + (" on the saved fit's sample, not this corpus"
                                if side.get("noise_estimated_on") == "the saved fit's sample"
                                else ""))
    expected = 1.0 - scored.clean_prob[scored.valid].astype(np.float64)
    return NoiseEstimate(rate=float(expected.mean()) if len(expected) else float("nan"),
                         ci95=bootstrap_interval(expected, seed=seed),
                         source="mean(1 - clean_prob)")


def describe(estimate: dict) -> str:
    """An estimate's :meth:`NoiseEstimate.as_dict` (or a run record's rate and interval) in
    words: ``37.2% (95% CI 27.7% - 45.9%)``."""
    text = f"{estimate['rate']:.1%}"
    if estimate.get("ci95") is not None:
        lo, hi = estimate["ci95"]
        text += f" (95% CI {lo:.1%} - {hi:.1%})"
    return text
