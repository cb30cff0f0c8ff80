"""EfficientNet-Lite's fused network in int8 on oneDNN (the quantized convolutions ``torch.compile``
emits for x86 int8 models, called directly).

EfficientNet-Lite was designed for int8 inference: ReLU6 activations and no squeeze-and-excitation.
Every convolution of :class:`ncclean.models.imagenet_fused.FusedEfficientNet` (batch norm folded)
runs with int8 weights, one scale per output channel (symmetric, largest weight at 127), on uint8
activations, accumulating in int32, and writes uint8 for the next one:

- the input: the image's pixels themselves (the network reads ``(p - 127) / 128``: scale 1/128,
  zero point 127, exact);
- the output of a convolution with ReLU6: ``[0, 6]`` at scale 6/255, the clamp being uint8's range;
- the output of a block's projection (no activation, the residual stream): a range per block,
  fixed in :data:`RANGES` (calibrated once, :func:`calibrate`), asymmetric (a zero point), the
  block's residual added inside its projection;
- the head: float32 out, pooled in float32.

The vectors are those of the fp32 network up to int8 rounding, larger than float rounding
(measured on clip art in ``benchmarks/results/image-tower.md``); their cache key says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ncclean.models.imagenet_fused import FusedConv, FusedEfficientNet

_ONE = [1, 1]
_RELU6_SCALE = 6.0 / 255
# The residual stream's range, block by block (the projections' outputs, the residual added), per
# weight file: the range minimising the uint8 rounding's squared error on 128 clip-art images
# (``calibrate``; ``benchmarks/kernels/image_tower.py CLIPART --calibrate`` prints them).
RANGES: dict[str, tuple[tuple[float, float], ...]] = {
    "efficientnet-lite0-57934424.pth": (
        (-28.12, 32.22), (-47.22, 42.97), (-55.63, 49.03), (-35.91, 41.93), (-36.40, 43.22),
        (-30.50, 31.92), (-28.42, 33.29), (-29.89, 33.91), (-31.12, 26.17), (-32.70, 30.17),
        (-39.31, 33.34), (-28.23, 27.60), (-26.41, 29.00), (-28.28, 33.60), (-31.74, 34.21),
        (-13.40, 15.02)),
}


def available() -> bool:
    """Whether this torch has oneDNN's quantized convolutions and this CPU multiplies int8
    natively (VNNI), without AMX: on a processor with AMX tiles oneDNN's int8 convolutions give
    an image a vector that depends on how many images share its batch (up to 0.1 apart in a
    coordinate, measured on a Xeon with ``amx_int8``), so the same corpus would give other
    bytes on another thread count or shard."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops, "onednn")
            and hasattr(torch.ops.onednn, "qconv2d_pointwise")
            and torch.cpu._is_vnni_supported() and not _amx_int8())


def _amx_int8() -> bool:
    """Whether this processor has AMX's int8 tiles (Linux's ``amx_int8`` flag)."""
    from ncclean.device import cpu_flags

    return "amx_int8" in cpu_flags()


@dataclass
class QuantizedConv:
    """One :class:`FusedConv` in int8: uint8 ``(B, C, H, W)`` channels-last at
    (``in_scale``, ``in_zero``) -> uint8 at (``out_scale``, ``out_zero``), or float32 when
    ``out_dtype`` is float32."""

    conv: FusedConv
    in_scale: float
    in_zero: int
    out_scale: float
    out_zero: int
    out_dtype: torch.dtype | None  # None: uint8
    weight: torch.Tensor  # int8, in oneDNN's layout for batches of ``batch``
    weight_scales: torch.Tensor  # (C_out,) float32
    weight_zeros: torch.Tensor  # (C_out,) int64, zero

    @classmethod
    def of(cls, conv: FusedConv, in_scale: float, in_zero: int, out_range: tuple[float, float],
           batch: int, out_dtype: torch.dtype | None = None) -> QuantizedConv:
        """``conv`` quantized, its output at ``out_range`` (``(low, high)``, zero inside)."""
        weight = conv.weight.float()
        scales = (weight.abs().amax(dim=(1, 2, 3)) / 127).clamp(min=1e-12)
        quantized = torch.round(weight / scales[:, None, None, None]).clamp(-127, 127) \
            .to(torch.int8).contiguous(memory_format=torch.channels_last)
        shape = [batch, weight.shape[1] * conv.groups, conv.side, conv.side]
        packed = torch.ops.onednn.qconv_prepack(quantized, scales, in_scale, in_zero, conv.stride,
                                                conv.padding, _ONE, conv.groups, shape)
        low, high = out_range
        out_scale = (high - low) / 255
        return cls(conv, in_scale, in_zero, out_scale, int(round(-low / out_scale)), out_dtype,
                   packed, scales, torch.zeros(len(scales), dtype=torch.int64))

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                 residual_scale: float = 1.0, residual_zero: int = 0) -> torch.Tensor:
        conv, ops = self.conv, torch.ops.onednn
        head = (x, self.in_scale, self.in_zero, self.weight, self.weight_scales,
                self.weight_zeros)
        if residual is not None:  # residual += conv(x), in place, requantized
            return ops.qconv2d_pointwise.binary(
                *head, residual, conv.bias.float(), conv.stride, conv.padding, _ONE, conv.groups,
                self.out_scale, self.out_zero, self.out_dtype, residual_scale, residual_zero,
                "sum", 1.0, "none", [], "")
        unary, scalars = ("hardtanh", [0.0, 6.0]) if conv.relu6 else ("none", [])
        return ops.qconv2d_pointwise(*head, conv.bias.float(), conv.stride, conv.padding, _ONE,
                                     conv.groups, self.out_scale, self.out_zero, self.out_dtype,
                                     unary, scalars, "")


