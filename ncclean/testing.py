"""``check_method``: the conformance suite every method, built-in or plugin, must pass.

It runs the method twice with the same seed on a small synthetic corpus with injected noise
(:func:`vector_features`: 200 pairs of precomputed vectors, 30% of them mismatched) and checks
the contract of :class:`ncclean.methods.base.Method`: one clean probability per pair, in [0, 1]
and finite; method columns named ``<method>_...`` with one value per pair; the same seed gives
the same scores; no file is written (the working folder and the cache stay empty); and the
method *finds the noise*: the AUROC of ``clean_prob`` against the injected mismatches is at
least ``min_auroc`` (0.7, 4.5 standard deviations above chance: scores drawn at random reach it
less than once in 100,000 tries; the built-in methods score 0.83 or more with the settings of
their tests). Plugin authors call it
from their own tests, with settings that let the method learn 200 pairs (heads on 16-d
vectors, a few dozen steps)::

    from ncclean.testing import check_method
    check_method(MyMethod(epochs=2, batch_size=16, lr=3e-3))
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ncclean.methods.base import Context, Method, MethodResult


@contextlib.contextmanager
def _in_empty_folders() -> Iterator[list[Path]]:
    """Run with the working folder and ``NCCLEAN_CACHE`` pointed at fresh empty folders."""
    with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as cache:
        previous_cwd, previous_cache = os.getcwd(), os.environ.get("NCCLEAN_CACHE")
        os.chdir(work)
        os.environ["NCCLEAN_CACHE"] = cache
        try:
            yield [Path(work), Path(cache)]
        finally:
            os.chdir(previous_cwd)
            if previous_cache is None:
                os.environ.pop("NCCLEAN_CACHE", None)
            else:
                os.environ["NCCLEAN_CACHE"] = previous_cache


def tiny_features(n_images: int = 24, captions_per_image: int = 3, noise: float = 0.3,
                  seed: int = 0, lang: str = "en"):
    """Features and a matcher configuration of a small noisy synthetic corpus (32 px images,
    token captions, 64-d embeddings), with the ground truth ``(features, config, noisy_gt)``."""
    from ncclean import api
    from ncclean.data.corpus import read_corpus
    from ncclean.models.features import build_features
    from ncclean.models.matcher import MatcherConfig
    from ncclean.models.tables import build_vocabulary

    with tempfile.TemporaryDirectory() as tmp:
        clean, noisy = Path(tmp) / "clean.parquet", Path(tmp) / "noisy.parquet"
        api.synth(clean, n_images=n_images, captions_per_image=captions_per_image, lang=lang,
                  seed=seed)
        api.inject_noise(clean, noisy, ratio=noise, seed=seed)
        corpus = read_corpus(noisy, image_size=32)
        corpus.images = np.array(corpus.images)  # detach from the temporary folder
        truth = np.array(corpus.source.read_columns(["noisy_gt"]).column(0).to_pylist())
    config = MatcherConfig(embed_dim=64, image_size=32, cnn_width=16, word_dim=64,
                           vocab=build_vocabulary(corpus.captions, min_freq=1).tokens)
    return build_features(corpus, config), config, truth


def vector_features(n_images: int = 100, captions_per_image: int = 2, noise: float = 0.3,
                    dim: int = 16, seed: int = 0):
    """A small noisy corpus of precomputed vectors, ``(features, config, noisy_gt)``: each image
    is a random latent point plus a little noise, each caption its image's point plus more
    noise, and a ``noise`` share of the captions (chosen by seed) describe another image. The
    config puts small heads (``column`` towers, 32-d joint space) on the vectors, so a matcher
    learns the corpus in a few dozen steps."""
    from ncclean.models.features import Features
    from ncclean.models.matcher import MatcherConfig

    rng = np.random.default_rng([seed, 20])
    latent = rng.standard_normal((n_images, dim))
    n = n_images * captions_per_image
    image_group = np.repeat(np.arange(n_images), captions_per_image)
    noisy = np.zeros(n, dtype=bool)
    noisy[rng.choice(n, int(round(noise * n)), replace=False)] = True
    described = image_group.copy()
    described[noisy] = (image_group[noisy] + rng.integers(1, n_images, noisy.sum())) % n_images
    images = latent + 0.3 * rng.standard_normal(latent.shape)
    texts = latent[described] + 0.5 * rng.standard_normal((n, dim))
    features = Features(rows=np.arange(n), image_group=image_group, text_group=np.arange(n),
                        image_data=images.astype(np.float32), text_data=texts.astype(np.float32))
    config = MatcherConfig(image_tower="column", text_tower="column", embed_dim=32,
                           image_in_dim=dim, text_in_dim=dim)
    return features, config, noisy


def check_method(method: Method, *, seed: int = 0, min_auroc: float = 0.7,
                 pairs: int | None = None) -> MethodResult:
    """Run ``method`` through the conformance checks on a corpus of ``pairs`` pairs (by default
    200, or the method's measured minimum, ``min_pairs``, when larger); raise ``AssertionError``
    naming the first broken rule. Returns the first run's result for further assertions."""
    from ncclean.evaluate.detection import detection_metrics

    pairs = pairs or max(200, getattr(method, "min_pairs", 0))
    features, config, noisy_gt = vector_features(n_images=max(2, -(-pairs // 2)), seed=seed)
    n = features.n_pairs
    results = []
    with _in_empty_folders() as folders:
        for _ in range(2):
            context = Context(seed=seed, matcher_config=config)
            results.append(method.fit(features, context))
        written = [str(p) for folder in folders for p in folder.rglob("*")]
    assert not written, f"{method.name} wrote files: {written[:5]}"

    first, second = results
    prob = np.asarray(first.clean_prob)
    assert prob.shape == (n,), f"{method.name}: clean_prob has shape {prob.shape}, expected ({n},)"
    assert np.isfinite(prob).all(), f"{method.name}: clean_prob holds NaN or infinity"
    assert prob.min() >= 0.0 and prob.max() <= 1.0, f"{method.name}: clean_prob outside [0, 1]"
    for name, values in first.columns.items():
        assert name.startswith(f"{method.name}_"), \
            f"{method.name}: column {name!r} must be named {method.name}_<signal>"
        assert np.asarray(values).shape == (n,), f"{method.name}: column {name!r} has shape " \
            f"{np.asarray(values).shape}, expected ({n},)"
    assert np.array_equal(prob, np.asarray(second.clean_prob)), \
        f"{method.name}: the same seed gave different clean_prob"
    for name, values in first.columns.items():
        assert np.array_equal(np.asarray(values), np.asarray(second.columns[name]),
                              equal_nan=True), f"{method.name}: the same seed gave different {name}"
    if first.noise_rate is not None:
        assert 0.0 <= first.noise_rate <= 1.0, f"{method.name}: noise_rate outside [0, 1]"
    if first.partition is not None:
        parts = np.asarray(first.partition, dtype=object)
        assert parts.shape == (n,), f"{method.name}: partition has shape {parts.shape}"
        allowed = {"noisy", "vague", "clean_significant"}
        assert set(parts) <= allowed, \
            f"{method.name}: partition names outside {sorted(allowed)}: {set(parts) - allowed}"
        assert np.array_equal(parts, np.asarray(second.partition, dtype=object)), \
            f"{method.name}: the same seed gave different partitions"
    auroc = detection_metrics(noisy_gt[features.rows], prob).auroc
    assert auroc >= min_auroc, f"{method.name} does not find the injected noise: AUROC " \
        f"{auroc:.3f} of clean_prob against the mismatched pairs, below {min_auroc}"
    if method.trains_matcher:
        assert first.matcher is not None and hasattr(first.matcher, "encode_images"), \
            f"{method.name}: trains a matcher but returns none"
    return first
