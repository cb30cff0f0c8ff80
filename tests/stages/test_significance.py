import numpy as np
import pytest

from ncclean.methods.base import Context
from ncclean.methods.gmm import GMM
from ncclean.models.features import Features
from ncclean.stages.significance import SignificanceConfig, significance, specificity
from ncclean.testing import tiny_features
from ncclean.train.scoring import Embeddings


def test_specificity_is_low_for_captions_that_fit_many_images():
    # Images 0-3 all look alike and carry the same caption text ("gramastar"); image 4 is
    # distinct with its own caption.
    images = np.array([[1, 0], [1, 0.01], [1, 0.02], [1, -0.01], [0, 1]], dtype=np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    texts = np.array([[1, 0], [0, 1]], dtype=np.float32)
    features = Features(rows=np.arange(5), image_group=np.arange(5),
                        text_group=np.array([0, 0, 0, 0, 1]), image_data=images,
                        text_data=texts)
    values = specificity(Embeddings(images, texts), features, np.ones(5, bool), np.arange(5),
                         temperature=0.05)
    assert values[4] > 1 > values[:4].max()


def test_update_ratio_runs_and_is_deterministic():
    features, config, _ = tiny_features(n_images=20)
    result = GMM(warmup_epochs=1, epochs=1, batch_size=32, pool_size=32).fit(
        features, Context(seed=0, matcher_config=config))
    clean = result.clean_prob >= 0.5
    settings = SignificanceConfig(mode="update", passes=2, batch_size=16)
    first, report = significance(result.matcher, features, result.clean_prob, clean, settings)
    again, _ = significance(result.matcher, features, result.clean_prob, clean, settings)
    assert np.array_equal(first, again, equal_nan=True)
    assert np.isfinite(first[clean]).all() and np.isnan(first[~clean]).all()
    assert (first[clean] > 0).all()
    assert len(report["label_agreement_with_mean"]) == 2


def test_unknown_mode():
    with pytest.raises(ValueError, match="specificity"):
        significance(None, tiny_features(n_images=4)[0], np.ones(12), np.ones(12, bool),
                     SignificanceConfig(mode="vibes"))


def test_specificity_matches_its_definition_and_the_pool_respects_the_budget(monkeypatch):
    import ncclean.stages.significance as module

    rng = np.random.default_rng(1)
    images = rng.standard_normal((40, 6)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    texts = images + 0.3 * rng.standard_normal((40, 6)).astype(np.float32)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    features = Features(rows=np.arange(40), image_group=np.arange(40),
                        text_group=np.arange(40), image_data=images, text_data=texts)
    pool = np.arange(0, 40, 2)
    values = specificity(Embeddings(images, texts), features, np.ones(40, bool), pool, 0.1)
    for i in (0, 1):  # pair 0's image is in the pool (left out once), pair 1's is not
        others = [j for j in pool if j != i]
        logits = np.concatenate([[texts[i] @ images[i]], images[others] @ texts[i]]) / 0.1
        log_p = logits[0] - np.log(np.exp(logits).sum())
        k = len(pool) + 1
        assert values[i] == pytest.approx((log_p + np.log(k)) / (0.25 * np.log(k)), rel=1e-4)

    monkeypatch.setattr(module, "reference_cap", lambda n_queries: 8)
    _, report = significance(None, features, np.ones(40), np.ones(40, bool),
                             embeddings=Embeddings(images, texts))
    assert report["pool"] == 8


@pytest.mark.parametrize("scale", [1.0, 3.0])  # unit vectors, and logits past EXP_SAFE
def test_own_log_softmax_is_the_log_softmax_without_the_own_images_copies(scale):
    import torch

    from ncclean.stages.significance import EXP_SAFE, own_log_softmax

    rng = np.random.default_rng(0)
    texts = torch.from_numpy(rng.normal(size=(12, 8)).astype(np.float32))
    pool = torch.from_numpy(rng.normal(size=(6, 8)).astype(np.float32))
    texts = texts / texts.norm(dim=1, keepdim=True) * scale
    pool = pool / pool.norm(dim=1, keepdim=True) * scale
    own = (texts * pool[[0] * 12]).sum(1) * 0.9
    rows, cols = np.array([0, 0, 5]), np.array([1, 4, 2])
    got = own_log_softmax(own, texts, pool, 0.02, rows, cols)
    assert (scale * scale / 0.02 > EXP_SAFE) == (scale > 1)
    for i in range(12):
        kept = [j for j in range(6) if (i, j) not in {(0, 1), (0, 4), (5, 2)}]
        logits = torch.cat([own[i:i + 1], texts[i] @ pool[kept].T]) / 0.02
        assert torch.isclose(got[i], torch.log_softmax(logits.double(), 0)[0].float(),
                             rtol=1e-5, atol=1e-4)
