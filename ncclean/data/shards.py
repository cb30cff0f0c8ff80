"""Sharded corpora: the input shards of a folder, the deterministic fit sample, and which output
shards are already complete.

An input is one Parquet file, a folder of Parquet shards, a folder of webdataset tars
(:mod:`ncclean.data.webdataset`), or a Hugging Face dataset saved to disk (``save_to_disk``: its
``.arrow`` files, read with pyarrow, no ``datasets`` needed). Each input shard gives one output
shard of the same stem. A shard's output is complete when its file exists and its Parquet
metadata records the fit's hash and the shard's row count (:func:`output_complete`), so a rerun
skips it.

The fit sample is every pair up to ``n`` pairs and, beyond, the ``n`` pairs with the smallest
hash of their id (:func:`pair_keys`): a property of each pair alone, so it does not change with
shard order, worker count or resume.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.parquet import written, written_by_ncclean
from ncclean.errors import EmptyInputError, InputNotFoundError, NotParquetError, SchemaError

FIT_HASH_KEY = b"ncclean.fit_hash"
N_ROWS_KEY = b"ncclean.n_rows"


@dataclass(frozen=True)
class InputShard:
    """One input shard: ``path`` (a Parquet file, a webdataset tar or an Arrow file of a Hugging
    Face dataset), its ``stem`` (the output shard's name) and ``kind`` (``"parquet"``,
    ``"webdataset"`` or ``"arrow"``)."""

    path: Path
    stem: str
    kind: str


def list_shards(path: str | os.PathLike) -> list[InputShard]:
    """The input shards of ``path`` in sorted order: the file itself, every ``.parquet`` of a
    folder (recursively, hidden and ``_`` entries left out), or, when the folder holds ``.tar``
    files, those tars (the ``.parquet`` img2dataset writes beside each tar is read with it, not
    as a shard of its own); a saved Hugging Face dataset's ``.arrow`` files; a clip-retrieval
    folder's metadata files, each with its rows of vectors (:func:`is_retrieval_folder`).
    Raises :class:`InputNotFoundError` or :class:`EmptyInputError`."""
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"{path}: no such file or folder")
    if not path.is_dir():
        return [InputShard(path, path.stem, "webdataset" if path.suffix == ".tar" else "parquet")]
    if is_retrieval_folder(path):  # clip-retrieval's embeddings: one shard per metadata file
        return [InputShard(p, _stem(p, path), "clip-retrieval")
                for p in sorted((path / "metadata").glob("metadata_*.parquet"))]
    states = sorted(p for p in path.rglob("state.json") if not _hidden(p, path))
    if states:  # a Hugging Face dataset (or dataset dict) saved to disk
        return [InputShard(p, _stem(p, path), "arrow") for state in states
                for p in _arrow_files(state)]
    tars = sorted(p for p in path.rglob("*.tar") if not _hidden(p, path))
    if tars:
        return [InputShard(p, _stem(p, path), "webdataset") for p in tars]
    files = sorted(p for p in path.rglob("*.parquet") if not _hidden(p, path))
    if not files:
        raise EmptyInputError(f"{path}: folder holds no .parquet shards or .tar files")
    return [InputShard(p, _stem(p, path), "parquet") for p in files]


RETRIEVAL_VECTORS = {"img_emb": "image_emb", "text_emb": "text_emb"}
"""clip-retrieval's vector folders and the columns a shard of them reads as."""


def is_retrieval_folder(path: Path) -> bool:
    """Whether ``path`` is a folder in clip-retrieval's layout (``metadata/metadata_*.parquet``
    with ``img_emb/`` and/or ``text_emb/`` ``.npy`` shards beside), as ``ncclean embed --layout
    clip-retrieval`` writes it."""
    return path.is_dir() and any((path / "metadata").glob("metadata_*.parquet")) and \
        any((path / folder).is_dir() for folder in RETRIEVAL_VECTORS)


