"""The fit sample of a corpus of shards, read shard by shard (DESIGN.md, "Architecture").

Its ids are read once (:func:`scan_ids`: a hash a pair, and the rows whose id repeats an
earlier one); the sample is every pair up to ``--fit-sample`` pairs (in shard order), beyond
that the pairs with the smallest id hashes, in hash order (:func:`write_sample`), so that shard
order, worker count and resume do not change it. Reading it holds one shard and the sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.schema import Columns
from ncclean.data.shards import (
    InputShard,
    find_sorted,
    pair_keys,
    read_shard,
    smallest_keys,
)
from ncclean.errors import BadOptionError, SchemaError


def id_column(shard: InputShard, columns: Columns) -> str:
    """The id column of the corpus; :class:`BadOptionError` without one (a sharded run keys the
    fit sample and the fitted pairs by id)."""
    if shard.kind == "webdataset":
        return "id"
    names = read_shard(shard).schema.names if shard.kind == "arrow" \
        else pq.read_schema(shard.path).names
    name = columns.id or "id"
    if name not in names:
        raise BadOptionError(f"{shard.path}: a fit needs an id column ({name!r} is missing; name "
                             "it with --id-col)")
    return name


@dataclass
class IdScan:
    """The ids of a sharded corpus, read once: ``keys[k]`` ``(rows,) uint64`` the id hashes of
    shard ``k`` (:func:`~ncclean.data.shards.pair_keys`) and ``duplicates[k]`` its rows whose id
    appeared earlier in the corpus (in shard order, then row order), sorted. The driver holds 8
    bytes a pair. ``paths[k]``: the file shard ``k`` was read from (its keys are that file's, row
    for row)."""

    keys: list[np.ndarray]
    duplicates: list[np.ndarray]
    paths: list[Path] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(len(k) for k in self.keys)


def scan_ids(shards: list[InputShard], id_name: str) -> IdScan:
    """Read the id column of every shard (:class:`IdScan`). Equal keys are confirmed on the ids
    themselves, so a hash collision never marks a row a duplicate."""
    keys = [pair_keys(read_shard(shard, [id_name]).column(0)) for shard in shards]
    every = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
    distinct, counts = np.unique(every, return_counts=True)
    repeated = distinct[counts > 1]  # sorted
    duplicates = [np.zeros(0, np.int64) for _ in shards]
    paths = [shard.path for shard in shards]
    if not len(repeated):
        return IdScan(keys, duplicates, paths)
    seen: set[str] = set()
    for k, shard in enumerate(shards):  # only the rows whose key repeats, in corpus order
        rows = np.flatnonzero(find_sorted(repeated, keys[k])[1])
        if not len(rows):
            continue
        ids = read_shard(shard, [id_name]).column(0).take(pa.array(rows)).to_pylist()
        later = []
        for row, value in zip(rows, ids):
            text = f"{type(value).__name__}:{value}"
            if value is not None and text in seen:
                later.append(row)
            seen.add(text)
        duplicates[k] = np.asarray(later, dtype=np.int64)
    return IdScan(keys, duplicates, paths)


def write_sample(shards: list[InputShard], scan: IdScan, id_name: str, n: int | None,
                 dest: Path, held_out: Path | None = None, copies=None) -> None:
    """Write the fit sample of ``shards`` to the Parquet file ``dest`` and, when the corpus is
    larger than the sample, the next :func:`held_out_size` pairs by id hash to ``held_out``
    (never trained on: ``gmm`` calibrates its mixture there). ``copies``
    (:class:`~ncclean.data.held.DecodedCopies`): the Parquet shards' rows, as they are read,
    are also kept decoded there, for the application."""
    extra = held_out_size(n) if held_out is not None and n is not None else 0
    total = scan.total
    kept = None
    for keys in scan.keys:  # the n (+ held-out) smallest id hashes, one shard at a time
        kept = smallest_keys(keys, n + extra if n is not None else total, kept)
    sampled = n is not None and total > n
    chosen = {"sample": kept[:n] if sampled else None, "held_out": kept[n:] if sampled else None}
    parts: dict[str, list[tuple[Path, pa.Table]]] = {"sample": [], "held_out": []}
    part_keys: dict[str, list[np.ndarray]] = {"sample": [], "held_out": []}
    for k, shard in enumerate(shards):  # the sampled rows (all of them up to n)
        scanned = scan.keys[k] if k < len(scan.paths) and scan.paths[k] == shard.path else None
        at = 0
        for table in _pieces(shard):
            if copies is not None and shard.kind == "parquet":
                copies.add(shard.path, table)
            if not sampled:
                parts["sample"].append((shard.path, table))
                continue
            # the scan's keys of these rows, or (a shard the embed stage rewrote) their own
            keys = scanned[at:at + table.num_rows] if scanned is not None and \
                at + table.num_rows <= len(scanned) else pair_keys(table.column(id_name))
            at += table.num_rows
            for name, wanted in chosen.items():
                found = find_sorted(wanted, keys)[1]
                parts[name].append((shard.path, table.filter(pa.array(found))))
                part_keys[name].append(keys[found])
    if copies is not None:
        copies.close()
    for name, path in (("sample", dest), ("held_out", held_out if sampled else None)):
        if path is None:
            continue
        table = _concat(parts.pop(name))
        # hash order: independent of shard order and names
        order = np.argsort(np.concatenate(part_keys.pop(name) or [np.zeros(0, np.uint64)]),
                           kind="stable") if sampled else None
        if table.num_rows:
            _write_in_order(table, path, order)
        del table
    pa.default_memory_pool().release_unused()  # Arrow's pool keeps what it freed otherwise


def _concat(pieces: list[tuple[Path, pa.Table]]) -> pa.Table:
    """The sample's pieces (each with its shard's path) as one table; :class:`SchemaError`
    naming the first shard whose columns differ from the first shard's (another vector width,
    another type)."""
    from ncclean.data.parquet import describe_schema

    pieces = [piece for piece in pieces if piece[1].num_rows] or pieces[:1]
    first_path, first = pieces[0][0], pieces[0][1].schema  # an empty shard has no say
    for path, table in pieces:
        if not table.schema.equals(first, check_metadata=False):
            raise SchemaError(f"shard {path} has columns {describe_schema(table.schema)}, but "
                              f"{first_path} has {describe_schema(first)}; all shards must "
                              "share one schema")
    return pa.concat_tables([table for _, table in pieces])


def _write_in_order(table: pa.Table, path: Path, order: np.ndarray | None) -> None:
    """``table`` to ``path`` with its rows in ``order`` (``None``: as they are), a row group
    at a time (no second copy of the table), vectors plain-encoded: dictionary-encoding them
    held several times the table in memory; the vectors uncompressed (a working file, read
    back at once: zstd gained float16 vectors a tenth of their size for a quarter of the
    write's time)."""
    from ncclean.data.parquet import BATCH_ROWS, dictionary_columns

    encoded = dictionary_columns(table.schema)
    compression = {name: "zstd" if name in encoded else "none" for name in table.schema.names}
    with pq.ParquetWriter(path, table.schema, compression=compression, use_dictionary=encoded,
                          write_statistics=encoded) as writer:
        for start in range(0, table.num_rows, BATCH_ROWS):
            writer.write_table(table.slice(start, BATCH_ROWS) if order is None else
                               table.take(pa.array(order[start:start + BATCH_ROWS])))


def _pieces(shard: InputShard):
    """The rows of ``shard`` as tables: a Parquet shard :data:`~ncclean.data.parquet.BATCH_ROWS`
    rows at a time (Parquet's reader holds several times the batch it decodes, whatever the row
    groups), any other whole."""
    from ncclean.data.parquet import BATCH_ROWS, open_pairs

    if shard.kind != "parquet":
        yield read_shard(shard)
        return
    for _, _, batch in open_pairs(shard.path).iter_batches(None, BATCH_ROWS):
        yield pa.Table.from_batches([batch])


def held_out_size(n: int) -> int:
    """How many pairs beyond a fit sample of ``n`` are held out for calibration."""
    return min(n, 10_000)
