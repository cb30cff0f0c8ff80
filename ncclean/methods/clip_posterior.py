"""``clip``'s clean probability from a pair's ranking similarity, read one of three ways:
``keep_fraction``'s top-fraction rule (DataComp's), one minus the local false discovery rate
against shuffled pairs (:mod:`ncclean.methods.null_rate`) where they are a null, or the
posterior of a two-component mixture fitted to the similarities (:mod:`ncclean.methods.mixture`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ncclean.methods.mixture import fit_clean_posterior
from ncclean.methods.null_rate import NullEstimate


@dataclass(frozen=True)
class Posterior:
    """Each pair's ``clean_prob``, the noise rate and its interval (``None`` where none is
    estimated), and what the run's report says of how they were read."""

    clean_prob: np.ndarray
    noise_rate: float
    interval: tuple[float, float] | None
    report: dict


def top_fraction(similarity: np.ndarray, keep: float) -> np.ndarray:
    """``(n,)`` 1.0 for the ``round(keep * n)`` most similar pairs, 0.0 for the others."""
    out = np.zeros(len(similarity))
    kept = np.argsort(-similarity, kind="stable")[:int(round(keep * len(similarity)))]
    out[kept] = 1.0
    return out


def read_posterior(similarity: np.ndarray, null: NullEstimate | None,
                   keep_fraction: float | None, posterior: str, seed: int) -> Posterior:
    """The clean probability of pairs ranked by ``similarity`` (``(n,)``, higher is cleaner):
    the top ``keep_fraction`` if set, else against ``null`` where there is one and ``posterior``
    is ``auto``, else from a mixture (with ``null``'s noise rate where there is one)."""
    if keep_fraction is not None:
        clean_prob = top_fraction(similarity, keep_fraction)
        return Posterior(clean_prob, 1.0 - float(clean_prob.mean()), None, {})
    if null is not None and posterior == "auto":
        clean_prob, noise_rate = null.clean_prob(similarity), null.noise_rate
        report = {"posterior": "one minus the local false discovery rate against shuffled pairs"}
    else:
        clean_prob, fit = fit_clean_posterior(similarity, "high", seed=seed)
        noise_rate = fit.noise_rate if null is None else null.noise_rate
        report = {"posterior": "two-component mixture", "mixture": fit.as_dict()}
    return Posterior(clean_prob, noise_rate, None if null is None else null.interval(seed=seed),
                     report)
