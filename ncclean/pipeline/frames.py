"""Tables in memory as input: a pyarrow ``Table``, a pandas or polars ``DataFrame`` or a Hugging
Face ``datasets.Dataset`` is written to a Parquet file in a temporary folder and read like any
file (one code path, :func:`on_path`); the scored rows come back as a pyarrow ``Table``.

A scored table in memory carries no run record unless it is a pyarrow Table that kept the scored
file's metadata: the commands that read one take the column names from the keywords, else the
defaults (``caption``, ``image``)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError, NcCleanError
from ncclean.options import COLUMN_KEYWORDS, fold_keywords


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
    raise BadOptionError(f"cannot read a {kind}: give a path, a pyarrow Table, a pandas or "
                         "polars DataFrame or a datasets.Dataset")


@contextlib.contextmanager
def table_file(value) -> Iterator[Path]:
    """A Parquet file holding ``value``'s rows, removed with its folder afterwards."""
    table = as_arrow(value)
    with tempfile.TemporaryDirectory(prefix="ncclean-table-") as folder:
        path = Path(folder) / "input.parquet"
        pq.write_table(table, path)
        yield path


def on_path(function: Callable, value, *args, tables: tuple[str, ...] = (),
            needs: str | None = None, **keywords):
    """``function(value, *args, **keywords)`` with ``value`` a path or a table in memory; a
    table is first written to a temporary Parquet file, removed afterwards, and the result's
    ``input`` field (when it has one) is then ``None``. The keywords named in ``tables``
    (``retrain``'s ``test``) may be tables too and are written likewise. ``needs``: a keyword
    that must be given with a table, where its default is a path beside the input."""
    if needs is not None and keywords.get(needs) is None and is_table(value):
        raise BadOptionError(f"a table in memory has no folder to write beside: give {needs}")
    with contextlib.ExitStack() as stack:
        for name in tables:
            if keywords.get(name) is not None and is_table(keywords[name]):
                keywords[name] = stack.enter_context(table_file(keywords[name]))
        if not is_table(value):
            return function(value, *args, **keywords)
        path = stack.enter_context(table_file(value))
        try:
            result = function(path, *args, **keywords)
        except NcCleanError as error:  # name the table, not the file that held it
            raise type(error)(str(error).replace(str(path), "the table")) from None
    if dataclasses.is_dataclass(result) and "input" in {f.name for f in
                                                      dataclasses.fields(result)}:
        result = dataclasses.replace(result, input=None)
    return result


def named_columns(keywords: dict, command: str, columns: Columns = Columns()) -> Columns:
    """``columns`` with the column keywords of ``api.score`` (``caption_col=``, ``image_col=``,
    ... :data:`~ncclean.options.COLUMN_KEYWORDS`) in ``keywords`` put in; any other keyword is a
    ``TypeError``, as Python's own. Every API function takes them, so that one set of keywords
    serves every call."""
    for name in keywords:
        if name not in COLUMN_KEYWORDS:
            raise TypeError(f"{command}() got an unexpected keyword argument {name!r}")
    return fold_keywords({"columns": columns}, keywords, command)["columns"]


def read_rows(output: Path) -> pa.Table:
    """The scored rows of ``output`` (a file, or a folder of shards in name order)."""
    if output.is_dir():
        files = sorted(p for p in output.rglob("*.parquet") if not p.name.startswith("."))
        return pa.concat_tables(pq.read_table(p) for p in files)
    table = pq.read_table(output)
    return table.replace_schema_metadata(None)
