"""``benchmarks/kernels/fit_divisions.py``: gmm's divisions traced on the pairs it trains on
against held-out pairs."""

import pyarrow.parquet as pq

from benchmarks.kernels.fit_divisions import divisions
from tests.pipeline.corpora import vector_table


def test_divisions_traces_every_division_of_both_networks(tmp_path):
    pq.write_table(vector_table(240, noise=0.4, seed=3), tmp_path / "in.parquet")
    rows = divisions(str(tmp_path / "in.parquet"), 120, 0, {"epochs": "2", "warmup_epochs": "1"},
                     image_col="img", text_col="txt")
    assert [r["division"] for r in rows] == [0, 1, 2]  # two co-training epochs, then the final
    for entry in rows:
        assert len(entry["trained"]) == len(entry["held_out"]) == 2
        assert all(0 <= v <= 1 for v in entry["trained"] + entry["held_out"] + [entry["posterior"]])
