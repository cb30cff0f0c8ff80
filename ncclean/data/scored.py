"""Reading a scored file back (the reader of the contract :mod:`ncclean.data.results` writes): its
partitions and scores, its run record, and a few chosen rows.

The run record is read from the file's own metadata, where :func:`ncclean.data.results.
write_results` writes it with the rows; the ``.json`` copy beside the file is read only for files
written before the record moved into the metadata, and ignored when the metadata has one (a copy
left by another run must never be paired with these rows). A folder of shards that a sharded
``score`` run wrote (``-o DIR/``) has its record in ``DIR/ncclean.json``, written last: a folder
whose shards carry the run's completion marks but whose record is missing, or counts other rows
or another fit, is an unfinished run and is refused (:func:`open_scored`). A folder of scored
Parquet made by hand (no completion marks) is read like a hand-made file, without a record.

Only the small per-row columns (``partition``, ``clean_prob``, ``noisy_gt``) are held for the whole
corpus; captions and images are streamed and only the rows a report shows are kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ncclean.data.parquet import PairSource, open_pairs, sidecar_path, written
from ncclean.data.results import INVALID, PARTITIONS, RECORD_KEY, stable_record
from ncclean.data.schema import NOISY_GT
from ncclean.data.shards import FIT_HASH_KEY
from ncclean.errors import SchemaError

FOLDER_RECORD = "ncclean.json"
"""The run record of a folder of output shards, written when the last shard is."""


@dataclass
class Scored:
    """A scored file: ``partition`` as codes into :data:`PARTITIONS` (``(n,) int8``),
    ``clean_prob`` (``(n,) float32``, NaN for invalid rows), ``noisy_gt`` when the corpus had
    injected noise, and the scoring run's record (``sidecar``, :func:`run_record`; ``{}`` when
    there is none)."""

    source: PairSource
    partition: np.ndarray
    clean_prob: np.ndarray
    noisy_gt: np.ndarray | None
    sidecar: dict

    @property
    def n_rows(self) -> int:
        return len(self.partition)

    def counts(self) -> dict[str, int]:
        found = np.bincount(self.partition, minlength=len(PARTITIONS))
        return {name: int(found[k]) for k, name in enumerate(PARTITIONS)}

    def rows_in(self, name: str) -> np.ndarray:
        """The row numbers in partition ``name``, ascending."""
        return np.flatnonzero(self.partition == PARTITIONS.index(name))

    @property
    def valid(self) -> np.ndarray:
        return self.partition != PARTITIONS.index(INVALID)

    @property
    def scores_only(self) -> bool:
        """Whether the file holds the id and ncclean's columns only (``score --write scores``),
        none of the corpus's captions, images or vectors."""
        return written(self.source.schema) == "scores"

    def require_corpus(self, command: str) -> None:
        """:class:`SchemaError` when the file is :attr:`scores_only`: ``command`` needs the
        corpus's own columns."""
        if self.scores_only:
            raise SchemaError(f"{self.source.path} holds ncclean's columns only (score --write "
                              f"scores); {command} needs the corpus's columns: score with "
                              "--write all")


def open_scored(path: str | Path) -> Scored:
    """Open the output of ``ncclean score``; :class:`SchemaError` if it is not one, or if it is
    the folder of an unfinished sharded run (:func:`require_finished`)."""
    source = open_pairs(path)
    if source.path.is_dir():
        require_finished(source)
    missing = [c for c in ("partition", "clean_prob") if c not in source.schema.names]
    if missing:
        raise SchemaError(f"{path} is not a scored file (no {' or '.join(missing)} column); "
                          "run 'ncclean score' on it first")
    columns = ["partition", "clean_prob"] + ([NOISY_GT] if NOISY_GT in source.schema.names
                                             else [])
    kind = source.schema.field("clean_prob").type
    if not (pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_null(kind)):
        raise SchemaError(f"{path}: clean_prob holds {kind}, not numbers; is it a file written "
                          "by 'ncclean score'?")
    table = source.read_columns(columns)
    names = table.column("partition").to_pylist()
    unknown = sorted({n for n in names if n not in PARTITIONS}, key=str)
    if unknown:
        raise SchemaError(f"{path}: unknown partition values {unknown[:5]}; expected "
                          f"{', '.join(PARTITIONS)}")
    code = {name: k for k, name in enumerate(PARTITIONS)}
    partition = np.array([code[n] for n in names], dtype=np.int8)
    clean_prob = table.column("clean_prob").to_numpy(zero_copy_only=False).astype(np.float32)
    noisy_gt = None
    if NOISY_GT in table.column_names:
        noisy_gt = np.array(table.column(NOISY_GT).to_pylist(), dtype=bool)
    sidecar = run_record(source)
    return Scored(source, partition, clean_prob, noisy_gt, sidecar)


