"""A bidirectional one-layer GRU's per-caption mean on the CPU, with its own backward.

:class:`ncclean.models.towers.TokenGRU` averages the two directions' outputs over each caption's
words. On the CPU, torch's GRU over packed sequences runs its products on MKL (half this
machine's fp32 rate on AMD processors: :mod:`ncclean.models.linear`) and its backward zeroes and
sums a full-size gradient of the input projections once per time step. :func:`caption_means`
computes the same values (within fp32 rounding: ``tests/models/test_gru.py``) from an
``nn.GRU``'s parameters:

- the input projections of both directions for every word in one oneDNN product;
- the reverse direction as a forward pass over each caption's words in reverse order, so both
  directions step over the same rows (captions sorted longest first; step ``t`` updates the
  captions longer than ``t``) and each step's gates are computed for both at once;
- a hand-written backward through time (:class:`_Recurrence`) that keeps the gates of the
  forward pass, and forms the recurrent weights' gradient in one product over all steps.

A caption's mean does not depend on the order of its words' outputs, so the outputs are summed
per caption straight from the packed rows. The text tower's forward and backward over 128
captions of up to 16 words took 0.62x the time it takes through ``nn.GRU``
(``benchmarks/results/throughput.md``, "the CNN's step on oneDNN's layout and a GRU of our own").
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ncclean.models.linear import linear, product

# oneDNN builds and keeps a kernel for every new shape (about 0.5 ms, and memory: a process
# grew by 800 MB over 300 batches of random caption lengths). Row counts are rounded up to
# these multiples so that few shapes occur: the words of a batch, and the captions of a step.
ROWS = 128
STEP_ROWS = 16


def bucket(count: int, multiple: int) -> int:
    """``count`` rounded up to a multiple of ``multiple``."""
    return -(-count // multiple) * multiple


def _layout(lengths: np.ndarray, width: int) -> tuple[list[int], np.ndarray, np.ndarray,
                                                       np.ndarray]:
    """Packed rows of captions of ``lengths`` (each at least 1) padded to ``width``: the number
    of captions at each step, then per row (step-major, longest caption first) the flat index of
    its word in ``(batch * width)``, the row of the same caption's word read in reverse at that
    step, and the caption."""
    order = np.argsort(-lengths, kind="stable")
    longest = lengths[order]
    active = longest[None, :] > np.arange(longest[0])[:, None]  # (steps, batch)
    sizes = active.sum(axis=1).tolist()
    step, rank = np.nonzero(active)
    caption = order[rank]
    forward = caption * width + step
    backward = caption * width + (longest[rank] - 1 - step)
    row_of = np.empty(len(lengths) * width, dtype=np.int64)
    row_of[forward] = np.arange(len(forward))
    return sizes, forward, row_of[backward], caption


class _Recurrence(torch.autograd.Function):
    """Both directions' recurrences, given their input gates: ``gates`` ``(2, rows, 3H)`` (the
    reverse direction's rows in reverse word order), ``weights`` ``(2, 3H, H)``, ``biases``
    ``(2, 3H)``, ``sizes`` the captions per step -> outputs ``(2, rows, H)``. torch's gate
    order (reset, update, new) and arithmetic: ``n = tanh(i_n + r * (W_hn h + b_hn))``,
    ``h' = (h - n) * z + n``."""

    @staticmethod
    def forward(ctx, gates: torch.Tensor, weights: torch.Tensor, biases: torch.Tensor,
                sizes: list[int]) -> torch.Tensor:
        hidden = weights.shape[2]
        rows, batch = gates.shape[1], sizes[0]
        h = gates.new_zeros(2, batch, hidden)
        out = gates.new_empty(2, rows, hidden)
        reset_update = gates.new_empty(2, rows, 2 * hidden)
        new = gates.new_empty(2, rows, hidden)
        recurrent_new = gates.new_empty(2, rows, hidden)
        previous = gates.new_zeros(2, bucket(rows, ROWS), hidden)  # zero rows past ``rows``
        start = 0
        for size in sizes:
            at = slice(start, start + size)
            h_at = h[:, :size]
            previous[:, at] = h_at
            taken = min(bucket(size, STEP_ROWS), batch)  # extra rows: finished captions' states
            recurrent = torch.stack([product(h[d, :taken], weights[d], biases[d])[:size]
                                     for d in (0, 1)])
            step = gates[:, at]
            gate = torch.add(step[..., :2 * hidden], recurrent[..., :2 * hidden],
                             out=reset_update[:, at]).sigmoid_()
            recurrent_new[:, at] = recurrent[..., 2 * hidden:]
            n = torch.addcmul(step[..., 2 * hidden:], recurrent_new[:, at], gate[..., :hidden],
                              out=new[:, at]).tanh_()
            h[:, :size] = torch.sub(h_at, n, out=out[:, at]).mul_(gate[..., hidden:]).add_(n)
            start += size
        ctx.save_for_backward(reset_update, new, recurrent_new, previous, weights)
        ctx.sizes = sizes
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        reset_update, new, recurrent_new, previous, weights = ctx.saved_tensors
        hidden, rows = weights.shape[2], grad_out.shape[1]
        grad_gates = grad_out.new_empty(2, rows, 3 * hidden)
        padded = previous.shape[1]
        # zero rows past ``rows`` for the weights' gradient; STEP_ROWS more to read past the end
        grad_recurrent = grad_out.new_zeros(2, padded + STEP_ROWS, 3 * hidden)
        grad_h = grad_out.new_zeros(2, ctx.sizes[0], hidden)
        end = rows
        for size in reversed(ctx.sizes):
            at = slice(end - size, end)
            end -= size
            g = grad_h[:, :size] + grad_out[:, at]
            r, z = reset_update[:, at, :hidden], reset_update[:, at, hidden:]
            n, h = new[:, at], previous[:, at]
            d_gates, d_recurrent = grad_gates[:, at], grad_recurrent[:, at]
            d_new = torch.mul(g - g * z, 1 - n * n, out=d_gates[..., 2 * hidden:])
            torch.mul(d_new, recurrent_new[:, at], out=d_recurrent[..., :hidden]) \
                .mul_(r * (1 - r))
            torch.mul(g, h - n, out=d_recurrent[..., hidden:2 * hidden]).mul_(z * (1 - z))
            torch.mul(d_new, r, out=d_recurrent[..., 2 * hidden:])
            d_gates[..., :2 * hidden] = d_recurrent[..., :2 * hidden]
            if end == 0:
                break  # the first step's hidden state is the zero start: no gradient
            taken = grad_recurrent[:, end:end + bucket(size, STEP_ROWS)]  # later rows: discarded
            grad_h[:, :size] = torch.stack(
                [product(taken[d], weights[d].t())[:size] for d in (0, 1)]).add_(g * z)
        grad_recurrent = grad_recurrent[:, :padded]
        grad_weights = torch.stack(
            [product(grad_recurrent[d].t(), previous[d].t()) for d in (0, 1)])
        return grad_gates, grad_weights, grad_recurrent.sum(1), None


