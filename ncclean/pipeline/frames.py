"""Tables in memory as input: a pyarrow ``Table``, a pandas or polars ``DataFrame`` or a Hugging
Face ``datasets.Dataset`` is written to a Parquet file in a temporary folder and scored like any
file (one code path); the scored rows come back as a pyarrow ``Table``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.errors import BadOptionError


def is_table(value) -> bool:
    """Whether ``value`` is a table in memory rather than a path."""
    return not isinstance(value, str | os.PathLike)


def as_arrow(value) -> pa.Table:
    """``value`` as a pyarrow Table; :class:`BadOptionError` (one line) for anything else."""
    if isinstance(value, pa.Table):
        return value
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if kind.startswith("polars.") and hasattr(value, "to_arrow"):
        return value.to_arrow()
    if kind.startswith("pandas.") and hasattr(value, "to_parquet"):
        return pa.Table.from_pandas(value, preserve_index=False)
    if kind.startswith("datasets.") and hasattr(value, "data"):  # its Arrow table
        table = value.data
        table = getattr(table, "table", table)
        if getattr(value, "_indices", None) is not None:  # a selected or shuffled view
            table = value.with_format("arrow")[:]
        return table
    raise BadOptionError(f"cannot score a {kind}: give a path, a pyarrow Table, a pandas or "
                         "polars DataFrame or a datasets.Dataset")


@contextlib.contextmanager
def table_file(value) -> Iterator[Path]:
    """A Parquet file holding ``value``'s rows, removed with its folder afterwards."""
    table = as_arrow(value)
    with tempfile.TemporaryDirectory(prefix="ncclean-table-") as folder:
        path = Path(folder) / "input.parquet"
        pq.write_table(table, path)
        yield path


def read_rows(output: Path) -> pa.Table:
    """The scored rows of ``output`` (a file, or a folder of shards in name order)."""
    if output.is_dir():
        files = sorted(p for p in output.rglob("*.parquet") if not p.name.startswith("."))
        return pa.concat_tables(pq.read_table(p) for p in files)
    table = pq.read_table(output)
    return table.replace_schema_metadata(None)
