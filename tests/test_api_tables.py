"""``api.score`` on tables in memory: a pyarrow Table, a pandas or polars DataFrame or a
``datasets.Dataset`` is scored like a file and every row comes back in ``.rows``; the column
keywords are those of every API function."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.errors import BadOptionError

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
    table = renamed()
    frame = table.to_pandas() if kind == "pandas" else module.from_arrow(table)
    rows = api.score(frame, caption_col="text", image_col="jpg", method="clip",
                     cache_dir=False).rows
    assert rows.num_rows == table.num_rows


def test_a_path_gives_its_rows_too_and_anything_else_is_one_line(tmp_path):
    result = api.score(EXAMPLE, tmp_path / "s.parquet", method="clip", cache_dir=False)
    assert result.rows.num_rows == pq.read_metadata(EXAMPLE).num_rows
    with pytest.raises(BadOptionError, match="cannot score a builtins.dict"):
        api.score({"caption": ["a"]}, method="clip")