def caption_means(gru: nn.GRU, embed: nn.Embedding, dropout: nn.Module, ids: torch.Tensor,
                  lengths: np.ndarray) -> torch.Tensor:
    """The mean over each caption's words of ``gru``'s two directions' average output, reading
    ``dropout(embed(ids))``. ``gru``: one layer, bidirectional, ``batch_first``; ``ids``
    ``(batch, width)`` on the CPU; ``lengths`` ``(batch,)``, each at least 1: the words read.
    Only the words read are embedded."""
    batch, width = ids.shape
    hidden = gru.hidden_size
    if batch == 0:
        return embed.weight.new_zeros(0, hidden)
    sizes, forward, backward, caption = _layout(lengths, width)
    x = dropout(embed(ids.reshape(-1).index_select(0, torch.from_numpy(forward))))
    rows = len(forward)
    both = linear(F.pad(x, (0, 0, 0, bucket(rows, ROWS) - rows)),
                  torch.cat([gru.weight_ih_l0, gru.weight_ih_l0_reverse]),
                  torch.cat([gru.bias_ih_l0, gru.bias_ih_l0_reverse]))[:rows]
    gates = torch.stack([both[:, :3 * hidden],
                         both[:, 3 * hidden:].index_select(0, torch.from_numpy(backward))])
    out = _Recurrence.apply(gates, torch.stack([gru.weight_hh_l0, gru.weight_hh_l0_reverse]),
                            torch.stack([gru.bias_hh_l0, gru.bias_hh_l0_reverse]), sizes)
    total = x.new_zeros(batch, hidden).index_add_(0, torch.from_numpy(caption), out[0] + out[1])
    return total / torch.from_numpy(2.0 * lengths).to(total.dtype)[:, None]
