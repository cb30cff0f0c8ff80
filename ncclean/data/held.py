"""A part of a Parquet source whose scored columns are read once and held in memory, so that
scoring the part and writing it back decode them once: a million dictionary-encoded float16
vectors take seconds to decode, and the reader of the corpus and the writer of the output would
each decode them. Other columns (image bytes, a user's own) are still streamed from the file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ncclean.data.parquet import BATCH_ROWS, PairSource, Shard


@dataclass(frozen=True)
class HeldSource(PairSource):
    """A :class:`PairSource` of one shard (or some row groups of one) whose columns ``table``
    holds are served from memory; :meth:`iter_batches` reads only the others from the file."""

    table: pa.Table | None = None

    def iter_batches(self, columns: list[str] | None = None, batch_rows: int = BATCH_ROWS
                     ) -> Iterator[tuple[Shard, int, pa.RecordBatch]]:
        names = self.schema.names if columns is None else list(columns)
        others = [name for name in names if name not in self.table.column_names]
        if not others:
            offset = self.shards[0].first_row
            for batch in self.table.select(names).to_batches(max_chunksize=batch_rows):
                yield self.shards[0], offset, batch
                offset += batch.num_rows
            return
        for shard, offset, batch in super().iter_batches(others, batch_rows):
            start = offset - shard.first_row
            arrays = [batch.column(name) if name in others else
                      self.table.column(name).slice(start, batch.num_rows).combine_chunks()
                      for name in names]
            yield shard, offset, pa.RecordBatch.from_arrays(arrays, names=names)


def held(part: PairSource, columns: Sequence[str]) -> HeldSource:
    """``part`` (one shard, or some row groups of one) with its ``columns`` read into memory."""
    if len(part.shards) != 1:
        raise ValueError(f"a held source is one shard, not {len(part.shards)}")
    columns = list(dict.fromkeys(columns))
    batches = [batch for _, _, batch in part.iter_batches(columns)]
    table = pa.Table.from_batches(batches) if batches else \
        pa.schema([part.schema.field(name) for name in columns]).empty_table()
    return HeldSource(part.path, part.shards, part.schema, table)
