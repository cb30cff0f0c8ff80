"""Webdataset tars in img2dataset's layout, read as a table of pairs without conversion.

A tar holds samples as runs of consecutive members sharing a key, webdataset's own convention:
the key is a member's path up to the first dot of its file name (``00001.jpg`` and
``00001.image_emb.npy`` have the key ``00001``, ``a/00001.jpg`` the key ``a/00001``), the rest is
its extension. A sample ends where the key changes or an extension repeats, so a key written
twice gives two samples (two rows with one id: the pipeline marks both invalid), never one
merged row. A sample holds ``KEY.jpg`` (or ``.jpeg``, ``.png``, ``.webp``) with ``KEY.txt`` (the
caption) and/or ``KEY.json`` (img2dataset's metadata: a ``caption`` field when there is no
``.txt``; fields holding a list of numbers become vector columns, e.g. precomputed embeddings for
``--image-emb-col``/``--text-emb-col``), and ``KEY.NAME.npy`` vectors become the column ``NAME``.
The ``.parquet`` img2dataset writes beside each tar (``00000.parquet`` beside ``00000.tar``) adds
its columns (``url``, ``status``, ``width``...) by key; its rows for samples that failed to
download have no member in the tar and are not pairs.

Every sample of the tar is one row, in tar order: ``id`` (the key), ``caption``, ``image`` (the
bytes, only while scoring: written out as null), ``image_ref`` (``TAR::MEMBER``, where the bytes
are) and the other columns. A plain :mod:`tarfile` reader: one shard is read at a time.

A tar is read whole or refused with :class:`CorruptInputError`, never read as far as it goes:
Python's :mod:`tarfile` stops without a word where an archive is cut between members or inside
a header, so the reader checks that the archive ends in its end-of-archive marker (a zero block;
writers put two, padded to a record) and that no second archive follows it (tars joined with
``cat``). A member it cannot read (malformed JSON, a caption that is not UTF-8, an ``.npy`` that
is not an array of numbers) refuses the tar too, naming the member, rather than marking the row
invalid: such a member means the tar was damaged or written by a broken tool, and the row would
have lost the caption or vectors that member held.
"""

from __future__ import annotations

import io
import json
import posixpath
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.errors import CorruptInputError, EmptyInputError, NotParquetError

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
IMAGE_BYTES, IMAGE_REF = "image", "image_ref"
BLOCK = tarfile.BLOCKSIZE

Sample = dict[str, tuple[str, bytes]]
"""One sample's members: extension (lower case) -> (member name, bytes)."""


def read_tar(path: str | Path) -> pa.Table:
    """One webdataset tar (and the img2dataset ``.parquet`` beside it) as a table, one row per
    sample in tar order (see the module docstring). :class:`EmptyInputError` for a 0-byte file,
    :class:`NotParquetError` when it is not a tar, :class:`CorruptInputError` when it is cut
    short or a member cannot be read."""
    path = Path(path)
    rows: dict[str, list] = {"id": [], "caption": [], IMAGE_BYTES: [], IMAGE_REF: []}
    extra: list[dict] = []
    for key, sample in read_samples(path):
        image = next((sample[e] for e in IMAGE_EXTENSIONS if e in sample), None)
        meta = _json_member(path, sample["json"]) if "json" in sample else {}
        caption = _text_member(path, sample["txt"]) if "txt" in sample else meta.get("caption")
        if image is None and caption is None:
            continue  # not a pair (a stray file)
        rows["id"].append(key)
        rows["caption"].append(caption if caption is None else str(caption))
        rows[IMAGE_BYTES].append(image[1] if image else None)
        rows[IMAGE_REF].append(f"{path}::{image[0]}" if image else None)
        fields = {k: v for k, v in meta.items() if k not in ("key", "caption")}
        for ext, member in sample.items():
            if ext.endswith(".npy"):
                fields[ext[:-4]] = _npy_member(path, member)
        extra.append(fields)
    table = pa.table({"id": pa.array(rows["id"], pa.string()),
                      "caption": pa.array(rows["caption"], pa.string()),
                      IMAGE_BYTES: pa.array(rows[IMAGE_BYTES], pa.binary()),
                      IMAGE_REF: pa.array(rows[IMAGE_REF], pa.string())})
    for name in sorted({k for fields in extra for k in fields}):
        if name not in table.column_names:
            table = table.append_column(name, _column([f.get(name) for f in extra]))
    return _with_sidecar(table, path.with_suffix(".parquet"))


def read_samples(path: Path) -> list[tuple[str, Sample]]:
    """The samples of the tar at ``path`` in tar order, ``(key, members)`` each, grouped as
    webdataset groups them (the module docstring); members without a key or an extension (and
    anything but regular files) are left out, as webdataset leaves them out."""
    try:
        empty = path.stat().st_size == 0
    except OSError as error:
        raise NotParquetError(f"{path}: cannot read it ({error.strerror})") from None
    if empty:
        raise EmptyInputError(f"{path}: an empty file (0 bytes), not a webdataset tar; "
                              "re-download or re-create it")
    try:
        with tarfile.open(path) as tar:
            return _group(tar, path)
    except (tarfile.TarError, OSError, EOFError, zlib.error):  # raised by open: _group's are typed
        raise NotParquetError(f"{path}: not a tar archive (plain, gzip, bzip2 or xz); a "
                              "webdataset shard must be one") from None


