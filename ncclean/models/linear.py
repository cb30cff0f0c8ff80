"""Linear layers whose fp32 products run through oneDNN on x86 CPUs.

torch multiplies fp32 matrices on the CPU with MKL's ``sgemm``. On AMD processors MKL takes its
AVX2 path even where the processor has AVX-512, while oneDNN (also inside every x86 torch wheel)
uses the widest instructions the processor has: on this project's Zen 5 machine oneDNN multiplies
a head's 128x512 by 512x512 product at about twice MKL's rate, the same fp32 arithmetic
(``benchmarks/results/throughput.md``, "the machine's ceiling is oneDNN's"). :func:`linear` sends
a layer's forward product and both backward products through oneDNN's dense linear kernel (the
one ``torch.compile`` uses for inference) and everything else through ``F.linear``; :class:`Linear`
is ``nn.Linear`` with that forward, the same parameters and state dict. The scoring passes' block
products against small pools call :func:`linear` too, and the GRU's own recurrence
(:mod:`ncclean.models.gru`) calls :func:`product`, the same dispatch outside autograd.

Set ``NCCLEAN_ONEDNN=0`` to use torch's own path everywhere (benchmarks compare the two).
"""

from __future__ import annotations

import functools
import os
import platform

import torch
import torch.nn.functional as F
from torch import nn


@functools.cache
def available() -> bool:
    """Whether layers use oneDNN: :func:`kernel_available` and ``NCCLEAN_ONEDNN`` does not
    turn it off."""
    if os.environ.get("NCCLEAN_ONEDNN", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return kernel_available()


@functools.cache
def kernel_available() -> bool:
    """Whether this torch has oneDNN's dense linear kernel on this machine (x86 builds with
    oneDNN). The first call also registers the kernel's cost with torch's FLOP counter."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        kernel = torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return False
    _count_flops(kernel)
    return True


def _dense(matrix: torch.Tensor) -> torch.Tensor:
    """``matrix`` if it is stored by rows or by columns, else a copy stored by rows: oneDNN
    takes either order as it is but slows a thousandfold on other strides (the expanded
    gradient of a sum, for one)."""
    if matrix.is_contiguous() or matrix.t().is_contiguous():
        return matrix
    return matrix.contiguous()


def _product(x: torch.Tensor, weight: torch.Tensor,
             bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T (+ bias)`` by oneDNN: ``x`` ``(n, k)``, ``weight`` ``(m, k)``, either
    may be a transposed view."""
    return torch.ops.mkldnn._linear_pointwise(_dense(x), _dense(weight), bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """``x @ weight.T + bias`` with oneDNN's products forward and backward (the input gradient
    only where it is needed: a layer reading data computes none)."""

    # The forward takes ``ctx`` itself: with a separate ``setup_context`` torch binds every
    # call's arguments to the forward's signature through ``inspect`` (16 against 27 us a call
    # on small tensors here; 24 calls in a gmm co-training step).
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _product(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = _product(grad, weight.t())
        if ctx.needs_input_grad[1]:
            grad_weight = _product(grad.t(), x.t())
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return grad_x, grad_weight, grad_bias


def _on_onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return (x.dim() == 2 and x.numel() > 0 and weight.numel() > 0 and x.dtype == torch.float32
            and weight.dtype == torch.float32
            and x.device.type == "cpu" and weight.device.type == "cpu" and x.layout == torch.strided
            and (bias is None or bias.dtype == torch.float32) and available())


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) \
        -> torch.Tensor:
    """``F.linear(x, weight, bias)``: ``x`` ``(n, in)``, ``weight`` ``(out, in)``, ``bias``
    ``(out,)`` or ``None`` -> ``(n, out)``. Dense fp32 matrices on the CPU go through oneDNN
    (where :func:`available`), anything else (another dtype or device, more dimensions, an
    empty operand) through ``F.linear``. Also the matrix product ``x @ weight.T`` of two
    blocks of vectors."""
    if _on_onednn(x, weight, bias):
        return _OneDNNLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) \
        -> torch.Tensor:
    """:func:`linear` outside autograd, for code that writes its own backward (the GRU's
    recurrence): no graph, no autograd node per call. Either operand may be a transposed
    view."""
    if _on_onednn(x, weight, bias):
        return _product(x, weight, bias)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """``nn.Linear`` whose forward is :func:`linear` (the same parameters and state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def _count_flops(kernel) -> None:
    """Teach torch's ``FlopCounterMode`` (the training loop's counter) the kernel's cost:
    ``2 n in out``, as it counts ``addmm``."""
    from torch.utils.flop_counter import flop_registry, register_flop_formula

    if kernel in flop_registry:
        return

    @register_flop_formula(kernel)
    def _flop(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
        rows = 1
        for size in x_shape[:-1]:
            rows *= size
        return 2 * rows * x_shape[-1] * w_shape[0]
