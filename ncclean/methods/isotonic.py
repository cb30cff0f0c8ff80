"""Isotonic regression as the methods read it: scipy's pool-adjacent-violators on each distinct
score, ties pooled with their weight, the fit clipped to ``[0, 1]`` (scikit-learn's
``IsotonicRegression(y_min=0, y_max=1)``, whose import alone, through ``scipy.stats``, took
about a second of every ``clip`` run)."""

from __future__ import annotations

import numpy as np


def isotonic_fit(x: np.ndarray, y: np.ndarray, increasing: bool = True) \
        -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(knots, fitted, inverse)``: the distinct ``x`` ascending, the monotone least-squares
    fit of ``y`` at each (the mean ``y`` of a tie weighted by its count), clipped to ``[0, 1]``,
    and each ``x``'s index into ``knots``."""
    from scipy.optimize import isotonic_regression

    knots, inverse = np.unique(np.asarray(x, np.float64), return_inverse=True)
    counts = np.bincount(inverse).astype(np.float64)
    means = np.bincount(inverse, weights=np.asarray(y, np.float64)) / counts
    fitted = isotonic_regression(means, weights=counts, increasing=increasing).x
    return knots, np.clip(fitted, 0.0, 1.0), inverse
