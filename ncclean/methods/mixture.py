"""The two-component Gaussian mixture every loss-division method fits, in one place.

Reference settings (NCR, PC2, CREAM, GSC; ``landscape.md`` A.15): the per-pair score is min-max
normalised, ``GaussianMixture(n_components=2, max_iter=10, tol=1e-2, reg_covar=5e-4)`` is fitted,
and the clean probability is the posterior of the component with the lower mean (for losses) or
the higher mean (for similarities). ``random_state`` is fixed so the same scores give the same
posteriors (the reference code leaves it random).

Ours: the posterior is made monotone in the score (``monotone=True``). With one variance per
component (the reference), the wider component wins again at the far end of the narrower one, so
the pairs with the very lowest losses get a lower clean posterior than pairs in the middle of the
clean component. The values move little (0.998 instead of 0.999) and no pair crossed the 0.5
split in the runs we looked at, but the ranking does: measured on clip art at 50% noise, seed 1,
pc2's last division ranked noise 0.900 by its posterior and 0.910 by its own loss, 0.909 once
monotone (``benchmarks/results/gmm.md``, "the division, division by division").
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class MixtureFit:
    """A fitted mixture, in the normalised [0, 1] scale of its input.

    ``clean``/``noisy``: component means, variances and weights; ``low``/``high``: the raw score
    range used for normalisation. ``noise_rate`` is the noisy component's weight: the mixture's
    estimate of the share of mismatched pairs.
    """

    clean_mean: float
    noisy_mean: float
    clean_var: float
    noisy_var: float
    clean_weight: float
    noisy_weight: float
    low: float
    high: float
    clean_is: str

    @property
    def noise_rate(self) -> float:
        return self.noisy_weight

    def as_dict(self) -> dict[str, float | str]:
        return asdict(self) | {"noise_rate": self.noise_rate}


def fit_clean_posterior(scores: np.ndarray, clean: str = "low", *, max_iter: int = 10,
                        tol: float = 1e-2, reg_covar: float = 5e-4, seed: int = 0,
                        covariance: str = "full",
                        monotone: bool = True) -> tuple[np.ndarray, MixtureFit]:
    """Fit the mixture to ``scores`` (``(n,) float``) and return each one's posterior of the clean
    component, ``(n,) float64`` in [0, 1], with the fit.

    ``clean="low"`` for losses (NCR: ``means_.argmin()``), ``"high"`` for similarities (SDD,
    GSC: ``means_.argmax()``). Constant scores cannot be split: every pair gets 0.5.
    ``covariance="tied"`` shares one variance between the components, which makes the posterior
    a logistic, strictly monotone function of the score (with ``"full"``, the reference, the
    wider component wins again at both extremes). ``monotone`` (default) flattens that
    reversal: no score gets a lower clean posterior than a less clean-looking score (see the
    module docstring); ``monotone=False`` returns the mixture's own posterior.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    if clean not in ("low", "high"):
        raise ValueError(f"clean must be 'low' or 'high', got {clean!r}")
    scores = np.asarray(scores, dtype=np.float64)
    low, high = float(scores.min()), float(scores.max())
    if len(scores) < 2 or high - low <= 1e-12:
        fit = MixtureFit(0.5, 0.5, 0.0, 0.0, 0.5, 0.5, low, high, clean)
        return np.full(len(scores), 0.5), fit
    normalised = ((scores - low) / (high - low)).reshape(-1, 1)
    gmm = GaussianMixture(n_components=2, max_iter=max_iter, tol=tol, reg_covar=reg_covar,
                          random_state=seed, covariance_type=covariance)
    with warnings.catch_warnings():  # ten EM steps do not converge by design (reference setting)
        warnings.simplefilter("ignore", ConvergenceWarning)
        gmm.fit(normalised)
    means = gmm.means_.ravel()
    clean_component = int(means.argmin() if clean == "low" else means.argmax())
    noisy_component = 1 - clean_component
    posterior = gmm.predict_proba(normalised)[:, clean_component]
    variances = np.broadcast_to(gmm.covariances_.ravel(), (2,))
    if monotone:
        posterior = _monotone(scores if clean == "low" else -scores, posterior,
                              narrow_clean=variances[clean_component] <= variances[noisy_component])
    fit = MixtureFit(
        clean_mean=float(means[clean_component]), noisy_mean=float(means[noisy_component]),
        clean_var=float(variances[clean_component]), noisy_var=float(variances[noisy_component]),
        clean_weight=float(gmm.weights_[clean_component]),
        noisy_weight=float(gmm.weights_[noisy_component]),
        low=low, high=high, clean_is=clean,
    )
    return posterior, fit


def _monotone(key: np.ndarray, posterior: np.ndarray, narrow_clean: bool) -> np.ndarray:
    """``posterior`` made non-increasing along ``key`` (ascending: cleanest first).

    The log-odds of two Gaussians is a quadratic in the score, so the posterior is unimodal or
    U-shaped. A narrower clean component reverses at the clean end: every score before the peak
    gets the peak's value. A wider one reverses at the noisy end: every score after the minimum
    gets the minimum's value.
    """
    order = np.argsort(key, kind="stable")
    ordered = posterior[order]
    if narrow_clean:
        ordered = np.maximum.accumulate(ordered[::-1])[::-1]
    else:
        ordered = np.minimum.accumulate(ordered)
    out = np.empty_like(posterior)
    out[order] = ordered
    return out


def clean_split(clean_prob: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """``(n,) bool``: the pairs treated as clean, ``clean_prob > threshold`` (NCR's ``split_prob``).

    When nothing falls at or below the threshold, the lowest 1% (the value at index ``n // 100``
    of the sorted probabilities) becomes the threshold, so the noisy side is never empty.
    """
    clean_prob = np.asarray(clean_prob)
    if (clean_prob <= threshold).any() or len(clean_prob) == 0:
        return clean_prob > threshold
    cut = np.sort(clean_prob)[len(clean_prob) // 100]
    return clean_prob > cut


class PosteriorMean:
    """Clean posteriors averaged over a run's divisions (``final="mean"`` of ``gmm``, ``disncl``
    and methods built like them): :meth:`add` one division's posterior, :meth:`of` the mean of
    every division so far and the last one. :meth:`state` / :meth:`load_state` are what a
    method's objective checkpoints, so a resumed run averages the same posteriors."""

    def __init__(self, n_pairs: int):
        self.total = np.zeros(n_pairs)
        self.count = 0

    def add(self, posterior: np.ndarray) -> None:
        self.total += posterior
        self.count += 1

    def of(self, last: np.ndarray) -> np.ndarray:
        return (self.total + last) / (self.count + 1) if self.count else last

    def state(self) -> dict[str, np.ndarray]:
        return {"posterior_sum": self.total, "divisions": np.array([self.count])}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if "posterior_sum" in state:
            self.total = state["posterior_sum"].astype(np.float64)
            self.count = int(state["divisions"][0])