def _group(tar: tarfile.TarFile, path: Path) -> list[tuple[str, Sample]]:
    """:func:`read_samples` on the opened ``tar``: every member read, the end checked."""
    samples: list[tuple[str, Sample]] = []
    key, sample, last, reading = "", {}, None, None
    try:
        for member in tar:
            last = member.name
            if not member.isfile():
                continue
            name = posixpath.normpath(member.name).lstrip("/")
            stem, dot, ext = posixpath.basename(name).partition(".")
            if not stem or not dot:
                continue
            reading = member.name
            data = tar.extractfile(member).read()
            reading = None
            here = posixpath.join(posixpath.dirname(name), stem)
            if here != key or ext.lower() in sample:
                if sample:
                    samples.append((key, sample))
                key, sample = here, {}
            sample[ext.lower()] = (member.name, data)
        _check_end(tar, path, last)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        where = f"inside member {reading}" if reading else \
            f"after member {last}" if last else "at its first member"
        raise CorruptInputError(f"{path}: truncated or damaged tar: it cannot be read {where} "
                                f"({_one_line(error)}), so samples are missing; re-download or "
                                "re-create it") from None
    if sample:
        samples.append((key, sample))
    return samples


def _check_end(tar: tarfile.TarFile, path: Path, last: str | None) -> None:
    """:class:`CorruptInputError` unless the archive ends in a zero block where :mod:`tarfile`
    stopped reading (it stops silently at the end of the file or at a header it cannot read)
    and no second archive starts after it."""
    tar.fileobj.seek(tar.offset)
    block = tar.fileobj.read(BLOCK)
    if len(block) < BLOCK or block.count(0) != BLOCK:
        after = f"after member {last}" if last else "before its first member"
        what = "ends" if len(block) < BLOCK else "holds no readable member header"
        raise CorruptInputError(
            f"{path}: truncated tar: it {what} at byte {tar.offset}, {after}, without the "
            "end-of-archive marker, so later samples are missing; re-download or re-create it")
    while block := tar.fileobj.read(1 << 16):
        nonzero = len(block) - len(block.lstrip(b"\0"))
        if nonzero == len(block):
            continue
        header = block[nonzero - nonzero % BLOCK:][:BLOCK]
        try:
            tarfile.TarInfo.frombuf(header.ljust(BLOCK, b"\0"), "utf-8", "surrogateescape")
        except tarfile.HeaderError:
            return  # padding that is not zeros: no member follows
        raise CorruptInputError(
            f"{path}: a second tar archive follows the first one's end-of-archive marker (tars "
            "joined with cat?), and its samples would be missed; re-create it as one archive")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _json_member(path: Path, member: tuple[str, bytes]) -> dict:
    try:
        meta = json.loads(member[1])
    except (ValueError, UnicodeDecodeError) as error:
        raise CorruptInputError(f"{path}: member {member[0]} is not valid JSON "
                                f"({_one_line(error)}); fix or re-create the tar") from None
    if not isinstance(meta, dict):
        raise CorruptInputError(f"{path}: member {member[0]} holds a JSON "
                                f"{type(meta).__name__}, not an object of fields; fix or "
                                "re-create the tar")
    return meta


def _text_member(path: Path, member: tuple[str, bytes]) -> str:
    try:
        return member[1].decode()
    except UnicodeDecodeError as error:
        raise CorruptInputError(f"{path}: member {member[0]} is not UTF-8 text (byte "
                                f"{error.start}); fix or re-create the tar") from None


def _npy_member(path: Path, member: tuple[str, bytes]) -> np.ndarray:
    try:
        return np.load(io.BytesIO(member[1])).astype(np.float32).ravel()
    except (ValueError, TypeError, OSError, EOFError) as error:
        raise CorruptInputError(f"{path}: member {member[0]} is not a .npy array of numbers "
                                f"({_one_line(error)}); fix or re-create the tar") from None


def _column(values: list) -> pa.Array:
    """A column from JSON values: lists of numbers as float32 vectors, scalars as they are,
    anything else as JSON text."""
    if all(v is None or (isinstance(v, list | np.ndarray) and
                         all(isinstance(x, int | float | np.floating) for x in v))
           for v in values):
        return pa.array([None if v is None else np.asarray(v, np.float32) for v in values],
                        pa.list_(pa.float32()))
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([None if v is None else json.dumps(v) for v in values], pa.string())


def _with_sidecar(table: pa.Table, sidecar: Path) -> pa.Table:
    """``table`` with the columns of img2dataset's per-shard Parquet, joined on the key (the
    sample's key, or its file-name part for a tar whose members sit in a folder)."""
    if not sidecar.exists():
        return table
    try:
        meta = pq.read_table(sidecar)
    except (pa.ArrowInvalid, OSError) as error:
        raise NotParquetError(f"{sidecar}: not a readable Parquet file ({_one_line(error)}); "
                              "it is read with the tar beside it") from None
    if "key" not in meta.column_names:
        return table
    keys = meta.column("key").cast(pa.string()).to_pylist()
    at = {key: k for k, key in enumerate(keys)}
    take = pa.array([at.get(key, at.get(posixpath.basename(key)))
                     for key in table.column("id").to_pylist()], pa.int64())
    for name in meta.column_names:
        if name not in table.column_names and name != "key":
            table = table.append_column(name, meta.column(name).take(take))
    return table
