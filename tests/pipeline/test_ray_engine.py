"""The ray engine writes what the local engine writes (same fit, same seed, same bytes)."""

from __future__ import annotations

import json

import pytest

from ncclean.api import score
from ncclean.data.schema import Columns
from ncclean.options import ScaleOptions
from tests.pipeline.corpora import vector_table, write_shards

pytest.importorskip("ray")


def test_ray_and_local_write_the_same_shards(tmp_path):
    write_shards(vector_table(500, seed=5), tmp_path / "in", 4)
    kwargs = {"columns": Columns(image_emb="img", text_emb="txt"), "cache_dir": False, "seed": 2}
    local = score(tmp_path / "in", tmp_path / "local", "clip",
                  scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / "fit"), **kwargs)
    ray = score(tmp_path / "in", tmp_path / "ray", "clip",
                scale=ScaleOptions(fit=tmp_path / "fit", engine="ray"), **kwargs)
    names = sorted(p.name for p in (tmp_path / "local").glob("*.parquet"))
    assert names == sorted(p.name for p in (tmp_path / "ray").glob("*.parquet"))
    assert len(names) == 4
    for name in names:
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes()
    assert ray.partition_counts == local.partition_counts
    shards = json.loads((tmp_path / "ray" / "ncclean.json").read_text())["shards"]
    assert [s["stem"] for s in shards] == [n[:-8] for n in names]
