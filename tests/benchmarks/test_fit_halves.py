"""``benchmarks/fit_halves.py``: each half's AUROC of a fitted run, and gmm's divisions traced on
the pairs it trains on against held-out pairs."""

import pyarrow.parquet as pq

from benchmarks.fit_halves import divisions, halves
from ncclean.api import score
from ncclean.data.schema import Columns
from ncclean.options import ScaleOptions
from tests.pipeline.corpora import vector_table, write_shards


def test_halves_reads_each_half_and_every_scored_column(tmp_path):
    write_shards(vector_table(400, noise=0.4, seed=2), tmp_path / "in", 2)
    score(tmp_path / "in", tmp_path / "out", "clip", columns=Columns(image_emb="img",
          text_emb="txt"), seed=0, cache_dir=False,
          scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / "fit"))
    got = halves(str(tmp_path / "out"), str(tmp_path / "fit"))
    assert [got[h]["n"] for h in ("fitted", "applied", "all")] == [200, 200, 400]
    for half in got.values():
        assert set(half) == {"n", "clean_prob", "clip_sim"}
        assert half["clean_prob"] > 0.9 and half["clip_sim"] > 0.9


def test_divisions_traces_every_division_of_both_networks(tmp_path):
    pq.write_table(vector_table(240, noise=0.4, seed=3), tmp_path / "in.parquet")
    rows = divisions(str(tmp_path / "in.parquet"), 120, 0, {"epochs": "2", "warmup_epochs": "1"},
                     image_col="img", text_col="txt")
    assert [r["division"] for r in rows] == [0, 1, 2]  # two co-training epochs, then the final
    for entry in rows:
        assert len(entry["trained"]) == len(entry["held_out"]) == 2
        assert all(0 <= v <= 1 for v in entry["trained"] + entry["held_out"] + [entry["posterior"]])
