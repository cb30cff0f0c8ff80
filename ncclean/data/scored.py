"""Reading a scored file back (the reader of the contract :mod:`ncclean.data.results` writes): its
partitions and scores, its sidecar, and a few chosen rows.

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

from ncclean.data.parquet import PairSource, open_pairs, sidecar_path
from ncclean.data.results import INVALID, PARTITIONS
from ncclean.data.schema import NOISY_GT
from ncclean.errors import SchemaError


@dataclass
class Scored:
    """A scored file: ``partition`` as codes into :data:`PARTITIONS` (``(n,) int8``),
    ``clean_prob`` (``(n,) float32``, NaN for invalid rows), ``noisy_gt`` when the corpus had
    injected noise, and the scoring run's sidecar (``{}`` when it is missing)."""

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


def open_scored(path: str | Path) -> Scored:
    """Open the output of ``ncclean score``; :class:`SchemaError` if it is not one."""
    source = open_pairs(path)
    missing = [c for c in ("partition", "clean_prob") if c not in source.schema.names]
    if missing:
        raise SchemaError(f"{path} is not a scored file (no {' or '.join(missing)} column); "
                          "run 'ncclean score' on it first")
    columns = ["partition", "clean_prob"] + ([NOISY_GT] if NOISY_GT in source.schema.names
                                             else [])
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
    sidecar: dict = {}
    side = sidecar_path(source.path) if source.path.is_file() else None
    if side is not None and side.exists():
        try:
            sidecar = json.loads(side.read_text())
        except (OSError, ValueError):
            sidecar = {}
    return Scored(source, partition, clean_prob, noisy_gt, sidecar)


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
