"""Isotonic regression as the methods read it: scipy's pool-adjacent-violators on each distinct
score, ties pooled with their weight, the fit clipped to ``[0, 1]``. On float64 scores it is
scikit-learn's ``IsotonicRegression(y_min=0, y_max=1)``, whose import alone, through
``scipy.stats``, took about a second of every ``clip`` run; on float32 scores only exact ties
pool, where scikit-learn pooled scores within float32's resolution (1e-6) of each other
(``benchmarks/results/speed.md``, "The isotonic regression without scikit-learn's import")."""

from __future__ import annotations

import numpy as np


def isotonic_fit(x: np.ndarray, y: np.ndarray, increasing: bool = True) \
        -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(knots, fitted, inverse)``: the distinct ``x`` ascending, the monotone least-squares
    fit of ``y`` at each (the mean ``y`` of a tie weighted by its count), clipped to ``[0, 1]``,
    and each ``x``'s index into ``knots``."""
    from scipy.optimize import isotonic_regression

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("an isotonic regression needs finite values")
    knots, inverse = np.unique(x, return_inverse=True)
    counts = np.bincount(inverse).astype(np.float64)
    means = np.bincount(inverse, weights=y) / counts
    fitted = isotonic_regression(means, weights=counts, increasing=increasing).x
    return knots, np.clip(fitted, 0.0, 1.0), inverse
