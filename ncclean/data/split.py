"""Splitting a scored file into one Parquet file per partition, streamed and atomic."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ncclean.data.parquet import (
    BATCH_ROWS,
    PairSource,
    atomic_path,
    make_folder,
    probe_writable,
    without_record,
)
from ncclean.data.results import PARTITIONS
from ncclean.errors import OutputError


def split_by_partition(source: PairSource, out_dir: Path) -> dict[str, Path]:
    """Write every row of ``source`` to ``out_dir/<partition>.parquet`` (all columns, input
    order), one batch in memory at a time; every partition gets a file, empty ones included, so
    a pipeline can rely on the names. Returns the paths. Files appear only when all are written
    (each through a temporary file renamed at the end)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"{out_dir} is a file; give a folder for the split")
    if source.path.is_dir() and source.path.resolve() in (out_dir.resolve(),
                                                          *out_dir.resolve().parents):
        raise OutputError(f"{out_dir} lies inside the input folder {source.path}; write it "
                          "elsewhere")
    make_folder(out_dir)
    paths = {name: out_dir / f"{name}.parquet" for name in PARTITIONS}
    probe_writable(paths[PARTITIONS[0]])
    schema = without_record(source.schema)  # a part is not the scoring run's output
    with contextlib.ExitStack() as stack:
        writers = {}
        for name, path in paths.items():
            tmp = stack.enter_context(atomic_path(path))
            writers[name] = stack.enter_context(pq.ParquetWriter(tmp, schema,
                                                                 compression="zstd"))
        for _, _, batch in source.iter_batches(None, BATCH_ROWS):
            table = pa.Table.from_batches([batch]).replace_schema_metadata(schema.metadata)
            partition = table.column("partition")
            for name, writer in writers.items():
                part = table.filter(pc.equal(partition, name))
                if part.num_rows:
                    writer.write_table(part, row_group_size=BATCH_ROWS)
    return paths
