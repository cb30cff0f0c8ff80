"""Parquet in and out: one file or a folder of shards in, one file out, written atomically.

Reading streams record batches shard by shard, so a column is only in memory while its batch is
being used. Writing streams the input again and adds (or replaces) columns batch by batch, so an
output carries every input column without holding the corpus in memory. Every output file is
written to a temporary name in its destination folder and renamed into place, so a crash never
leaves a half-written file under the real name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.atomic import (  # noqa: F401 (atomic_path and the rest are used from here)
    TEMP_MARK,
    atomic_path,
    forget_created_folders,
    is_write_error,
    make_folder,
    probe_writable,
    remove_created_folders,
    remove_stale_temps,
)
from ncclean.errors import (
    EmptyInputError,
    InputNotFoundError,
    NotParquetError,
    OutputError,
    SchemaError,
)

BATCH_ROWS = 8192
RECORD_KEY = "ncclean"
"""The key of a scoring run's record in a Parquet file's key-value metadata (JSON text); a file
written from another keeps everything of its metadata but this (it is not that run's output)."""
WRITE_KEY = b"ncclean.write"
"""The Parquet metadata key of a file that holds the id and ncclean's columns only (value
``scores``, ``--write scores``); a file without it holds every input column."""


def written(schema: pa.Schema) -> str:
    """What a file of ``schema`` holds: ``scores`` (:data:`WRITE_KEY`) or ``all``."""
    return "scores" if (schema.metadata or {}).get(WRITE_KEY) == b"scores" else "all"


@dataclass(frozen=True)
class Shard:
    """One Parquet file of a source; ``row_groups``: only these row groups of it (``None``:
    all), as in a :func:`windows` part of a large file."""

    path: Path
    n_rows: int
    first_row: int
    row_groups: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PairSource:
    """An opened input: its shards in reading order, their common schema and the row count.

    Row numbers are global across shards (shard order, then row order inside a shard).
    """

    path: Path
    shards: tuple[Shard, ...]
    schema: pa.Schema

    @property
    def n_rows(self) -> int:
        return sum(s.n_rows for s in self.shards)

    def iter_batches(
        self, columns: list[str] | None = None, batch_rows: int = BATCH_ROWS
    ) -> Iterator[tuple[Shard, int, pa.RecordBatch]]:
        """Yield ``(shard, first_row, batch)`` with ``first_row`` the global row number of the
        batch's first row. ``columns=None`` reads every column."""
        for shard in self.shards:
            offset = shard.first_row
            # pre_buffer (pyarrow's default) fetches every row group's column chunks ahead of
            # the reader: memory then grows with the file (2 GB for a million 512-d float16 pairs
            # instead of 0.1 GB). Buffered reads keep it at about one row group.
            with pq.ParquetFile(shard.path, pre_buffer=False, buffer_size=1 << 22) as reader:
                for batch in reader.iter_batches(
                    batch_size=batch_rows, row_groups=shard.row_groups, columns=columns,
                    use_threads=True,
                ):
                    yield shard, offset, batch
                    offset += batch.num_rows

    def read_columns(self, columns: list[str]) -> pa.Table:
        """Read whole columns of every shard into one table (use for small columns only)."""
        tables = [pq.read_table(s.path, columns=columns) for s in self.shards]
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def windows(source: PairSource, rows: int) -> list[PairSource]:
    """``source`` as consecutive parts of whole row groups, each of at least ``rows`` rows (but
    the last) or one row group larger than that, in row order, with row numbers starting at 0
    in each part: a large file read part by part, memory bounded by the part."""
    parts: list[PairSource] = []
    for shard in source.shards:
        with pq.ParquetFile(shard.path) as reader:
            sizes = [reader.metadata.row_group(g).num_rows for g in range(reader.num_row_groups)]
        groups: list[int] = []
        held = 0
        for group, size in enumerate(sizes):
            groups.append(group)
            held += size
            if held >= rows or group == len(sizes) - 1:
                if held:
                    part = Shard(shard.path, held, 0, tuple(groups))
                    parts.append(PairSource(source.path, (part,), source.schema))
                groups, held = [], 0
    return parts


def with_row_groups_of(source: PairSource, rows: int, folder: Path) -> PairSource:
    """``source`` itself when none of its row groups holds more than twice ``rows`` rows; else
    a copy of it in ``folder`` (one pass, uncompressed) in row groups of :data:`BATCH_ROWS` (or
    ``rows`` when fewer), so that its :func:`windows` hold about ``rows`` rows each (a writer's
    default row group is a million rows: one such group would be one window). The copy moves a
    row group at a time: Parquet's reader and writer each hold several times the batch they move
    (a vector column's levels), about 1 GB for 65,536 pairs of two 512-d float16 vectors."""
    largest = 0
    for shard in source.shards:
        with pq.ParquetFile(shard.path) as reader:
            largest = max([largest] + [reader.metadata.row_group(g).num_rows
                                       for g in range(reader.num_row_groups)])
    if largest <= 2 * rows:
        return source
    dest = Path(folder) / "row-groups.parquet"
    with pq.ParquetWriter(dest, source.schema, compression="none",
                          use_dictionary=False, write_statistics=False) as writer:
        group = min(rows, BATCH_ROWS)
        for _, _, batch in source.iter_batches(None, group):
            writer.write_batch(batch, row_group_size=group)
    return open_pairs(dest)


def _parquet_files(folder: Path) -> list[Path]:
    files = []
    for path in sorted(folder.rglob("*.parquet")):
        relative = path.relative_to(folder).parts
        if any(part.startswith((".", "_")) for part in relative):
            continue  # hidden files, Spark's _temporary folders, our own temp files
        files.append(path)
    return files


def open_pairs(path: str | os.PathLike) -> PairSource:
    """Open one Parquet file or a folder of Parquet shards (searched recursively, in sorted order).

    Raises :class:`InputNotFoundError`, :class:`NotParquetError`, :class:`EmptyInputError` or,
    when shards disagree on column names or types, :class:`SchemaError`.
    """
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"{path}: no such file or folder")
    if path.is_dir():
        files = _parquet_files(path)
        if not files:
            raise EmptyInputError(f"{path}: folder holds no .parquet files")
    else:
        files = [path]

    shards: list[Shard] = []
    schema: pa.Schema | None = None
    first_row = 0
    for file in files:
        try:
            with pq.ParquetFile(file) as meta:  # closed at once: only the footer is needed
                file_schema, n_rows = meta.schema_arrow, meta.metadata.num_rows
        except (pa.ArrowInvalid, OSError) as error:
            raise NotParquetError(not_parquet(file, error)) from None
        if schema is None:
            schema = file_schema
        elif not file_schema.equals(schema, check_metadata=False):
            raise SchemaError(
                f"shard {file} has columns {describe_schema(file_schema)}, "
                f"but {files[0]} has {describe_schema(schema)}; all shards must share one schema"
            )
        shards.append(Shard(file, n_rows, first_row))
        first_row += n_rows
    assert schema is not None
    if first_row == 0:
        raise EmptyInputError(f"{path}: no rows")
    return PairSource(path=path, shards=tuple(shards), schema=schema)


