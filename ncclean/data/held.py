"""The scored columns of Parquet shards kept decoded (:class:`DecodedCopies`, written while
another pass decodes the shards anyway), and a part of a shard that reads them from there
(:func:`from_copy`): a million dictionary-encoded float16 vectors take seconds to decode, and both
the reader of the corpus and the writer of the output would otherwise decode them. Other columns
(image bytes, a user's own) are still streamed from the file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ncclean.data.parquet import BATCH_ROWS, PairSource, Shard


@dataclass(frozen=True)
class CopiedSource(PairSource):
    """A :class:`PairSource` of one shard (or some row groups of one, from the shard's row
    ``start``) whose columns ``copied`` are read, batch by batch, from the shard's
    :class:`DecodedCopies` file ``decoded`` instead of being decoded from Parquet; the others
    are read from the file as usual. Memory holds a batch, as reading the Parquet would."""

    decoded: Path | None = None
    start: int = 0
    copied: tuple[str, ...] = ()

    def iter_batches(self, columns: list[str] | None = None, batch_rows: int = BATCH_ROWS
                     ) -> Iterator[tuple[Shard, int, pa.RecordBatch]]:
        names = self.schema.names if columns is None else list(columns)
        others = [name for name in names if name not in self.copied]
        shard = self.shards[0]
        if others:
            batches = ((offset - shard.first_row, batch) for _, offset, batch
                       in super().iter_batches(others, batch_rows))
        else:
            batches = ((at, None) for at in range(0, self.n_rows, batch_rows))
        for at, batch in batches:
            size = batch.num_rows if batch is not None else min(batch_rows, self.n_rows - at)
            rows = read_decoded(self.decoded, self.start + at, size)
            if rows is None:
                raise OSError(f"{self.decoded}: the decoded copy of {self.path} is gone")
            arrays = [batch.column(name) if name in others else
                      rows.column(name).combine_chunks() for name in names]
            yield shard, shard.first_row + at, pa.RecordBatch.from_arrays(arrays, names=names)


def from_copy(part: PairSource, columns: Sequence[str], decoded: Path | None = None,
         start: int = 0) -> PairSource:
    """``part`` (one shard, or some row groups of one, from the shard's row ``start``) reading
    its ``columns`` from the shard's :class:`DecodedCopies` file ``decoded`` when that file is
    there and holds them (:class:`CopiedSource`), else ``part`` itself."""
    if decoded is None or len(part.shards) != 1:
        return part
    probe = read_decoded(decoded, start, min(1, part.n_rows))
    if probe is None or not set(columns) <= set(probe.column_names):
        return part
    return CopiedSource(part.path, part.shards, part.schema, decoded, start,
                        tuple(probe.column_names))


class DecodedCopies:
    """Copies of shards' scored columns, decoded, in Arrow's IPC file format (one file per
    shard, with its batches' row counts beside it), written while another pass decodes the
    shards anyway (the fit sample's), so that applying the fit reads them instead of decoding
    the shards again: Arrow's format needs no decoding, and a dictionary-encoded vector column
    of Parquet decodes at about the speed of the whole read."""

    def __init__(self, folder: Path, columns: Sequence[str]):
        self.folder, self.columns = folder, list(dict.fromkeys(columns))
        self.paths: dict[Path, Path] = {}
        self._open: tuple[Path, pa.ipc.RecordBatchFileWriter, list[int]] | None = None

    def add(self, shard: Path, table: pa.Table) -> None:
        """Append ``table``'s rows (the next of ``shard``'s, in order) to ``shard``'s copy."""
        if self._open is None or self._open[0] != shard:
            self.close()
            path = self.folder / f"decoded-{len(self.paths):05d}.arrow"
            schema = table.select(self.columns).schema
            self._open = (shard, pa.ipc.new_file(str(path), schema), [])
            self.paths[shard] = path
        _, writer, counts = self._open
        for batch in table.select(self.columns).to_batches():
            writer.write_batch(batch)
            counts.append(batch.num_rows)

    def close(self) -> None:
        if self._open is not None:
            shard, writer, counts = self._open
            writer.close()
            np.save(_counts_path(self.paths[shard]), np.asarray(counts, dtype=np.int64))
            self._open = None


def _counts_path(path: Path) -> Path:
    return path.with_name(path.name + ".rows.npy")


def read_decoded(path: Path, start: int, n_rows: int) -> pa.Table | None:
    """Rows ``start`` to ``start + n_rows`` of a :class:`DecodedCopies` file (only the batches
    that hold them are read), ``None`` when the file is not there (a worker on another
    machine)."""
    counts_path = _counts_path(path)
    if not path.exists() or not counts_path.exists():
        return None
    counts = np.load(counts_path)
    ends = np.cumsum(counts)
    first = int(np.searchsorted(ends, start, side="right"))
    with pa.OSFile(str(path)) as file:
        reader = pa.ipc.open_file(file)
        batches, at = [], int(ends[first - 1]) if first else 0
        for k in range(first, len(counts)):
            if at >= start + n_rows:
                break
            batches.append(reader.get_batch(k))
            at += int(counts[k])
        schema = reader.schema
    begin = start - (int(ends[first - 1]) if first else 0)
    table = pa.Table.from_batches(batches, schema=schema).slice(begin, n_rows)
    return table.combine_chunks() if table.num_rows == n_rows else None


def decoded_bytes(paths: Sequence[Path], columns: Sequence[str]) -> int:
    """About how many bytes :class:`DecodedCopies` of the Parquet files ``paths`` would take:
    a fixed-size vector column exactly, any other column its uncompressed size in the file."""
    import pyarrow.parquet as pq

    total = 0
    for path in paths:
        with pq.ParquetFile(path) as file:
            schema, meta = file.schema_arrow, file.metadata
            for name in columns:
                kind = schema.field(name).type
                if pa.types.is_fixed_size_list(kind) and kind.value_type.bit_width > 0:
                    total += meta.num_rows * kind.list_size * kind.value_type.bit_width // 8
                    continue
                for group in range(meta.num_row_groups):
                    row_group = meta.row_group(group)
                    total += sum(row_group.column(c).total_uncompressed_size
                                 for c in range(row_group.num_columns)
                                 if row_group.column(c).path_in_schema.split(".")[0] == name)
    return total


def copies_for(paths: Sequence[Path], columns: Sequence[str], folder: Path
               ) -> DecodedCopies | None:
    """:class:`DecodedCopies` in ``folder`` when they would take at most half its disk's free
    space, else ``None`` (the application then decodes the shards again)."""
    import shutil

    if not paths or decoded_bytes(paths, columns) > shutil.disk_usage(folder).free // 2:
        return None
    return DecodedCopies(folder, columns)