def require_finished(source: PairSource) -> None:
    """:class:`SchemaError` when the folder ``source`` holds shards of a sharded ``score`` run
    (their completion marks, :data:`~ncclean.data.shards.FIT_HASH_KEY`) that did not finish:
    its record (:data:`FOLDER_RECORD`) is missing, or counts other rows or another fit than the
    shards hold. Rerunning the same command finishes it (finished shards are kept)."""
    marks = _fit_marks(source)
    if not any(marks):
        return  # not written by a sharded run: a hand-made folder
    record = _folder_record(source.path)
    rerun = "rerun the same 'ncclean score' command to finish it"
    if record.get("command") != "score":
        raise SchemaError(f"{source.path} is an unfinished 'ncclean score' run ({len(marks)} "
                          f"shards, {source.n_rows:,} rows, no {FOLDER_RECORD}); {rerun}")
    fit_hash = str((record.get("fit") or {}).get("hash", "")).encode()
    recorded = record.get("n_rows")
    if isinstance(recorded, int) and source.n_rows > recorded:
        raise SchemaError(f"{source.path} holds {source.n_rows:,} rows, more than the "
                          f"{recorded:,} its {FOLDER_RECORD} counts: Parquet files its 'ncclean "
                          "score' run did not write are mixed in; move them out")
    if recorded != source.n_rows or any(m is not None and m != fit_hash for m in marks):
        raise SchemaError(
            f"{source.path} is an unfinished 'ncclean score' run: its shards hold "
            f"{source.n_rows:,} rows, its {FOLDER_RECORD} counts {recorded} rows"
            + ("" if recorded != source.n_rows else " written by another fit")
            + f"; {rerun}")


def _fit_marks(source: PairSource) -> list[bytes | None]:
    """Each shard's completion mark (the fit hash in its Parquet metadata), from the footers."""
    import pyarrow.parquet as pq

    return [(pq.read_schema(shard.path).metadata or {}).get(FIT_HASH_KEY)
            for shard in source.shards]


def _folder_record(folder: Path) -> dict:
    """The record in ``folder/``:data:`FOLDER_RECORD`, ``{}`` when missing or unreadable."""
    try:
        record = json.loads((folder / FOLDER_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def run_record(source: PairSource) -> dict:
    """The scoring run's record of ``source``: from its first file's metadata (key
    :data:`RECORD_KEY`), with the timings of the ``.json`` copy beside it when that copy is the
    same record; for older files (no record inside) the copy; for a folder of shards its
    :data:`FOLDER_RECORD`; ``{}`` when there is none or it is unreadable."""
    if source.path.is_dir() and (source.path / FOLDER_RECORD).exists():
        return _folder_record(source.path)
    copy: dict | None = None
    side = sidecar_path(source.path) if source.path.is_file() else None
    if side is not None and side.exists():
        try:
            copy = json.loads(side.read_text())
        except (OSError, ValueError):
            copy = None
        copy = copy if isinstance(copy, dict) else None
    metadata = source.schema.metadata or {}
    if RECORD_KEY.encode() not in metadata:
        return copy or {}
    try:
        record = json.loads(metadata[RECORD_KEY.encode()])
    except ValueError:
        return {}
    if not isinstance(record, dict):
        return {}
    # the copy adds the timings; it is used only when it is this very record
    return copy if copy is not None and stable_record(copy) == record else record


def fetch_rows(source: PairSource, rows: Iterable[int], columns: list[str]) -> dict[int, dict]:
    """The values of ``columns`` for each of ``rows`` (global row numbers), streamed batch by
    batch so that only those rows are kept. Columns the file lacks are left out."""
    wanted = np.unique(np.fromiter(rows, dtype=np.int64))
    columns = [c for c in columns if c in source.schema.names]
    out: dict[int, dict] = {}
    if len(wanted) == 0 or not columns:
        return {int(r): {} for r in wanted}
    for _, first, batch in source.iter_batches(columns, batch_rows=2048):
        lo, hi = np.searchsorted(wanted, [first, first + batch.num_rows])
        if lo == hi:
            continue
        picked = batch.take(pa.array(wanted[lo:hi] - first))
        for k, row in enumerate(wanted[lo:hi]):
            out[int(row)] = {name: picked.column(name)[k].as_py() for name in columns}
    return out
