import numpy as np
import pytest

from ncclean.methods.mixture import clean_split, fit_clean_posterior


@pytest.fixture
def losses(rng):
    clean = rng.normal(0.2, 0.05, 700)
    noisy = rng.normal(0.7, 0.08, 300)
    return np.concatenate([clean, noisy]), np.r_[np.zeros(700, bool), np.ones(300, bool)]


def test_low_mean_component_is_clean(losses):
    scores, noisy = losses
    posterior, fit = fit_clean_posterior(scores, "low")
    assert posterior[~noisy].mean() > 0.95 and posterior[noisy].mean() < 0.05
    assert fit.clean_mean < fit.noisy_mean
    assert fit.noise_rate == pytest.approx(0.3, abs=0.03)
    assert (fit.low, fit.high) == (scores.min(), scores.max())


def test_high_mean_component_is_clean_for_similarities(losses):
    scores, noisy = losses
    posterior, _ = fit_clean_posterior(-scores, "high")
    assert posterior[~noisy].mean() > 0.95


def test_same_scores_same_posterior_and_scale_invariance(losses):
    scores, _ = losses
    first, _ = fit_clean_posterior(scores)
    again, _ = fit_clean_posterior(scores)
    scaled, _ = fit_clean_posterior(scores * 40 + 3)  # min-max normalised inside
    assert np.array_equal(first, again)
    assert np.allclose(first, scaled, atol=1e-6)


def test_constant_scores_cannot_be_split():
    posterior, fit = fit_clean_posterior(np.full(10, 0.3))
    assert np.array_equal(posterior, np.full(10, 0.5))
    assert fit.noise_rate == 0.5


def test_clean_split_and_its_one_percent_fallback():
    prob = np.linspace(0.6, 1.0, 200)  # nothing below 0.5
    split = clean_split(prob)
    assert (~split).sum() == 3  # values up to index n // 100 = 2
    assert clean_split(np.array([0.2, 0.9, 0.5])).tolist() == [False, True, False]


def test_posterior_never_ranks_a_lower_loss_as_less_clean(rng):
    # A narrow clean component and a wide noisy one: with a variance each, the noisy component
    # wins again at the lowest losses.
    scores = np.concatenate([rng.normal(0.3, 0.02, 600), rng.normal(0.6, 0.15, 400),
                             [0.0, 0.02, 0.05]])
    raw, fit = fit_clean_posterior(scores, "low", monotone=False)
    assert fit.clean_var < fit.noisy_var
    assert raw[-3:].max() < raw[:600].max()  # the reversal the default removes
    posterior, _ = fit_clean_posterior(scores, "low")
    ordered = posterior[np.argsort(scores)]
    assert np.all(np.diff(ordered) <= 0)
    assert posterior[-3:].min() == pytest.approx(raw.max())
    assert ((posterior > 0.5) == (raw > 0.5)).mean() > 0.99  # the split barely moves


def test_monotone_posterior_for_similarities(rng):
    sims = np.concatenate([rng.normal(0.7, 0.02, 600), rng.normal(0.4, 0.15, 400), [1.0, 0.98]])
    posterior, _ = fit_clean_posterior(sims, "high")
    assert np.all(np.diff(posterior[np.argsort(-sims)]) <= 0)
