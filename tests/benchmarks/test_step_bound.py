"""``benchmarks/kernels/step_bound.py``: a step's products and its dispatch, taken apart."""

import argparse

import pytest

from benchmarks.kernels.step_bound import bound_rows, render  # puts its siblings on sys.path


def test_a_step_splits_into_its_products_and_its_dispatch():
    args = argparse.Namespace(pairs=600, seed=0, narrow_dim=16, width=8, share=0.5)
    rows = bound_rows("crcl", args, ceiling=400.0)
    assert [r["phase"] for r in rows] == ["after the freeze"]
    row = rows[0]
    assert row["gflop"] > 0.5  # two 512-wide heads on 128 pairs, forward and backward
    # each timed apart: on a loaded machine a part can take longer than the whole did, so
    # the test holds the figures' presence, the benchmark their ratio
    assert row["products_ms"] > 0 and row["narrow_ms"] > 0 and row["step_ms"] > 0
    assert row["allowed_ms"] == pytest.approx(1000 * row["gflop"] / 200.0)
    assert "| crcl | after the freeze |" in render(rows, 0.5)
