"""BiCro's division: a two-component Beta mixture on each pair's normalised loss.

BiCro divides the pairs into clean and noisy like NCR, but fits a Beta mixture
instead of a Gaussian one: losses live in [0, 1] after min-max normalisation, and a Beta
density fits the skewed clean peak near 0 better than a Gaussian. The authors' code
(``--fit_type bmm``) runs ten EM iterations from ``Beta(1, 2)`` and ``Beta(2, 1)`` with equal
weights, clips the losses to ``[1e-4, 1 - 1e-4]``, and re-estimates each component by the
weighted method of moments; the clean component is the one with the lower mean.

Ours adds one thing: the posterior is made non-increasing in the loss (the peak's value for
every lower loss, the running minimum above it), as the authors' lookup table does at one end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_EPS = 1e-4
_TINY = 1e-12


@dataclass(frozen=True)
class BetaMixtureFit:
    """A fitted two-component Beta mixture in the normalised [0, 1] scale of its input."""

    clean_alpha: float
    clean_beta: float
    noisy_alpha: float
    noisy_beta: float
    clean_weight: float
    noisy_weight: float
    low: float
    high: float

    @property
    def noise_rate(self) -> float:
        """The noisy component's weight: the mixture's share of mismatched pairs."""
        return self.noisy_weight

    def as_dict(self) -> dict[str, float]:
        return {"kind": "beta", "clean_alpha": self.clean_alpha, "clean_beta": self.clean_beta,
                "noisy_alpha": self.noisy_alpha, "noisy_beta": self.noisy_beta,
                "clean_weight": self.clean_weight, "noisy_weight": self.noisy_weight,
                "low": self.low, "high": self.high, "noise_rate": self.noise_rate}


def _moments(x: np.ndarray, weight: np.ndarray, alpha: float, beta: float
             ) -> tuple[float, float]:
    """Weighted method-of-moments Beta parameters; the old ones where the moments allow none."""
    total = weight.sum()
    if total <= _TINY:
        return alpha, beta
    mean = float((weight * x).sum() / total)
    var = float((weight * (x - mean) ** 2).sum() / total)
    common = mean * (1 - mean) / var - 1 if var > _TINY else -1.0
    if common <= 0:
        return alpha, beta
    return mean * common, (1 - mean) * common


def _beta_pdf(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    from scipy.stats import beta as beta_distribution

    return beta_distribution.pdf(x, alpha, beta)


def fit_beta_posterior(losses: np.ndarray, max_iter: int = 10
                       ) -> tuple[np.ndarray, BetaMixtureFit]:
    """Each pair's posterior of the clean (low-loss) component, ``(n,) float64`` in [0, 1], with
    the fit. ``losses``: ``(n,)`` floats, any scale (min-max normalised here). Constant losses
    cannot be split: every pair gets 0.5."""
    losses = np.asarray(losses, dtype=np.float64)
    low, high = (float(losses.min()), float(losses.max())) if len(losses) else (0.0, 0.0)
    if len(losses) < 2 or high - low <= _TINY:
        return np.full(len(losses), 0.5), BetaMixtureFit(1, 2, 2, 1, 0.5, 0.5, low, high)
    x = np.clip((losses - low) / (high - low), _EPS, 1 - _EPS)
    alphas, betas = np.array([1.0, 2.0]), np.array([2.0, 1.0])
    weights = np.array([0.5, 0.5])
    for _ in range(max_iter):
        likelihood = np.stack([weights[k] * _beta_pdf(x, alphas[k], betas[k]) for k in (0, 1)])
        likelihood = np.maximum(likelihood, _TINY)
        responsibility = likelihood / likelihood.sum(axis=0)
        for k in (0, 1):
            alphas[k], betas[k] = _moments(x, responsibility[k], alphas[k], betas[k])
        weights = responsibility.sum(axis=1) / responsibility.sum()
    means = alphas / (alphas + betas)
    clean = int(means.argmin())
    noisy = 1 - clean
    likelihood = np.stack([weights[k] * _beta_pdf(x, alphas[k], betas[k]) for k in (0, 1)])
    likelihood = np.maximum(likelihood, _TINY)
    posterior = _non_increasing(x, likelihood[clean] / likelihood.sum(axis=0))
    fit = BetaMixtureFit(float(alphas[clean]), float(betas[clean]), float(alphas[noisy]),
                         float(betas[noisy]), float(weights[clean]), float(weights[noisy]),
                         low, high)
    return posterior, fit


def _non_increasing(x: np.ndarray, posterior: np.ndarray) -> np.ndarray:
    """``posterior`` made non-increasing along ascending ``x``: every value below the peak gets
    the peak's, every value above it the running minimum."""
    order = np.argsort(x, kind="stable")
    ordered = posterior[order]
    peak = int(ordered.argmax())
    ordered[:peak] = ordered[peak]
    ordered[peak:] = np.minimum.accumulate(ordered[peak:])
    out = np.empty_like(posterior)
    out[order] = ordered
    return out
