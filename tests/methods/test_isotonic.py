"""The methods' isotonic regression is scikit-learn's ``IsotonicRegression(y_min=0, y_max=1)``
on float64 scores, without its import: the same steps, the same values to rounding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.isotonic import IsotonicRegression

from ncclean.methods.isotonic import isotonic_fit

scores = arrays(np.float64, st.integers(2, 200),
                elements=st.sampled_from([-1.5, -0.25, 0.0, 0.1, 0.3, 0.30000001, 2.0]))


@settings(max_examples=200, deadline=None)
@given(x=scores, seed=st.integers(0, 2**16), increasing=st.booleans(), labels=st.booleans())
def test_the_fit_is_scikit_learns(x, seed, increasing, labels):
    rng = np.random.default_rng(seed)
    y = (rng.random(len(x)) < 0.5).astype(float) if labels else rng.normal(0.5, 0.6, len(x))
    theirs = IsotonicRegression(increasing=increasing, y_min=0.0, y_max=1.0,
                                out_of_bounds="clip").fit(x, y)
    knots, fitted, inverse = isotonic_fit(x, y, increasing)
    assert np.array_equal(knots[inverse], x)
    # scikit-learn keeps the first and last knot of each constant run: the same runs here
    starts = np.r_[0, np.flatnonzero(np.diff(fitted)) + 1]
    ends = np.r_[starts[1:], len(fitted)] - 1
    kept = np.unique(np.r_[starts, ends])
    assert np.array_equal(knots[kept], theirs.X_thresholds_)
    np.testing.assert_allclose(fitted[kept], theirs.y_thresholds_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fitted[inverse], theirs.predict(x), rtol=0, atol=1e-12)
    assert fitted.min() >= 0.0 and fitted.max() <= 1.0
    steps = np.diff(fitted)
    assert (steps >= 0).all() if increasing else (steps <= 0).all()


def test_only_exact_ties_pool_and_non_finite_scores_are_refused():
    # scikit-learn pooled float32 scores within 1e-6 of each other; here each distinct value
    # is its own knot
    knots, fitted, _ = isotonic_fit(np.float32([0.1, 0.3, 0.3000005, 0.5]), [1, 0, 1, 0],
                                    increasing=False)
    assert len(knots) == 4 and fitted[0] == 1.0 and fitted[-1] == 0.0
    for bad in ([0.1, np.nan], [0.1, np.inf]):
        with pytest.raises(ValueError, match="finite"):
            isotonic_fit(np.array(bad), [0.0, 1.0])
