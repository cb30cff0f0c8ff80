"""Reading a scored file back: its partitions and scores, a few chosen rows, and the statistics
the reports and the CI check print.

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
from ncclean.data.results import PARTITIONS
from ncclean.data.schema import NOISY_GT
from ncclean.errors import SchemaError

_BOOTSTRAP_ROWS = 100_000


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
        return np.flatnonzero(self.partition == PARTITIONS.index(name))

    @property
    def valid(self) -> np.ndarray:
        return self.partition != PARTITIONS.index("invalid")


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


def bootstrap_interval(values: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``. Above 100,000 values the
    resamples are drawn from a seeded subsample of that size, which widens the interval
    slightly (conservative) and bounds the work for any corpus size."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    if len(values) > _BOOTSTRAP_ROWS:
        values = values[rng.choice(len(values), _BOOTSTRAP_ROWS, replace=False)]
    means = np.array([values[rng.integers(0, len(values), len(values))].mean()
                      for _ in range(n_boot)])
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


@dataclass(frozen=True)
class NoiseEstimate:
    """How noisy the corpus is, from the scores: the share of valid pairs in ``noisy`` and the
    expected share of mismatched pairs, ``mean(1 - clean_prob)``, each with a bootstrap 95%
    interval; and the method's own estimate (its mixture's noisy weight) when it gave one."""

    noisy_share: float
    noisy_share_ci: tuple[float, float]
    expected: float
    expected_ci: tuple[float, float]
    method_estimate: float | None

    def as_dict(self) -> dict:
        return {"noisy_share": self.noisy_share, "noisy_share_ci95": list(self.noisy_share_ci),
                "expected_noise": self.expected, "expected_noise_ci95": list(self.expected_ci),
                "method_estimate": self.method_estimate}


def noise_estimate(scored: Scored, seed: int = 0) -> NoiseEstimate:
    valid = scored.valid
    noisy = (scored.partition[valid] == PARTITIONS.index("noisy")).astype(np.float64)
    expected = 1.0 - scored.clean_prob[valid].astype(np.float64)
    method = scored.sidecar.get("estimated_noise_rate")
    return NoiseEstimate(
        noisy_share=float(noisy.mean()) if len(noisy) else float("nan"),
        noisy_share_ci=bootstrap_interval(noisy, seed=seed),
        expected=float(expected.mean()) if len(expected) else float("nan"),
        expected_ci=bootstrap_interval(expected, seed=seed + 1),
        method_estimate=float(method) if method is not None else None)
