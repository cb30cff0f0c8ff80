"""EfficientNet-Lite inference on the CPU as a flat list of fused convolutions.

timm's network runs every convolution, batch norm, ReLU6 and residual addition as its own pass
over memory, and copies the input of every stride-2 "same" convolution to pad it. For inference,
:func:`fuse` folds each batch norm into the convolution before it (weight scaled, bias added) and
runs each convolution as one oneDNN primitive (PyTorch's ``mkldnn`` operators, the ones
``torch.compile`` emits) with the ReLU6 or the block's residual addition done inside it and the
weights reordered once into oneDNN's layout. TensorFlow's asymmetric "same" padding of a stride-2
convolution (one row and column more after than before) becomes symmetric padding of a kernel one
larger whose first row and column are zero: the same sums, with no padded copy of the input.

The features equal timm's up to float rounding (:data:`TOLERANCE`, checked on a random batch when
the network is fused). :meth:`FusedEfficientNet.to_bf16` runs the same convolutions with bfloat16
weights and activations (oneDNN accumulates each sum in fp32; the pooled features are fp32): about
twice as fast where the CPU multiplies bfloat16 natively, at bfloat16's rounding. Where the oneDNN
operators are missing or disagree, the same folded convolutions run through
``torch.nn.functional``, and where the network's structure is not the one this module knows,
:func:`fuse` returns ``None`` (the caller keeps timm's network).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# Largest absolute difference accepted from timm's features (which reach about 6: ReLU6, pooled).
TOLERANCE = 1e-4
_ONE = [1, 1]


class _Unknown(Exception):
    """The network holds a module this module does not fold."""


@dataclass
class FusedConv:
    """One convolution with its batch norm folded in: ``(B, C, H, W)`` float32 channels-last in,
    the same out, ReLU6 applied when ``relu6``, a residual added when one is passed."""

    weight: torch.Tensor
    bias: torch.Tensor
    padding: list[int]
    stride: list[int]
    groups: int
    relu6: bool
    side: int  # the input's side
    onednn: bool = False
    packed: torch.Tensor | None = None  # the weight in oneDNN's layout for batches of ``batch``
    batch: int = 0

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.onednn:
            ops = torch.ops.mkldnn
            weight = self.packed if len(x) == self.batch else self.weight
            if residual is not None:  # residual += conv(x), in place
                return ops._convolution_pointwise_.binary(
                    residual, x, weight, self.bias, self.padding, self.stride, _ONE,
                    self.groups, "add", None, None, [], None)
            unary, scalars = ("hardtanh", [0.0, 6.0]) if self.relu6 else ("none", [])
            return ops._convolution_pointwise(x, weight, self.bias, self.padding, self.stride,
                                              _ONE, self.groups, unary, scalars, "")
        y = F.conv2d(x, self.weight, self.bias, self.stride, self.padding, 1, self.groups)
        if self.relu6:
            y.clamp_(0.0, 6.0)
        return y if residual is None else y.add_(residual)

    def to_onednn(self, batch: int) -> None:
        """Run on oneDNN from now on, with the weight reordered once into oneDNN's layout for
        batches of ``batch`` (other batch sizes read the plain weight: a layout chosen for one
        batch size can be ten times slower at another, as 1x1 convolutions on 8 x 8 are)."""
        shape = [batch, self.weight.shape[1] * self.groups, self.side, self.side]
        self.packed = torch.ops.mkldnn._reorder_convolution_weight(
            self.weight, self.padding, self.stride, _ONE, self.groups, shape)
        self.batch, self.onednn = batch, True


def _fold(conv, norm, size: int) -> tuple[FusedConv, int]:
    """``conv`` then ``norm`` (timm's ``BatchNormAct2d``) as one :class:`FusedConv` for inputs of
    side ``size``; with the output side."""
    act = getattr(norm, "act", None)
    relu6 = isinstance(act, torch.nn.ReLU6)
    if not (relu6 or isinstance(act, torch.nn.Identity)) \
            or not isinstance(getattr(norm, "drop", torch.nn.Identity()), torch.nn.Identity) \
            or conv.dilation != (1, 1) or conv.kernel_size[0] != conv.kernel_size[1] \
            or conv.stride[0] != conv.stride[1]:
        raise _Unknown(f"{type(conv).__name__} + {type(norm).__name__}")
    scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
    weight = conv.weight * scale[:, None, None, None]
    bias = norm.bias - norm.running_mean * scale
    if conv.bias is not None:
        bias = bias + conv.bias * scale
    k, s = conv.kernel_size[0], conv.stride[0]
    if type(conv).__name__ == "Conv2dSame":  # TensorFlow's "same": pad to ceil(size / s) out
        out = math.ceil(size / s)
        total = max((out - 1) * s + k - size, 0)
        before, after = total // 2, total - total // 2
    elif isinstance(conv.padding, tuple) and conv.padding[0] == conv.padding[1]:
        before = after = conv.padding[0]
        out = (size + 2 * before - k) // s + 1
    else:
        raise _Unknown(f"padding {conv.padding!r}")
    if after == before + 1:  # a zero first row and column: symmetric padding computes the same
        weight = F.pad(weight, (1, 0, 1, 0))
        before = after
    elif after != before:
        raise _Unknown(f"padding {before} before, {after} after")
    weight = weight.detach().contiguous(memory_format=torch.channels_last)
    return FusedConv(weight, bias.detach().contiguous(), [before, before], [s, s], conv.groups,
                     relu6, size), out


def _block_parts(block) -> list[tuple[str, str]]:
    """(convolution, norm) attribute names of a timm EfficientNet block, in order."""
    for name in ("se", "aa"):
        if not isinstance(getattr(block, name, torch.nn.Identity()), torch.nn.Identity):
            raise _Unknown(f"{type(block).__name__}.{name}")
    if getattr(block, "conv_s2d", None) is not None:
        raise _Unknown("space-to-depth")
    kind = type(block).__name__
    if kind == "InvertedResidual":
        return [("conv_pw", "bn1"), ("conv_dw", "bn2"), ("conv_pwl", "bn3")]
    if kind == "DepthwiseSeparableConv":
        return [("conv_dw", "bn1"), ("conv_pw", "bn2")]
    raise _Unknown(kind)


class FusedEfficientNet:
    """timm's EfficientNet-Lite with folded, fused convolutions: ``(B, 3, S, S)`` float32
    channels-last -> ``(B, C)`` float32 globally pooled features, ``S`` fixed at fusing."""

    def __init__(self, network, size: int):
        self.size = size
        self.stem, side = _fold(network.conv_stem, network.bn1, size)
        self.blocks: list[tuple[list[FusedConv], bool]] = []
        for stage in network.blocks:
            for block in stage:
                convs = []
                for conv, norm in _block_parts(block):
                    fused, side = _fold(getattr(block, conv), getattr(block, norm), side)
                    convs.append(fused)
                self.blocks.append((convs, bool(block.has_skip)))
        self.head, _ = _fold(network.conv_head, network.bn2, side)
        self.onednn = False
        self.dtype = torch.float32  # of the weights and activations

    def convs(self) -> list[FusedConv]:
        return [self.stem, *(c for convs, _ in self.blocks for c in convs), self.head]

    def to_onednn(self, batch: int) -> None:
        for conv in self.convs():
            conv.to_onednn(batch)
        self.onednn = True

    def to_bf16(self) -> None:
        """Weights, biases and activations in bfloat16 from now on (on oneDNN only; call after
        :meth:`to_onednn`); the input may stay float32 and the output stays float32."""
        if not self.onednn:
            raise RuntimeError("bfloat16 runs on oneDNN only")
        for conv in self.convs():
            conv.weight, conv.bias = conv.weight.to(torch.bfloat16), conv.bias.to(torch.bfloat16)
            conv.to_onednn(conv.batch)
        self.dtype = torch.bfloat16

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x.to(self.dtype))
        for convs, skip in self.blocks:
            shortcut = x
            for conv in convs[:-1]:
                x = conv(x)
            x = convs[-1](x, shortcut if skip else None)
        return self.head(x).float().mean((2, 3))


def fuse(network, size: int, batch: int = 4) -> FusedEfficientNet | None:
    """The fused form of timm's EfficientNet-Lite ``network`` (evaluation mode, CPU) for inputs
    of side ``size``, fastest in batches of ``batch``: on oneDNN where its operators are present
    and agree with ``network`` within :data:`TOLERANCE` on a random batch (and on one image), else
    through ``torch.nn.functional``; ``None`` where the network holds a module this does not fold
    or neither form agrees."""
    try:
        with torch.inference_mode():
            fused = FusedEfficientNet(network, size)
    except _Unknown:
        return None
    generator = torch.Generator().manual_seed(0)
    x = (torch.rand(batch, 3, size, size, generator=generator) * 2 - 1) \
        .contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        expected = network(x)
        if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_convolution_pointwise"):
            try:
                fused.to_onednn(batch)
                if _agrees(fused(x), expected) and _agrees(fused(x[:1]), expected[:1]):
                    return fused
            except RuntimeError:
                pass
            for conv in fused.convs():
                conv.onednn = False
            fused.onednn = False
        return fused if _agrees(fused(x), expected) else None


def _agrees(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return got.shape == expected.shape and bool((got - expected).abs().max() <= TOLERANCE)
