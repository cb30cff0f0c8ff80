"""``check_method`` requires a method to find the injected noise, not only to return scores of the
right shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from ncclean.methods.base import Method, MethodResult, param
from ncclean.testing import check_method, vector_features


@dataclass
class RandomScores(Method):
    """A plugin that scores every pair at random (seeded, so the same seed gives the same)."""

    name: ClassVar[str] = "random"
    summary: ClassVar[str] = "random scores"
    trains_matcher: ClassVar[bool] = False
    salt: int = param(0, help="which random draw")

    def fit(self, features, context):
        rng = np.random.default_rng([context.seed, self.salt])
        return MethodResult(clean_prob=rng.random(features.n_pairs))


@dataclass
class Oracle(Method):
    """A plugin that reads the cosine of the raw vectors: it finds the noise."""

    name: ClassVar[str] = "oracle"
    summary: ClassVar[str] = "raw cosine"
    trains_matcher: ClassVar[bool] = False

    def fit(self, features, context):
        images = features.image_data[features.image_group]
        texts = features.text_data[features.text_group]
        cos = (images * texts).sum(1) / np.linalg.norm(images, axis=1) / \
            np.linalg.norm(texts, axis=1)
        return MethodResult(clean_prob=(cos + 1) / 2)


@pytest.mark.parametrize("salt", range(5))
def test_random_scores_fail_the_conformance_suite(salt):
    with pytest.raises(AssertionError, match="random does not find the injected noise: AUROC"):
        check_method(RandomScores(salt=salt))


def test_a_method_that_finds_the_noise_passes():
    result = check_method(Oracle())
    assert result.clean_prob.shape == (200,)


def test_the_corpus_is_seeded_and_noisy_as_asked():
    features, config, truth = vector_features(seed=3)
    again = vector_features(seed=3)[0]
    assert np.array_equal(features.text_data, again.text_data)
    assert features.n_pairs == 200 and truth.sum() == 60
    assert config.frozen_images and features.image_data.shape == (100, 16)
