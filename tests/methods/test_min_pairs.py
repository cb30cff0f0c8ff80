"""Each method declares the smallest corpus it was measured to rank well on; below it ``score``
warns in one line, and ``ncclean methods NAME`` says so."""

from __future__ import annotations

import pyarrow.parquet as pq

from ncclean import api
from ncclean.data.schema import Columns
from ncclean.methods.base import get_method
from tests.pipeline.corpora import vector_table


def test_below_its_measured_minimum_a_method_warns(tmp_path):
    pq.write_table(vector_table(200), tmp_path / "in.parquet")
    assert get_method("gmm").min_pairs > 200 and get_method("clip").min_pairs == 0
    columns = Columns(image_emb="img", text_emb="txt")
    summary = api.score(tmp_path / "in.parquet", tmp_path / "gmm.parquet", "gmm",
                        {"epochs": 2, "warmup_epochs": 1, "pool_size": 64}, columns=columns,
                        cache_dir=False)
    said = [w for w in summary.warnings if "was measured to need" in w]
    assert len(said) == 1 and said[0].startswith("200 pairs is below the 1,200 that gmm")
    clip = api.score(tmp_path / "in.parquet", tmp_path / "clip.parquet", "clip",
                     columns=columns, cache_dir=False)
    assert not [w for w in clip.warnings if "was measured to need" in w]
    described = api.methods("gmm")[0]
    assert described["min_pairs"] == 1200
