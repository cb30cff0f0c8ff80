"""Applying a fit beyond the search budget: the reference sets' indexes are built once per
process, not per shard or batch, and give what the exact search gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ncclean.stages.index as index_module
from tests.pipeline.corpora import vector_table, write_shards
from tests.pipeline.test_fit_apply import run

pytest.importorskip("faiss")


def scored(folder):
    return pa.concat_tables([pq.read_table(p) for p in sorted(folder.glob("*.parquet"))])


def test_applying_over_the_budget_builds_each_index_once_and_matches_exact(tmp_path,
                                                                          monkeypatch):
    write_shards(vector_table(600, noise=0.4, seed=3), tmp_path / "in", 4)
    run(tmp_path / "in", tmp_path / "exact", fit_sample=200, save_fit=tmp_path / "fit")

    built = []
    build = index_module.ReferenceIndex
    monkeypatch.setattr(index_module, "ReferenceIndex",
                        lambda refs: built.append(refs.shape) or build(refs))
    monkeypatch.setattr(index_module, "SEARCH_BUDGET", 10)  # every shard over the budget
    index_module._CACHE.clear()
    run(tmp_path / "in", tmp_path / "indexed", fit=tmp_path / "fit")  # apply only, 4 shards
    index_module._CACHE.clear()
    assert len(built) == 1  # the donors' captions, once (the pool is searched exactly)

    exact, indexed = scored(tmp_path / "exact"), scored(tmp_path / "indexed")
    for name in ("pseudo_caption_id", "clean_prob"):
        assert indexed.column(name).equals(exact.column(name))
    assert np.allclose(np.asarray(indexed.column("pseudo_caption_score").to_pylist(), float),
                       np.asarray(exact.column("pseudo_caption_score").to_pylist(), float),
                       atol=1e-5, equal_nan=True)
    significance = [np.asarray(t.column("significance").to_pylist(), float)
                    for t in (indexed, exact)]
    assert np.allclose(*significance, atol=1e-3, equal_nan=True)
    parts = [np.asarray(t.column("partition").to_pylist()) for t in (indexed, exact)]
    assert (parts[0] == parts[1]).mean() > 0.99