def _read_retrieval(path: Path) -> pa.Table:
    """One shard of a clip-retrieval folder: ``metadata/metadata_{i}.parquet`` with the rows of
    ``img_emb/img_emb_{i}.npy`` and ``text_emb/text_emb_{i}.npy`` as the fixed-size list columns
    ``image_emb`` and ``text_emb`` (float32 or float16, as stored). :class:`CorruptInputError`
    when a vector file does not hold one row per metadata row."""
    from ncclean.errors import CorruptInputError

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise NotParquetError(f"{path}: not a readable Parquet file ({_one_line(error)})") \
            from None
    tag = path.stem[len("metadata_"):]
    for folder, column in RETRIEVAL_VECTORS.items():
        vectors_path = path.parent.parent / folder / f"{folder}_{tag}.npy"
        if not vectors_path.exists():
            continue
        try:
            vectors = np.load(vectors_path, mmap_mode="r")
        except (OSError, ValueError) as error:
            raise CorruptInputError(f"{vectors_path}: not a readable .npy file "
                                    f"({_one_line(error)})") from None
        if vectors.ndim != 2 or len(vectors) != table.num_rows:
            raise CorruptInputError(f"{vectors_path}: {vectors.shape[0] if vectors.ndim else 0} "
                                    f"vectors for the {table.num_rows} rows of {path}; "
                                    "re-create the folder")
        values = pa.array(np.ascontiguousarray(vectors).reshape(-1))
        table = table.append_column(column, pa.FixedSizeListArray.from_arrays(
            values, vectors.shape[1]))
    return table


def _arrow_files(state: Path) -> list[Path]:
    """The data files of a saved Hugging Face dataset, in its own order (``state.json``)."""
    try:
        files = json.loads(state.read_text())["_data_files"]
    except (OSError, ValueError, KeyError, TypeError):
        return sorted(state.parent.glob("*.arrow"))
    return [state.parent / entry["filename"] for entry in files]


ARROW_ID = "id"
"""The id column a saved Hugging Face dataset's shard is given where it has none:
``<shard>/<row>`` (its path under the dataset's folder without the suffix, and the row), stable
for the same files."""


def read_shard(shard: InputShard, columns: list[str] | None = None) -> pa.Table:
    """One input shard as an Arrow table (``columns``: only those). A shard that cannot be read
    is an error naming its file, never a table of what could be read: :class:`NotParquetError`
    for a Parquet or Arrow file that is empty or corrupt, :class:`SchemaError` when it lacks one
    of ``columns``, and :func:`ncclean.data.webdataset.read_tar`'s errors for a tar."""
    if shard.kind == "webdataset":
        from ncclean.data.webdataset import read_tar

        table = read_tar(shard.path)
    elif shard.kind == "arrow":
        table = _read_arrow(shard.path)
        if ARROW_ID not in table.column_names:  # datasets rarely carry one: the row's place
            table = table.add_column(0, ARROW_ID, pa.array(
                [f"{shard.stem}/{row}" for row in range(table.num_rows)], pa.string()))
    elif shard.kind == "clip-retrieval":
        table = _read_retrieval(shard.path)
    else:
        _check_columns(shard, shard_schema(shard).names, columns)
        try:
            return pq.read_table(shard.path, columns=columns)
        except (pa.ArrowException, OSError) as error:
            raise NotParquetError(f"{shard.path}: not a readable Parquet file "
                                  f"({_one_line(error)})") from None
    _check_columns(shard, table.column_names, columns)
    return table.select(columns) if columns else table


def shard_schema(shard: InputShard) -> pa.Schema:
    """The columns of ``shard`` (a Parquet shard's from its footer alone), with
    :func:`read_shard`'s errors."""
    if shard.kind != "parquet":
        return read_shard(shard).schema
    try:
        return pq.read_schema(shard.path)
    except (pa.ArrowException, OSError) as error:
        raise NotParquetError(f"{shard.path}: not a readable Parquet file "
                              f"({_one_line(error)})") from None


def _read_arrow(path: Path) -> pa.Table:
    """An Arrow file of a saved Hugging Face dataset (``datasets`` writes IPC streams)."""
    try:
        with pa.memory_map(str(path)) as source:
            try:
                return pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:
                source.seek(0)
                return pa.ipc.open_file(source).read_all()
    except (pa.ArrowException, OSError) as error:
        raise NotParquetError(f"{path}: not a readable Arrow file ({_one_line(error)})") from None