def describe_schema(schema: pa.Schema) -> str:
    """A schema on one line: ``(name: type, ...)``."""
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"


# --------------------------------------------------------------------------------------- writing


def check_output_path(out: str | os.PathLike, source: PairSource | None = None) -> Path:
    """Refuse an output that is, or lies inside, the input; create the output's folder (see
    :func:`created_folders`) and make sure a file can be written there, before any work.

    Returns the output path. Raises :class:`OutputError`.
    """
    out = Path(out)
    if out.exists() and out.is_dir():
        raise OutputError(f"{out} is a folder; give a file name for the output")
    if source is not None:
        resolved = out.resolve()
        input_path = source.path.resolve()
        if resolved == input_path or any(resolved == s.path.resolve() for s in source.shards):
            raise OutputError(f"{out} is the input file; write the output to a new file")
        if source.path.is_dir() and input_path in resolved.parents:
            raise OutputError(
                f"{out} lies inside the input folder {source.path}; write it elsewhere"
            )
    make_folder(out.parent)
    probe_writable(out)
    return out


TEXT_TABLES = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json"}


def not_parquet(file: str | os.PathLike, error: BaseException) -> str:
    """The one line for an input that Parquet cannot read: a CSV or JSON file gets the
    one-line conversion to Parquet, anything else the reader's reason."""
    file = Path(file)
    kind = TEXT_TABLES.get(file.suffix.lower())
    if kind is not None:
        options = ", parse_options=c.ParseOptions(delimiter='\\t')" \
            if file.suffix.lower() == ".tsv" else ""
        return (f"{file} is a {file.suffix[1:].upper()} file; ncclean reads Parquet: convert it "
                f"once with python -c \"import pyarrow.{kind} as c, pyarrow.parquet as p; "
                f"p.write_table(c.read_{kind}('{file}'{options}), "
                f"'{file.with_suffix('.parquet')}')\"")
    return f"{file}: not a readable Parquet file ({' '.join(str(error).split())})"


