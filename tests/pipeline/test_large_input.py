"""A large input: a shard is applied part by part (whole row groups) with the same result as
whole, and ``--fit-sample auto`` fits a corpus of vector columns larger than the sample on a
sample of it, keeping the one pass for anything smaller."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ncclean.options
import ncclean.pipeline.shard
from ncclean.api import score
from ncclean.data.parquet import open_pairs, windows
from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError
from ncclean.options import ScaleOptions
from tests.pipeline.corpora import vector_table

COLUMNS = Columns(image_emb="img", text_emb="txt")


def test_windows_cover_every_row_group_once_in_order(tmp_path):
    pq.write_table(vector_table(1000), tmp_path / "in.parquet", row_group_size=90)
    parts = windows(open_pairs(tmp_path / "in.parquet"), 200)
    groups = [g for part in parts for g in part.shards[0].row_groups]
    assert groups == list(range(12))  # 11 groups of 90 and one of 10
    assert [p.n_rows for p in parts] == [270, 270, 270, 190]
    ids = [i for p in parts for _, _, b in p.iter_batches(["id"]) for i in b.column(0).to_pylist()]
    assert ids == [f"p{k}" for k in range(1000)]


def one_vector_per_caption(table: pa.Table) -> pa.Table:
    """``table`` with every repeat of a caption given its first row's caption vector, as a text
    encoder gives (a corpus's caption groups are by text)."""
    first: dict[str, int] = {}
    rows = [first.setdefault(c, k) for k, c in enumerate(table.column("caption").to_pylist())]
    return table.set_column(table.schema.get_field_index("txt"), "txt",
                            table.column("txt").take(pa.array(rows)))


@pytest.mark.parametrize("method", ["clip", "gmm"])
def test_a_shard_applied_in_parts_writes_what_it_writes_whole(method, tmp_path, monkeypatch):
    table = one_vector_per_caption(vector_table(600))
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=64)
    params = {"epochs": "2", "warmup_epochs": "1"} if method == "gmm" else None
    score(tmp_path / "in.parquet", tmp_path / "whole.parquet", method, params, columns=COLUMNS,
          seed=1, cache_dir=False, scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / "fit"))
    monkeypatch.setattr(ncclean.pipeline.shard, "APPLY_ROWS", 100)
    monkeypatch.setattr(ncclean.pipeline.shard, "_caption_counts",
                        counting(ncclean.pipeline.shard._caption_counts))
    score(tmp_path / "in.parquet", tmp_path / "parts.parquet", columns=COLUMNS,
          cache_dir=False, scale=ScaleOptions(fit=tmp_path / "fit"))
    assert counting.calls == 1  # the shard's caption counts, read once for every part
    whole = pq.read_table(tmp_path / "whole.parquet")
    parts = pq.read_table(tmp_path / "parts.parquet")
    assert parts.num_rows == 600
    for name in ("id", "partition", "clean_prob", "pseudo_caption"):
        assert parts.column(name).equals(whole.column(name)), name
    # the specificity's log-sum-exp may round a last bit differently in another block shape
    assert np.allclose(parts.column("significance").to_numpy(zero_copy_only=False),
                       whole.column("significance").to_numpy(zero_copy_only=False),
                       rtol=1e-6, atol=1e-6, equal_nan=True)
    assert pq.ParquetFile(tmp_path / "parts.parquet").metadata.num_row_groups > 1


def counting(function):
    counting.calls = 0

    def wrapped(*args, **kwargs):
        counting.calls += 1
        return function(*args, **kwargs)
    return wrapped


def test_auto_fit_sample_fits_a_large_corpus_on_a_sample(tmp_path, monkeypatch):
    pq.write_table(vector_table(400), tmp_path / "in.parquet")
    monkeypatch.setattr(ncclean.options, "AUTO_FIT_SAMPLE", 150)
    summary = score(tmp_path / "in.parquet", tmp_path / "auto.parquet", "clip", columns=COLUMNS,
                    seed=1, cache_dir=False)
    record = json.loads((tmp_path / "auto.parquet.json").read_text())
    assert record["fit"]["sample"]["n_pairs"] == 150
    assert record["fit"]["sample"]["n_corpus"] == 400
    assert summary.n_pairs == 400 and pq.read_table(tmp_path / "auto.parquet").num_rows == 400
    # all: the one pass, on every pair
    score(tmp_path / "in.parquet", tmp_path / "all.parquet", "clip", columns=COLUMNS, seed=1,
          cache_dir=False, scale=ScaleOptions(fit_sample="all"))
    assert "fit" not in json.loads((tmp_path / "all.parquet.json").read_text())


