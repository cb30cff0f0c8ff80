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


def test_a_part_under_the_budget_uses_the_index_when_the_corpus_is_over_it(tmp_path,
                                                                          monkeypatch):
    from ncclean.pipeline.fit import load_fit

    write_shards(vector_table(600, noise=0.4, seed=3), tmp_path / "in", 4)
    run(tmp_path / "in", tmp_path / "fitted", fit_sample=200, save_fit=tmp_path / "fit")
    fit = load_fit(tmp_path / "fit")
    queries, donors = fit.meta["donor_queries"], len(fit.arrays["donors.keys"])
    assert queries > 150  # about the corpus's noisy pairs (40% of 600), not a shard's
    built = []
    build = index_module.ReferenceIndex
    monkeypatch.setattr(index_module, "ReferenceIndex",
                        lambda refs: built.append(refs.shape) or build(refs))
    # each shard's noisy pairs (about a quarter) are within the budget; the corpus's are not
    monkeypatch.setattr(index_module, "SEARCH_BUDGET", queries * donors - 1)
    index_module._CACHE.clear()
    run(tmp_path / "in", tmp_path / "indexed", fit=tmp_path / "fit")
    index_module._CACHE.clear()
    assert len(built) == 1


def test_the_own_image_is_found_among_pool_keys_with_duplicates():
    from ncclean.pipeline.apply import _same_key

    pool_key = np.array([9, 4, 7, 4, 2], dtype=np.uint64)  # two pool images share key 4
    by_key = np.argsort(pool_key, kind="stable")
    rows, cols = _same_key(np.array([4, 5, 2, 9, 4], dtype=np.uint64), pool_key[by_key], by_key)
    found = sorted(zip(rows.tolist(), cols.tolist()))
    keys = np.array([4, 5, 2, 9, 4], dtype=np.uint64)
    expected = sorted((i, j) for i in range(5) for j in range(5) if keys[i] == pool_key[j])
    assert found == expected == [(0, 1), (0, 3), (2, 4), (3, 0), (4, 1), (4, 3)]


def test_applied_specificity_matches_the_log_softmax_it_stands_for():
    import math
    import types

    import torch

    from ncclean.pipeline.apply import SHARE, TEMPERATURE, _exact_specificity

    rng = np.random.default_rng(0)
    unit = rng.normal(size=(60, 16)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    images, texts = unit[:30], unit[30:]
    pool = np.array([2, 5, 11, 17, 23])
    key = np.arange(30, dtype=np.uint64)
    fit = types.SimpleNamespace(arrays={"pool.images": images[pool], "pool.image_key": key[pool]})
    features = types.SimpleNamespace(image_group=np.arange(30), text_group=np.arange(30))
    values = _exact_specificity(fit, features, types.SimpleNamespace(images=images, texts=texts),
                                np.arange(30), key)
    for i in range(30):
        others = [j for j in pool if j != i]
        logits = torch.tensor([texts[i] @ images[i]] + [texts[i] @ images[j] for j in others])
        log_p = torch.log_softmax(logits / TEMPERATURE, 0)[0].item()
        k = len(pool) + 1
        assert math.isclose(values[i], (log_p + math.log(k)) / (SHARE * math.log(k)),
                            rel_tol=1e-5, abs_tol=1e-5)