def written_by_ncclean(path: str | os.PathLike) -> bool:
    """Whether the file ``path`` was written by an ncclean command: its Parquet metadata holds
    a run record (:data:`RECORD_KEY`), or the ``.json`` record beside it names a command."""
    path = Path(path)
    try:
        if RECORD_KEY.encode() in (pq.read_schema(path).metadata or {}):
            return True
    except (OSError, pa.ArrowInvalid):
        pass
    side = sidecar_path(path)
    try:
        record = json.loads(side.read_text()) if side.exists() else None
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "command" in record


def check_not_foreign(out: str | os.PathLike, overwrite: bool = False,
                      input: str | os.PathLike | None = None) -> None:
    """:class:`OutputError` when ``out`` is a file that ncclean did not write (a raw corpus, a
    file of the user's), unless ``overwrite``: ``-o`` never replaces one by accident. The
    ``input`` itself is left to :func:`check_output_path`, which says so."""
    out = Path(out)
    if overwrite or not out.is_file() or written_by_ncclean(out):
        return
    if input is not None and out.resolve() == Path(input).resolve():
        return
    raise OutputError(f"{out} exists and was not written by ncclean; give another -o, or "
                      "--overwrite to replace it")


def json_text(payload: Mapping, indent: int | None = 2) -> str:
    """``payload`` as JSON text (numpy values and paths included)."""
    return json.dumps(payload, indent=indent, sort_keys=False, default=_json_default)


def write_json(dest: str | os.PathLike, payload: Mapping) -> None:
    """Write ``payload`` as indented JSON, atomically."""
    with atomic_path(dest) as tmp:
        tmp.write_text(json_text(payload) + "\n")


def _json_default(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):  # numpy arrays
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def sidecar_path(out: str | os.PathLike) -> Path:
    """``scored.parquet`` -> ``scored.parquet.json``."""
    out = Path(out)
    return out.with_name(out.name + ".json")


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Columns worth dictionary encoding and min/max statistics: all but lists of floats
    (embeddings), whose values rarely repeat and are never filtered on. Dictionary-encoded
    float16 embeddings read 8x slower than plain ones; their statistics cost a third of the
    write."""
    def is_vector(type_: pa.DataType) -> bool:
        return (pa.types.is_list(type_) or pa.types.is_fixed_size_list(type_)
                or pa.types.is_large_list(type_)) and pa.types.is_floating(type_.value_type)

    return [field.name for field in schema if not is_vector(field.type)]


def write_table(dest: str | os.PathLike, table: pa.Table) -> None:
    """Write a whole in-memory table to Parquet (zstd), atomically."""
    with atomic_path(dest) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=BATCH_ROWS,
                       use_dictionary=dictionary_columns(table.schema),
                       write_statistics=dictionary_columns(table.schema))


def without_record(schema: pa.Schema) -> pa.Schema:
    """``schema`` without a scoring run's record in its metadata (:data:`RECORD_KEY`)."""
    metadata = dict(schema.metadata or {})
    metadata.pop(RECORD_KEY.encode(), None)
    return schema.with_metadata(metadata) if metadata else schema.remove_metadata()


Compute = Callable[[Shard, int, pa.RecordBatch], Mapping[str, pa.Array]]


def write_pairs(
    source: PairSource,
    out: str | os.PathLike,
    updates: Mapping[str, pa.Array | pa.ChunkedArray],
    *,
    batch_rows: int = BATCH_ROWS,
    computed: tuple[list[pa.Field], Compute] | None = None,
    metadata: Mapping[str, str] | Mapping[bytes, bytes] | None = None,
    keep: Sequence[str] | None = None,
) -> Path:
    """Write every input row and column to ``out`` with ``updates`` applied, atomically.

    ``updates`` maps a column name to an array of ``source.n_rows`` values in input row order. A
    name the input already has replaces that column in place (same position); a new name is
    appended after the input columns, in the mapping's order. The input is streamed batch by
    batch, so memory holds one batch of input columns plus the update arrays. ``computed``:
    more columns (their fields) made batch by batch, ``compute(shard, first_row, batch)``
    with the batch of the input's other columns, placed like updates. ``metadata``: key-value
    pairs added to (or replacing those of) the input's schema metadata, in the same file, so
    they are written, or not, with its rows. ``keep``: only these input columns, in this order,
    then the updates and computed columns in their order, with ``metadata`` alone (the
    input's own describes columns the file no longer has); ``None``: every input column.
    """
    return write_pair_parts(source, out, [(source, updates)], batch_rows=batch_rows,
                            computed=computed, metadata=metadata, keep=keep)


