"""The output contract: every input row and column, then ncclean's columns, then a JSON sidecar.

Columns added after the input's, in this order (DESIGN.md, "Data contract"):

- ``clean_prob`` float32 in [0, 1], higher = correctly matched; null for invalid rows;
- ``partition``: ``clean_significant | clean_insignificant | vague | noisy | invalid``;
- ``significance`` float32 (the SDD ratio c, or the method's equivalent);
- ``pseudo_caption``, ``pseudo_caption_id``, ``pseudo_caption_score``: null unless noisy;
- ``invalid_reason``: why a row could not be scored, null for the others;
- the method's own columns, each prefixed by the method's name (``gmm_loss``, ``pc2_osc_kl``...).

A column of the input with one of these names is replaced (re-scoring a scored file works).
``--write scores`` writes the id column and these columns only, in the same row order, marked in
the file's metadata (:data:`~ncclean.data.parquet.WRITE_KEY`): a table to join on the id. The
run record holds what the caller passes (method, parameters, seed, timings, mixture) plus the row
count and partition counts computed here, so they always agree with the file. It is written into
the Parquet file's own key-value metadata (key :data:`RECORD_KEY`), in the same write as the rows,
so a file can never be paired with another run's record; ``<output>.json`` beside it is a copy
for people and tools that read JSON (readers use the metadata; :mod:`ncclean.data.scored`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ncclean.data.corpus import Corpus
from ncclean.data.parquet import (
    RECORD_KEY,
    WRITE_KEY,
    json_text,
    sidecar_path,
    write_json,
    write_pairs,
)
from ncclean.data.schema import INVALID_REASON
from ncclean.errors import BadOptionError

CLEAN_SIGNIFICANT = "clean_significant"
CLEAN_INSIGNIFICANT = "clean_insignificant"
VAGUE = "vague"
NOISY = "noisy"
INVALID = "invalid"
PARTITIONS: tuple[str, ...] = (CLEAN_SIGNIFICANT, CLEAN_INSIGNIFICANT, VAGUE, NOISY, INVALID)
"""Every partition name, in contract order; use these constants, not the strings."""
CLEAN: tuple[str, ...] = (CLEAN_SIGNIFICANT, CLEAN_INSIGNIFICANT)
"""The two clean partitions."""
CONTRACT_COLUMNS: tuple[str, ...] = ("clean_prob", "partition", "significance", "pseudo_caption",
                                     "pseudo_caption_id", "pseudo_caption_score", INVALID_REASON)


@dataclass
class PairResults:
    """Per-pair results of a scoring run, one entry per input row.

    ``clean_prob``: ``(n,) float`` in [0, 1]; ``partition``: ``(n,)`` strings from
    :data:`PARTITIONS`; ``significance``, ``pseudo_caption_score``: ``(n,) float`` or ``None``;
    ``pseudo_caption_row``: ``(n,) int64`` donor row of each pseudo-caption, -1 for none;
    ``method_columns``: extra ``(n,)`` arrays, names prefixed by the method's name. Values of
    invalid rows are ignored: they are written as null and their partition as ``invalid``.
    """

    clean_prob: np.ndarray
    partition: np.ndarray
    significance: np.ndarray | None = None
    pseudo_caption_row: np.ndarray | None = None
    pseudo_caption_score: np.ndarray | None = None
    method_columns: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_pairs(cls, n: int, rows: np.ndarray, clean_prob: np.ndarray,
                   partition: np.ndarray, significance: np.ndarray | None = None,
                   donor: np.ndarray | None = None, donor_score: np.ndarray | None = None,
                   method_columns: Mapping[str, np.ndarray] | None = None) -> PairResults:
        """The results of the scored pairs placed back at their input ``rows`` (``(m,) int64``,
        the features' rows) among ``n`` rows: ``clean_prob``, ``partition``, ``significance``,
        ``donor_score`` and ``method_columns`` are ``(m,)`` per pair, ``donor`` the ``(m,)``
        pair index of each pseudo-caption's donor (-1 for none). Rows that were not scored are
        ``invalid``, NaN or -1."""
        full_partition = np.full(n, INVALID, dtype=object)
        full_partition[rows] = partition
        donor_row = None
        if donor is not None:  # pair indices -> input rows
            donor_row = np.full(n, -1, dtype=np.int64)
            has = donor >= 0
            donor_row[rows[has]] = rows[donor[has]]
        return cls(
            clean_prob=scatter(clean_prob, rows, n), partition=full_partition,
            significance=None if significance is None else scatter(significance, rows, n),
            pseudo_caption_row=donor_row,
            pseudo_caption_score=None if donor_score is None else scatter(donor_score, rows, n),
            method_columns={name: scatter(values, rows, n)
                            for name, values in (method_columns or {}).items()})


def scatter(values: np.ndarray, rows: np.ndarray, n: int, fill=float("nan")) -> np.ndarray:
    """``values`` (``(m,)``) of the scored pairs placed at their ``rows`` in an ``(n,)`` array:
    float64 NaN elsewhere for floats, zeros for other numbers, ``fill`` for objects."""
    values = np.asarray(values)
    if values.dtype == object:
        out = np.full(n, fill, dtype=object)
    elif np.issubdtype(values.dtype, np.floating):
        out = np.full(n, np.nan)
    else:
        out = np.zeros(n, dtype=values.dtype)
    out[rows] = values
    return out


def _float_column(values: np.ndarray | None, keep: np.ndarray) -> pa.Array:
    if values is None:
        return pa.nulls(len(keep), pa.float32())
    values = np.asarray(values, dtype=np.float32)
    return pa.array(values, mask=~keep | np.isnan(values))


def result_columns(corpus: Corpus, results: PairResults) -> dict[str, pa.Array]:
    """The contract's columns for ``corpus`` as Arrow arrays, in output order.

    Raises ``ValueError`` for results that break the contract (a method bug, not user input):
    wrong lengths, ``clean_prob`` outside [0, 1] on a valid row, an unknown partition.
    """
    n = corpus.n_pairs
    valid = corpus.valid
    for name, values in [("clean_prob", results.clean_prob), ("partition", results.partition),
                         *results.method_columns.items()]:
        if len(values) != n:
            raise ValueError(f"{name} has {len(values)} values for {n} rows")
    clean_prob = np.asarray(results.clean_prob, dtype=np.float64)
    scored = clean_prob[valid]
    if np.isnan(scored).any() or (scored < 0).any() or (scored > 1).any():
        raise ValueError("clean_prob must lie in [0, 1] for every valid row")
    partition = np.where(valid, np.asarray(results.partition, dtype=object), INVALID)
    unknown = set(partition.tolist()) - set(PARTITIONS)
    if unknown:
        raise ValueError(f"unknown partition {sorted(unknown)}; expected one of {PARTITIONS}")

    donor = results.pseudo_caption_row
    has_donor = valid & (partition == NOISY) & (donor >= 0) if donor is not None \
        else np.zeros(n, dtype=bool)
    donor_rows = np.where(has_donor, donor if donor is not None else 0, 0)
    captions = np.asarray(corpus.captions, dtype=object)
    columns: dict[str, pa.Array] = {
        "clean_prob": _float_column(clean_prob, valid),
        "partition": pa.array(partition.tolist(), pa.string()),
        "significance": _float_column(results.significance, valid),
        "pseudo_caption": pa.array(np.where(has_donor, captions[donor_rows], None).tolist(),
                                   pa.string()),
        "pseudo_caption_id": corpus.ids.take(pa.array(donor_rows, mask=~has_donor)),
        "pseudo_caption_score": _float_column(results.pseudo_caption_score, has_donor),
        INVALID_REASON: pa.array(corpus.reasons, pa.string()),
    }
    for name, values in results.method_columns.items():
        values = np.asarray(values)
        columns[name] = _float_column(values, valid) if np.issubdtype(values.dtype, np.floating) \
            else pa.array(values, mask=~valid)
    return columns


def scores_only(id_name: str | None, write: str, metadata: Mapping[bytes, bytes]) -> dict:
    """The keywords of :func:`ncclean.data.parquet.write_pairs` for ``write``: ``all``, every
    input column and ``metadata``; ``scores``, the id column ``id_name`` alone before the
    contract's columns and ``metadata`` marked :data:`~ncclean.data.parquet.WRITE_KEY`, so that
    readers and a resumed run know the file holds no other input column. Raises
    :class:`BadOptionError` for ``scores`` without an id column (nothing to join on)."""
    if write != "scores":
        return {"metadata": metadata}
    if id_name is None:
        raise BadOptionError("--write scores needs an id column to join on (name it with "
                             "--id-col), or use --write all")
    return {"keep": [id_name], "metadata": {**metadata, WRITE_KEY: b"scores"}}


def partition_counts(partition: pa.Array | np.ndarray) -> dict[str, int]:
    """Rows per partition, every partition listed (zeros included), in contract order."""
    values = partition.to_pylist() if isinstance(partition, pa.Array) else list(partition)
    return {name: values.count(name) for name in PARTITIONS}


def stable_record(record: Mapping) -> dict:
    """``record`` without what differs from run to run of the same command: its timings (every
    key ``seconds`` or ``*_seconds``, at any depth), its start time and command line (``started``,
    ``argv``): what goes into the Parquet file, so that the same seed still writes the same
    bytes. The JSON copy keeps them."""
    def strip(value):
        if isinstance(value, Mapping):
            return {k: strip(v) for k, v in value.items()
                    if not (isinstance(k, str) and (k == "seconds" or k.endswith("_seconds")))}
        if isinstance(value, list | tuple):
            return [strip(v) for v in value]
        return value

    stable = strip(json.loads(json_text(record, indent=None)))
    return {k: v for k, v in stable.items() if k not in ("started", "argv")}


def write_results(corpus: Corpus, output: str | os.PathLike, results: PairResults,
                  sidecar: Mapping, write: str = "all",
                  before_copy: Callable[[], None] | None = None) -> Path:
    """Write ``corpus`` with ``results`` to ``output``, the run record (``sidecar`` plus the
    counts, :func:`stable_record`) in its metadata, in one atomic write; then the record's JSON
    copy beside it, timings included (``before_copy()``, when given, is called first: it may
    complete the timings the sidecar holds). When
    the copy cannot be written, no copy stays (an older run's would disagree) and the error is
    raised. ``write="scores"``: the id column and the contract's columns only
    (:func:`scores_only`).

    Returns the output path. Every input row appears exactly once, in input order.
    """
    columns = result_columns(corpus, results)
    record = {
        **sidecar,
        "n_rows": corpus.n_pairs,
        "partition_counts": partition_counts(columns["partition"]),
        "invalid_counts": corpus.invalid_counts(),
    }
    metadata = {RECORD_KEY.encode(): json_text(stable_record(record), indent=None).encode()}
    out = write_pairs(corpus.source, output, columns,
                      **scores_only(corpus.columns.id, write, metadata))
    copy = sidecar_path(out)
    if before_copy is not None:
        before_copy()
    try:
        write_json(copy, record)
    except BaseException:
        copy.unlink(missing_ok=True)
        raise
    return out


def recall_threshold(clean_prob: np.ndarray, recall: float) -> float:
    """The lowest threshold ``t`` such that the pairs with ``clean_prob < t`` hold at least
    ``recall`` of the expected noisy pairs, ``sum(1 - clean_prob)`` over the finite
    ``clean_prob`` (``(n,)``); 0.0 when the scores expect no noise. Equal scores fall on the
    same side."""
    values = np.asarray(clean_prob, dtype=np.float64)
    values = np.sort(as_written(np.clip(values[np.isfinite(values)], 0.0, 1.0)))
    expected = np.cumsum(1.0 - values.astype(np.float64))
    if len(values) == 0 or expected[-1] <= 0.0:
        return 0.0
    last = int(np.searchsorted(expected, recall * expected[-1], side="left"))
    return float(np.nextafter(values[min(last, len(values) - 1)], np.float32(np.inf)))


def as_written(clean_prob: np.ndarray) -> np.ndarray:
    """``clean_prob`` at the precision the output holds it (float32), so that a pair's
    partition agrees with the value a reader compares to the recorded thresholds."""
    return np.asarray(clean_prob).astype(np.float32)