def _check_columns(shard: InputShard, names: list[str], columns: list[str] | None) -> None:
    missing = [c for c in columns or [] if c not in names]
    if missing:
        raise SchemaError(f"{shard.path}: no column {missing[0]!r} (other shards have it); all "
                          "shards must share one schema")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


def _stem(path: Path, root: Path) -> str:
    """The output name of a shard: its path under ``root`` without the suffix (``a/b`` for
    ``a/b.parquet``), so the output folder mirrors the input's and no two shards share a name."""
    return path.relative_to(root).with_suffix("").as_posix()


def pair_keys(ids: pa.Array | pa.ChunkedArray | list) -> np.ndarray:
    """``(n,) uint64``: a stable hash of each pair id (its text form), the order of the fit
    sample. The same id gives the same key in every process and on every machine."""
    values = ids.to_pylist() if hasattr(ids, "to_pylist") else list(ids)
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(str(v).encode(), digest_size=8).digest(), "little")
         for v in values), dtype=np.uint64, count=len(values))


def text_keys(texts: list[str]) -> np.ndarray:
    """``(n,) uint64``: a stable hash of each caption text (caption counts, own-text masks)."""
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8,
                                        person=b"caption").digest(), "little")
         for t in texts), dtype=np.uint64, count=len(texts))


def vector_keys(vectors: np.ndarray) -> np.ndarray:
    """``(n,) uint64``: a stable hash of each row's bytes (an image's identity where images are
    precomputed vectors)."""
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(np.ascontiguousarray(row).tobytes(), digest_size=8,
                                        person=b"vector").digest(), "little")
         for row in vectors), dtype=np.uint64, count=len(vectors))


def vector_heads(vectors: np.ndarray) -> np.ndarray:
    """``(n,) uint64``: each row's first eight bytes (zero-padded), a cheap test before
    :func:`vector_keys`: rows whose heads differ are different vectors."""
    rows = np.ascontiguousarray(vectors).reshape(len(vectors), -1).view(np.uint8)
    head = np.zeros((len(rows), 8), dtype=np.uint8)
    head[:, :min(8, rows.shape[1])] = rows[:, :8]
    return head.view("<u8").ravel()


def smallest_keys(keys: np.ndarray, n: int, kept: np.ndarray | None = None) -> np.ndarray:
    """The ``n`` smallest of ``kept`` (sorted ``uint64``, may be ``None``) and ``keys`` together,
    sorted: fold one shard's keys into the running fit sample with memory bounded by ``n``."""
    merged = np.unique(np.concatenate([keys.astype(np.uint64),
                                       kept if kept is not None else np.zeros(0, np.uint64)]))
    return merged[:n]


def find_sorted(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(at, found)``, both ``(len(keys),)``: where each of ``keys`` is in ``sorted_keys`` (a
    sorted array, such as :func:`smallest_keys` gives) and whether it is there at all (``at`` is
    meaningful only where ``found``); a binary search, with no set built per call."""
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return at, sorted_keys[at] == keys


def output_complete(path: Path, fit_hash: str, n_rows: int, write: str = "all") -> bool:
    """Whether ``path`` is a finished output shard of the fit ``fit_hash`` with ``n_rows`` rows
    (both recorded in its Parquet metadata when it was written, and the file holds that many),
    written as ``write`` asks (``all`` or ``scores``: :func:`ncclean.data.parquet.written`)."""
    if not path.exists():
        return False
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError):
        return False
    meta = parquet.schema_arrow.metadata or {}
    return meta.get(FIT_HASH_KEY) == fit_hash.encode() and \
        meta.get(N_ROWS_KEY) == str(n_rows).encode() and parquet.metadata.num_rows == n_rows \
        and written(parquet.schema_arrow) == write


def scored_shard(path: Path) -> bool:
    """Whether ``path`` is a scoring run's output shard (its metadata names the fit) or a file
    an ncclean command wrote with its record, finished or not."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowInvalid, OSError):
        meta = {}
    return FIT_HASH_KEY in meta or written_by_ncclean(path)


def completion_metadata(fit_hash: str, n_rows: int) -> dict[bytes, bytes]:
    """The Parquet metadata that marks an output shard complete (:func:`output_complete`)."""
    return {FIT_HASH_KEY: fit_hash.encode(), N_ROWS_KEY: str(n_rows).encode()}
