"""The API on tables in memory: a pyarrow Table, a pandas or polars DataFrame or a
``datasets.Dataset`` is read like a file by every function that reads a corpus or a scored file
(``score`` returns every row in ``.rows``), with the same column keywords everywhere; a scored
table carries no run record, so its columns come from the keywords or the defaults."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.errors import BadOptionError, SchemaError
from tests.pipeline.corpora import vector_table

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "clipart-300.parquet"


def renamed() -> pa.Table:
    table = pq.read_table(EXAMPLE).slice(0, 120)
    return table.rename_columns(["text" if n == "caption" else "jpg" if n == "image" else n
                                 for n in table.column_names])


def test_a_pyarrow_table_comes_back_with_every_row_scored():
    table = renamed()
    result = api.score(table, caption_col="text", image_col="jpg", method="clip",
                       cache_dir=False)
    rows = result.rows
    assert rows.num_rows == table.num_rows
    assert rows.column("id").to_pylist() == table.column("id").to_pylist()
    assert {"clean_prob", "partition"} <= set(rows.column_names)
    assert rows.column("partition").null_count == 0 and result.output is None


@pytest.mark.parametrize("kind", ["pandas", "polars"])
def test_dataframes_are_tables_too(kind):
    module = pytest.importorskip(kind)
    table = vector_table(120, noise=0.3, seed=4)
    frame = table.to_pandas() if kind == "pandas" else module.from_arrow(table)
    rows = api.score(frame, image_emb_col="img", text_emb_col="txt", method="clip",
                     cache_dir=False).rows
    assert rows.num_rows == table.num_rows
    assert rows.column("id").to_pylist() == table.column("id").to_pylist()


def test_a_path_gives_its_rows_too_and_anything_else_is_one_line(tmp_path):
    pq.write_table(vector_table(120, noise=0.3, seed=2), tmp_path / "pairs.parquet")
    result = api.score(tmp_path / "pairs.parquet", tmp_path / "s.parquet", method="clip",
                       cache_dir=False, image_emb_col="img", text_emb_col="txt")
    assert result.rows.num_rows == 120
    with pytest.raises(BadOptionError, match="cannot read a builtins.dict"):
        api.score({"caption": ["a"]}, method="clip")


VECTORS = {"caption_col": "text", "image_emb_col": "img", "text_emb_col": "txt"}
"""One set of column keywords, given to every call below."""


@pytest.fixture(scope="module")
def scored_rows() -> pa.Table:
    """A vector corpus with its caption column renamed, scored from memory: rows without a run
    record."""
    table = vector_table(240, noise=0.3, seed=5).rename_columns(
        ["id", "text", "img", "txt", "noisy_gt"])
    rows = api.score(table, method="clip", cache_dir=False, **VECTORS).rows
    assert not (rows.schema.metadata or {}).get(b"ncclean")
    return rows


@pytest.mark.parametrize("kind", ["pyarrow", "pandas", "polars"])
def test_split_reads_a_scored_table_with_the_named_columns(scored_rows, tmp_path, kind):
    module = pytest.importorskip(kind)
    table = scored_rows if kind == "pyarrow" else scored_rows.to_pandas() if kind == "pandas" \
        else module.from_arrow(scored_rows)
    summary = api.split(table, tmp_path / "parts", html=tmp_path / "r.html", **VECTORS)
    assert summary.input is None and summary.n_rows == 240
    assert sum(pq.read_metadata(p).num_rows for p in summary.files.values()) == 240
    assert all("text" not in row or row["text"] is not None for row in summary.most_noisy)
    captions = scored_rows.column("text").to_pylist()
    page = (tmp_path / "r.html").read_text()
    assert sum(c in page for c in set(captions)) >= 20  # the cards show the captions


def test_a_table_needs_its_columns_named_and_split_needs_a_folder(scored_rows, tmp_path):
    with pytest.raises(SchemaError, match="the table: no caption column 'caption';"):
        api.split(scored_rows, tmp_path / "parts")  # no record says the captions are 'text'
    with pytest.raises(BadOptionError, match="give out_dir"):
        api.split(scored_rows, caption_col="text")
    with pytest.raises(TypeError, match="unexpected keyword argument 'caption_column'"):
        api.check(scored_rows, caption_column="text")


def test_check_and_audit_read_a_scored_table(scored_rows, tmp_path):
    result = api.check(scored_rows.to_pandas(), max_noisy=0.9, **VECTORS)
    assert result.passed and result.input is None
    assert sum(result.partition_counts.values()) == 240
    sheet = api.audit(scored_rows, sample=40, output=tmp_path / "sheet.html", **VECTORS)
    assert sum(sheet.sampled.values()) == 40 and sheet.input is None
    page = (tmp_path / "sheet.html").read_text()
    assert page.count("data-id=") >= 40
    ids = scored_rows.column("id").to_pylist()
    truth = scored_rows.column("noisy_gt").to_pylist()
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(
        f"{i},{'mismatch' if t else 'match'}\n" for i, t in zip(ids, truth, strict=True)))
    found = api.audit(scored_rows, labels=tmp_path / "labels.csv", **VECTORS)
    assert found.partitions["noisy"]["labelled"] > 0
    assert api.check(scored_rows, labels=tmp_path / "labels.csv", min_precision=0.0,
                     **VECTORS).passed


def test_retrain_inspect_and_inject_noise_take_tables(scored_rows, tmp_path):
    test = vector_table(60, noise=0.0, seed=8).rename_columns(
        ["id", "text", "img", "txt", "noisy_gt"])
    summary = api.retrain(scored_rows, test, steps=20, eval_every=0, cache_dir=False,
                          device="cpu", progress=False, **VECTORS)
    assert summary.input is None and summary.n_test == 60 and "cleaned" in summary.arms
    corpus = api.inspect(test.to_pandas(), decode=False, **VECTORS)
    assert corpus.input is None and corpus.n_pairs == 60 and corpus.columns["caption"] == "text"
    noisy = api.inject_noise(test, tmp_path / "noisy.parquet", ratio=0.5, **VECTORS)
    assert noisy.input is None
    assert sum(pq.read_table(tmp_path / "noisy.parquet").column("noisy_gt").to_pylist()) == 30


def test_a_hugging_face_dataset_is_a_table_too(scored_rows):
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset(scored_rows)
    assert api.check(dataset, max_noisy=0.9, **VECTORS).passed
    assert api.check(dataset.select(range(0, 240, 2)), max_noisy=0.9,
                     **VECTORS).partition_counts != api.check(dataset, max_noisy=0.9,
                                                             **VECTORS).partition_counts