def write_pair_parts(
    source: PairSource,
    out: str | os.PathLike,
    parts: Iterable[tuple[PairSource, Mapping[str, pa.Array | pa.ChunkedArray]]],
    *,
    batch_rows: int = BATCH_ROWS,
    computed: tuple[list[pa.Field], Compute] | None = None,
    metadata: Mapping[str, str] | Mapping[bytes, bytes] | None = None,
    keep: Sequence[str] | None = None,
) -> Path:
    """:func:`write_pairs` for ``source`` written part by part: ``parts`` yields each part of
    it (its :func:`windows`, in row order) with that part's updates, lazily, so memory holds one
    part's updates; every part's updates have the same names and types."""
    out = check_output_path(out, source)
    with atomic_path(out) as tmp:
        writer: pq.ParquetWriter | None = None
        try:
            for part, updates in parts:
                if writer is None:
                    schema, read_columns = _output_schema(source.schema, updates, computed,
                                                          metadata, keep)
                    writer = pq.ParquetWriter(
                        tmp, schema, compression="zstd",
                        use_dictionary=dictionary_columns(schema),
                        write_statistics=dictionary_columns(schema))
                _write_part(writer, schema, read_columns, part, updates, batch_rows,
                            computed[1] if computed is not None else None)
        finally:
            if writer is not None:
                writer.close()
    return out


def _output_schema(input_schema: pa.Schema, updates: Mapping[str, pa.Array | pa.ChunkedArray],
                   computed, metadata, keep: Sequence[str] | None = None
                   ) -> tuple[pa.Schema, list[str]]:
    """The output's schema (input columns, or those of ``keep``, replaced in place, then the new
    ones) and the input columns still read."""
    if keep is not None:
        input_schema = pa.schema([input_schema.field(name) for name in keep])
    new_fields = {name: pa.field(name, values.type) for name, values in updates.items()}
    if computed is not None:
        new_fields |= {field.name: field for field in computed[0]}
    replaced = [name for name in input_schema.names if name in new_fields]
    appended = [name for name in new_fields if name not in input_schema.names]
    fields = [new_fields.get(field.name, field) for field in input_schema]
    fields += [new_fields[name] for name in appended]
    kept = without_record(input_schema).metadata or {}
    kept.update({(key.encode() if isinstance(key, str) else key):
                 (value.encode() if isinstance(value, str) else value)
                 for key, value in (metadata or {}).items()})
    return (pa.schema(fields, metadata=kept or None),
            [n for n in input_schema.names if n not in replaced])


def _write_part(writer: pq.ParquetWriter, schema: pa.Schema, read_columns: list[str],
                source: PairSource, updates: Mapping[str, pa.Array | pa.ChunkedArray],
                batch_rows: int, compute: Compute | None) -> None:
    for name, values in updates.items():
        if len(values) != source.n_rows:
            raise ValueError(f"update {name!r} has {len(values)} values for {source.n_rows} rows")
    if read_columns:
        batches = source.iter_batches(read_columns, batch_rows)
    else:  # every input column is replaced: walk the row ranges only
        batches = _row_ranges(source, batch_rows)
    for shard, first_row, batch in batches:
        made = compute(shard, first_row, batch) if compute is not None else {}
        arrays = []
        for field in schema:
            if field.name in updates:
                arrays.append(updates[field.name].slice(first_row, batch.num_rows))
            elif field.name in made:
                arrays.append(made[field.name])
            else:
                arrays.append(batch.column(field.name))
        writer.write_table(pa.Table.from_arrays(arrays, schema=schema),
                           row_group_size=batch_rows)


def _row_ranges(source: PairSource, batch_rows: int) -> Iterator[tuple[Shard, int, pa.RecordBatch]]:
    for shard in source.shards:
        for start in range(0, shard.n_rows, batch_rows):
            size = min(batch_rows, shard.n_rows - start)
            empty = pa.RecordBatch.from_pydict({"_": pa.nulls(size)})
            yield shard, shard.first_row + start, empty