def test_auto_fit_sample_keeps_the_one_pass_for_small_corpora_and_without_ids(tmp_path,
                                                                           monkeypatch):
    table = vector_table(400)
    pq.write_table(table, tmp_path / "in.parquet")
    pq.write_table(table.drop_columns(["id"]), tmp_path / "no-id.parquet")
    score(tmp_path / "in.parquet", tmp_path / "small.parquet", "clip", columns=COLUMNS, seed=1,
          cache_dir=False)
    assert "fit" not in json.loads((tmp_path / "small.parquet.json").read_text())
    monkeypatch.setattr(ncclean.options, "AUTO_FIT_SAMPLE", 150)
    score(tmp_path / "no-id.parquet", tmp_path / "no-id-out.parquet", "clip", columns=COLUMNS,
          seed=1, cache_dir=False)
    assert "fit" not in json.loads((tmp_path / "no-id-out.parquet.json").read_text())


def test_a_bad_fit_sample_is_one_line(tmp_path):
    with pytest.raises(BadOptionError, match="--fit-sample"):
        ScaleOptions(fit_sample="most")
    with pytest.raises(BadOptionError, match="--fit-sample"):
        ScaleOptions(fit_sample=1)


def test_a_shard_of_one_large_row_group_is_applied_in_parts(tmp_path, monkeypatch):
    table = one_vector_per_caption(vector_table(600))
    pq.write_table(table, tmp_path / "in.parquet")  # one row group of 600 rows
    score(tmp_path / "in.parquet", tmp_path / "whole.parquet", "clip", columns=COLUMNS, seed=1,
          cache_dir=False, scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / "fit"))
    monkeypatch.setattr(ncclean.pipeline.shard, "APPLY_ROWS", 100)
    sizes = []
    monkeypatch.setattr(ncclean.pipeline.shard, "_apply_part",
                        spy(ncclean.pipeline.shard._apply_part, sizes))
    score(tmp_path / "in.parquet", tmp_path / "parts.parquet", columns=COLUMNS,
          cache_dir=False, scale=ScaleOptions(fit=tmp_path / "fit"))
    assert sizes == [100] * 6
    whole = pq.read_table(tmp_path / "whole.parquet")
    parts = pq.read_table(tmp_path / "parts.parquet")
    for name in ("id", "caption", "img", "partition", "clean_prob", "pseudo_caption"):
        assert parts.column(name).equals(whole.column(name)), name


def spy(function, sizes):
    def wrapped(fit, part, *args, **kwargs):
        sizes.append(part.n_rows)
        return function(fit, part, *args, **kwargs)
    return wrapped


def test_a_sampled_fit_sizes_its_significance_pool_for_the_whole_corpus(tmp_path, monkeypatch):
    import ncclean.stages
    from ncclean.data.results import CLEAN_INSIGNIFICANT, CLEAN_SIGNIFICANT, PARTITIONS
    from ncclean.pipeline.fit import load_fit

    pq.write_table(vector_table(400), tmp_path / "in.parquet")
    monkeypatch.setattr(ncclean.stages, "MIN_REFERENCES", 1)
    monkeypatch.setattr(ncclean.stages, "SEARCH_BUDGET", 4_000)
    sizes = {}
    for name, n in (("sample", 150), ("all-of-it", 400)):
        score(tmp_path / "in.parquet", tmp_path / f"{name}.parquet", "clip", columns=COLUMNS,
              seed=1, cache_dir=False, scale=ScaleOptions(fit_sample=n,
                                                          save_fit=tmp_path / f"fit-{name}"))
        fit = load_fit(tmp_path / f"fit-{name}")
        codes = [PARTITIONS.index(CLEAN_SIGNIFICANT), PARTITIONS.index(CLEAN_INSIGNIFICANT)]
        clean = int(np.isin(fit.arrays["sample.partition"], codes).sum())
        sizes[name] = (len(fit.arrays["pool.images"]), clean)
    pool, clean = sizes["sample"]
    # the budget is shared by the corpus's clean pairs (about 400/150 of the sample's), as in
    # the one pass over all 400, not by the sample's alone
    assert pool <= 4_000 // (clean * 400 // 150) < 4_000 // clean
    assert abs(pool - sizes["all-of-it"][0]) <= 2
