import numpy as np
import pytest

from ncclean.methods.align import fit_alignment
from ncclean.methods.null_rate import null_noise_rate


def shared_space(rng, n, noisy):
    """Unit image and caption vectors of one 8-d space, captions near their images; the first
    ``noisy`` pairs hold the captions of other images (a shuffle among themselves)."""
    images = rng.normal(size=(n, 8))
    texts = images + 0.6 * rng.normal(size=(n, 8))
    texts[:noisy] = texts[rng.permutation(noisy)]
    unit = lambda v: (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    return unit(images), unit(texts)


def fixed(images, texts):
    return lambda fit: lambda i, t: np.einsum("nd,nd->n", images[i], texts[t])


@pytest.mark.parametrize("rate", [0.2, 0.5, 0.8])
def test_shuffled_pairs_recover_the_injected_rate_in_a_fixed_space(rng, rate):
    n = 4000
    images, texts = shared_space(rng, n, int(rate * n))
    pairs = np.arange(n)
    estimate = null_noise_rate(fixed(images, texts), pairs, pairs, folds=1)
    assert estimate.noise_rate == pytest.approx(rate, abs=0.04)
    assert estimate.folds == 1 and estimate.pairs == n and estimate.null_pairs > 2.9 * n


def test_a_space_fitted_on_the_corpus_is_cross_fitted(rng):
    n, noisy = 3000, 1500
    latent = rng.normal(size=(n, 6))
    images = latent @ rng.normal(size=(6, 60)) + 0.1 * rng.normal(size=(n, 60))
    texts = latent @ rng.normal(size=(6, 50)) + 0.1 * rng.normal(size=(n, 50))
    texts[:noisy] = texts[rng.permutation(noisy)]
    pairs = np.arange(n)

    def cca(fit):
        fit = pairs if fit is None else fit
        alignment = fit_alignment(images, texts, fit, fit, dims=20, ridge=0.01)
        return lambda i, t: np.einsum("nd,nd->n", alignment.project_images(images[i]),
                                      alignment.project_texts(texts[t]))

    crossed = null_noise_rate(cca, pairs, pairs, folds=5)
    in_sample = null_noise_rate(cca, pairs, pairs, folds=1)
    assert crossed.noise_rate == pytest.approx(0.5, abs=0.06) and crossed.folds == 5
    # fitted on its own noisy pairs, the space lifts them above the shuffled ones
    assert in_sample.noise_rate < crossed.noise_rate - 0.05


def test_a_seeded_sample_gives_the_same_estimate_every_time(rng):
    images, texts = shared_space(rng, 3000, 900)
    pairs = np.arange(3000)
    runs = [null_noise_rate(fixed(images, texts), pairs, pairs, folds=1, sample=1000, seed=3)
            for _ in range(2)]
    assert runs[0] == runs[1] and runs[0].pairs == 1000


def test_too_few_pairs_or_a_single_caption_give_no_estimate(rng):
    images, texts = shared_space(rng, 200, 50)
    pairs = np.arange(200)
    assert null_noise_rate(fixed(images, texts), pairs, pairs, folds=5) is None  # 40 a fold
    one_caption = np.zeros(200, dtype=np.int64)  # every shuffled pair shares the caption
    assert null_noise_rate(fixed(images, texts), pairs, one_caption, folds=1) is None


@pytest.mark.parametrize("rate", [0.0, 0.2, 0.6])
def test_clean_prob_says_how_likely_a_pair_is_clean(rng, rate):
    n = 4000
    images, texts = shared_space(rng, n, int(rate * n))
    truth = np.arange(n) < int(rate * n)
    pairs = np.arange(n)
    estimate = null_noise_rate(fixed(images, texts), pairs, pairs, folds=1)
    similarity = np.einsum("nd,nd->n", images, texts)
    clean_prob = estimate.clean_prob(similarity)
    order = np.argsort(similarity)
    assert np.all(np.diff(clean_prob[order]) >= 0)  # ranked as the similarity ranks
    kept = clean_prob >= 0.8
    # what it promises about the pairs it calls clean is what they hold
    assert np.mean(1 - clean_prob[kept]) == pytest.approx(truth[kept].mean(), abs=0.03)
    assert (clean_prob < 0.5).mean() == pytest.approx(rate, abs=0.05)


def test_a_space_that_cannot_fit_a_fold_gives_no_estimate(rng):
    pairs = np.arange(600)
    assert null_noise_rate(lambda fit: None, pairs, pairs, folds=5) is None


def test_the_estimate_has_a_seeded_interval_that_narrows_with_the_corpus(rng):
    widths = []
    for n in (400, 4000):
        images, texts = shared_space(rng, n, int(0.3 * n))
        pairs = np.arange(n)
        estimate = null_noise_rate(fixed(images, texts), pairs, pairs, folds=1)
        lo, hi = estimate.interval(seed=3)
        assert lo <= estimate.noise_rate <= hi
        assert lo - 0.02 < 0.3 < hi + 0.02  # the injected rate, within the estimator's error
        assert estimate.interval(seed=3) == (lo, hi)
        widths.append(hi - lo)
    assert widths[1] < 0.5 * widths[0]
