"""The BiCro plugin: its pieces on small arrays, and the whole method through ncclean's
conformance suite and registry."""

from __future__ import annotations

import numpy as np
import pytest
from ncclean_bicro import BiCro
from ncclean_bicro.beta_mixture import fit_beta_posterior
from ncclean_bicro.consistency import consistency_labels, pick_anchors

from ncclean.errors import BadOptionError
from ncclean.evaluate.detection import detection_metrics
from ncclean.methods.base import Context, available_methods, make_method
from ncclean.testing import check_method, tiny_features


def test_beta_mixture_separates_two_loss_populations():
    rng = np.random.default_rng(0)
    clean = rng.beta(2, 12, size=600)
    noisy = rng.beta(10, 4, size=400)
    posterior, fit = fit_beta_posterior(np.concatenate([clean, noisy]))
    assert (posterior[:600] > 0.5).mean() > 0.9 and (posterior[600:] < 0.5).mean() > 0.9
    assert 0.3 < fit.noise_rate < 0.5
    order = np.argsort(np.concatenate([clean, noisy]))
    assert np.all(np.diff(posterior[order]) <= 1e-12), "posterior must fall with the loss"


def test_beta_mixture_of_constant_losses_is_undecided():
    posterior, fit = fit_beta_posterior(np.full(10, 0.3))
    assert np.all(posterior == 0.5) and fit.noise_rate == 0.5


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_consistency_is_high_for_matched_pairs_and_low_for_swapped_ones():
    rng = np.random.default_rng(1)
    topics = _unit(rng.normal(size=(8, 32)))
    n = 80
    topic = np.arange(n) % 8
    images = _unit(topics[topic] + 0.05 * rng.normal(size=(n, 32)))
    texts = _unit(topics[topic] + 0.05 * rng.normal(size=(n, 32)))
    text_group = np.arange(n)
    text_group[60:] = np.roll(text_group[60:], 3)  # 20 mismatched pairs (topics shift by 3)
    y = consistency_labels(images, texts, np.arange(n), text_group, anchors=np.arange(40))
    assert y.shape == (n,) and y.dtype == np.float32
    assert y.min() >= 0 and y.max() <= 1
    assert y[:60].mean() > y[60:].mean() + 0.3


def test_a_pair_is_never_its_own_anchor():
    images = _unit(np.eye(3, 4) + 0.01)
    y = consistency_labels(images, images, np.arange(3), np.arange(3), anchors=np.array([0]))
    assert y[0] == 0.0  # its only anchor is itself: no usable anchor


def test_anchors_are_the_lowest_loss_share_of_the_clean_split():
    losses = np.array([0.1, 0.9, 0.2, 0.05, 0.3, 0.8])
    clean = np.array([True, False, True, True, True, False])
    assert list(pick_anchors(losses, clean, 0.5)) == [0, 3]
    assert len(pick_anchors(losses, np.zeros(6, bool), 0.5)) == 0


def test_bicro_passes_the_conformance_suite():
    result = check_method(BiCro(warmup_epochs=1, epochs=2, batch_size=32, pool_size=64), pairs=200)
    assert set(result.columns) == {"bicro_loss", "bicro_consistency", "bicro_label", "bicro_sim"}
    assert len(result.report["mixtures"]) == 2 and 0 <= result.noise_rate <= 1


def test_bicro_finds_injected_noise_on_a_synthetic_corpus():
    features, config, truth = tiny_features(n_images=60, captions_per_image=3, noise=0.4)
    result = BiCro(warmup_epochs=6, epochs=6, batch_size=32, lr=5e-4).fit(
        features, Context(seed=0, matcher_config=config))
    noisy = truth[features.rows]
    assert detection_metrics(noisy, result.clean_prob).auroc > 0.75  # chance is 0.5
    consistency = result.columns["bicro_consistency"]
    assert consistency[noisy].mean() < consistency[~noisy].mean()


def test_bicro_is_found_through_the_entry_point():
    assert available_methods().get("bicro") == "ncclean_bicro.method:BiCro"
    method = make_method("bicro", {"anchor_share": "0.2", "mixture": "gaussian"})
    assert isinstance(method, BiCro) and method.anchor_share == 0.2


@pytest.mark.parametrize("params", [{"anchor_share": "0"}, {"mixture": "poisson"},
                                    {"label_floor": "2"}])
def test_bad_parameters_are_refused(params):
    with pytest.raises(BadOptionError):
        make_method("bicro", params)