class QuantizedEfficientNet:
    """:class:`FusedEfficientNet` in int8: ``(B, 3, S, S)`` uint8 pixels (channels-last) ->
    ``(B, C)`` float32 pooled features, fastest in batches of ``batch``."""

    def __init__(self, fused: FusedEfficientNet, ranges: tuple[tuple[float, float], ...],
                 batch: int):
        if len(ranges) != len(fused.blocks):
            raise ValueError(f"{len(ranges)} ranges for {len(fused.blocks)} blocks")
        relu6 = (0.0, 6.0)
        self.stem = QuantizedConv.of(fused.stem, 1 / 128, 127, relu6, batch)
        scale, zero = self.stem.out_scale, self.stem.out_zero
        self.blocks: list[tuple[list[QuantizedConv], bool]] = []
        for (convs, skip), projection in zip(fused.blocks, ranges):
            quantized = []
            for conv in convs:
                out = relu6 if conv.relu6 else projection
                quantized.append(QuantizedConv.of(conv, scale, zero, out, batch))
                scale, zero = quantized[-1].out_scale, quantized[-1].out_zero
            self.blocks.append((quantized, skip))
        self.head = QuantizedConv.of(fused.head, scale, zero, (0.0, 255.0), batch, torch.float32)

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.stem(pixels)
        for convs, skip in self.blocks:
            shortcut = x  # the block's input, read by its first convolution only
            for conv in convs[:-1]:
                x = conv(x)
            last = convs[-1]
            x = last(x, shortcut, convs[0].in_scale, convs[0].in_zero) if skip else last(x)
        return self.head(x).mean((2, 3))


def calibrate(fused: FusedEfficientNet, batches) -> tuple[tuple[float, float], ...]:
    """The residual stream's ranges for :data:`RANGES`: for each block, the ``(low, high)`` that
    minimises the squared error of rounding its output to uint8, over ``batches`` of float32
    ``(B, 3, S, S)`` images (20,000 values drawn per batch and block, seed 0)."""
    generator = torch.Generator().manual_seed(0)
    drawn: list[list[torch.Tensor]] = [[] for _ in fused.blocks]
    with torch.inference_mode():
        for x in batches:
            x = fused.stem(x)
            for k, (convs, skip) in enumerate(fused.blocks):
                shortcut = x.clone()
                for conv in convs[:-1]:
                    x = conv(x)
                x = convs[-1](x, shortcut if skip else None)
                flat = x.flatten().float()
                drawn[k].append(flat[torch.randint(len(flat), (20_000,), generator=generator)])
    shrink = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2]
    ranges = []
    for values in drawn:
        v = torch.cat(values)
        low, high = min(v.min().item(), 0.0), max(v.max().item(), 0.0)
        best = (float("inf"), low, high)
        for a in shrink:
            for b in shrink:
                lo, hi = low * a, high * b
                scale = (hi - lo) / 255
                zero = round(-lo / scale)
                error = ((torch.round(v / scale + zero).clamp(0, 255) - zero) * scale - v) \
                    .pow(2).mean().item()
                best = min(best, (error, lo, hi))
        ranges.append((round(best[1], 2), round(best[2], 2)))
    return tuple(ranges)
