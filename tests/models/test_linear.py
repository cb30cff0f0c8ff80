"""The oneDNN linear layer: F.linear's numbers and gradients, torch's path where it does not
apply, the same state dict, and FLOPs the training loop's counter sees."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ncclean.models import linear as onednn
from ncclean.models.linear import Linear, linear

needs_onednn = pytest.mark.skipif(not onednn.available(), reason="no oneDNN linear kernel here")


def _grads(fn, x, weight, bias, grad):
    for t in (x, weight, bias):
        if t is not None:
            t.grad = None
    fn(x, weight, bias).backward(grad)
    return [None if t is None else t.grad.clone() for t in (x, weight, bias)]


@needs_onednn
@pytest.mark.parametrize("rows, d_in, d_out, with_bias", [
    (128, 512, 256, True), (7, 33, 5, True), (1, 16, 3, False), (300, 64, 1, True)])
def test_values_and_gradients_match_torch(rows, d_in, d_out, with_bias):
    gen = torch.Generator().manual_seed(rows + d_in)
    x = torch.randn(rows, d_in, generator=gen, requires_grad=True)
    weight = torch.randn(d_out, d_in, generator=gen, requires_grad=True)
    bias = torch.randn(d_out, generator=gen, requires_grad=True) if with_bias else None
    out = linear(x, weight, bias)
    assert out.grad_fn is not None and "OneDNN" in type(out.grad_fn).__name__  # the fast path
    torch.testing.assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-4)
    grad = torch.randn(rows, d_out, generator=gen)
    ours, theirs = _grads(linear, x, weight, bias, grad), _grads(F.linear, x, weight, bias, grad)
    for a, b in zip(ours, theirs):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


@needs_onednn
def test_a_layer_reading_data_computes_no_input_gradient():
    x = torch.randn(16, 8)  # data: no gradient wanted
    layer = Linear(8, 4)
    layer(x).sum().backward()
    assert layer.weight.grad is not None and x.grad is None


@needs_onednn
def test_transposed_and_offset_views_and_the_same_bytes_twice():
    base = torch.randn(40, 24, generator=torch.Generator().manual_seed(0))
    weight = torch.randn(6, 20, generator=torch.Generator().manual_seed(1))
    view = base[3:23, 2:22].t()  # (20, 20), neither contiguous nor aligned
    torch.testing.assert_close(linear(view, weight), F.linear(view, weight), rtol=1e-5, atol=1e-4)
    assert torch.equal(linear(view, weight), linear(view.contiguous(), weight))


def test_falls_back_to_torch_where_onednn_does_not_apply():
    gen = torch.Generator().manual_seed(2)
    weight64 = torch.randn(3, 5, dtype=torch.float64, generator=gen)
    x64 = torch.randn(4, 5, dtype=torch.float64, generator=gen)
    assert torch.equal(linear(x64, weight64), F.linear(x64, weight64))  # float64
    weight = torch.randn(3, 5, generator=gen)
    x3 = torch.randn(2, 4, 5, generator=gen)
    assert torch.equal(linear(x3, weight), F.linear(x3, weight))  # more than two dimensions
    empty = torch.zeros(0, 5)
    assert linear(empty, weight).shape == (0, 3)  # an empty batch


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("NCCLEAN_ONEDNN", "0")
    onednn.available.cache_clear()
    try:
        assert not onednn.available()
        x, weight = torch.randn(4, 5, requires_grad=True), torch.randn(3, 5)
        assert "OneDNN" not in type(linear(x, weight).grad_fn).__name__
    finally:
        monkeypatch.delenv("NCCLEAN_ONEDNN")
        onednn.available.cache_clear()


def test_same_parameters_and_state_dict_as_nn_linear():
    torch.manual_seed(3)
    ours = Linear(6, 4)
    torch.manual_seed(3)
    theirs = nn.Linear(6, 4)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs.state_dict()[key])  # the same initial draw
    theirs.load_state_dict(ours.state_dict())


@needs_onednn
def test_flop_counter_counts_the_products():
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(32, 64)
    layer = Linear(64, 16)
    with FlopCounterMode(display=False) as counter:
        layer(x).sum().backward()
    # forward 2*32*64*16 and the weight gradient the same; no input gradient for data
    assert counter.get_total_flops() == 2 * 2 * 32 * 64 * 16



def test_operands_go_to_onednn_by_rows_or_by_columns():
    matrix = torch.randn(6, 4)
    assert onednn._dense(matrix) is matrix and onednn._dense(matrix.t()).data_ptr() == \
        matrix.data_ptr()  # transposed views pass as they are
    expanded = torch.ones(()).expand(6, 4)
    dense = onednn._dense(expanded)
    assert dense.is_contiguous() and torch.equal(dense, expanded)


@needs_onednn
def test_expanded_operands_take_the_fast_path_in_time():
    """The gradient of a sum is an expanded tensor (stride 0); given to oneDNN as it is, one
    product of these shapes took about 45 ms instead of well under 1 ms."""
    import time

    layer = Linear(256, 128)
    data = torch.ones(()).expand(128, 256)
    linear(data, layer.weight).sum().backward()
    began = time.perf_counter()
    for _ in range(20):
        linear(data, layer.weight).sum().backward()
    assert time.perf_counter() - began < 0.3
