import numpy as np
import pytest
import torch

from ncclean.methods.crcl import matching_probabilities
from ncclean.models.features import Features
from ncclean.train.losses import mean_hinge, negative_mask
from ncclean.train.scoring import Embeddings, pair_losses, pool_matching_probability


def random_setup(rng, n=40, n_images=30, n_texts=35, d=8):
    images = rng.normal(size=(n_images, d)).astype(np.float32)
    texts = rng.normal(size=(n_texts, d)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    features = Features(rows=np.arange(n), image_group=rng.integers(0, n_images, n),
                        text_group=rng.integers(0, n_texts, n), image_data=images,
                        text_data=texts)
    return Embeddings(images=images, texts=texts), features


def test_pool_of_everyone_equals_the_full_masked_mean_hinge(rng):
    embeddings, features = random_setup(rng)
    losses = pair_losses(embeddings, features, negatives="pool", pool_size=10_000)
    img = torch.from_numpy(embeddings.images[features.image_group])
    txt = torch.from_numpy(embeddings.texts[features.text_group])
    mask = negative_mask(torch.from_numpy(features.image_group),
                         torch.from_numpy(features.text_group))
    expected = mean_hinge(img @ txt.T, mask).numpy()
    assert np.allclose(losses, expected, atol=1e-5)


def test_pool_of_everyone_equals_the_full_masked_matching_probability(rng):
    embeddings, features = random_setup(rng)
    p_hat = pool_matching_probability(embeddings, features, 0.1, pool_size=10_000)
    img = torch.from_numpy(embeddings.images[features.image_group])
    txt = torch.from_numpy(embeddings.texts[features.text_group])
    mask = negative_mask(torch.from_numpy(features.image_group),
                         torch.from_numpy(features.text_group))
    row, column = matching_probabilities(img @ txt.T, mask, 0.1)
    assert np.allclose(p_hat, ((row.diagonal() + column.diagonal()) / 2).numpy(), atol=1e-5)
    small = pool_matching_probability(embeddings, features, 0.1, pool_size=10, seed=3)
    assert np.array_equal(small, pool_matching_probability(embeddings, features, 0.1,
                                                           pool_size=10, seed=3))
    assert ((small > 0) & (small <= 1)).all()


def test_fixed_negatives_are_deterministic_and_seeded(rng):
    embeddings, features = random_setup(rng, n=300)
    for negatives in ("pool", "batches"):
        first = pair_losses(embeddings, features, negatives=negatives, pool_size=50, seed=1)
        again = pair_losses(embeddings, features, negatives=negatives, pool_size=50, seed=1)
        other = pair_losses(embeddings, features, negatives=negatives, pool_size=50, seed=2)
        assert np.array_equal(first, again)
        assert not np.array_equal(first, other)
    with pytest.raises(ValueError):
        pair_losses(embeddings, features, negatives="random")


def test_pair_similarity(rng):
    embeddings, features = random_setup(rng)
    sims = embeddings.pair_similarity(features)
    i = 7
    assert sims[i] == pytest.approx(float(embeddings.images[features.image_group[i]]
                                          @ embeddings.texts[features.text_group[i]]))
