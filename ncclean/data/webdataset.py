"""Webdataset tars in img2dataset's layout, read as a table of pairs without conversion.

A tar holds samples as members sharing a key: ``KEY.jpg`` (or ``.jpeg``, ``.png``, ``.webp``)
with ``KEY.txt`` (the caption) and/or ``KEY.json`` (img2dataset's metadata: a ``caption`` field
when there is no ``.txt``; fields holding a list of numbers become vector columns, e.g.
precomputed embeddings for ``--image-emb-col``/``--text-emb-col``), and ``KEY.NAME.npy`` vectors
become the column ``NAME``. The ``.parquet`` img2dataset writes beside each tar (``00000.parquet``
beside ``00000.tar``) adds its columns (``url``, ``status``, ``width``...) by key; its rows for
samples that failed to download have no member in the tar and are not pairs.

Every sample of the tar is one row, in tar order: ``id`` (the key), ``caption``, ``image`` (the
bytes, only while scoring: written out as null), ``image_ref`` (``TAR::MEMBER``, where the bytes
are) and the other columns. A plain :mod:`tarfile` reader: one shard is read at a time.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.errors import NotParquetError

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
IMAGE_BYTES, IMAGE_REF = "image", "image_ref"


def read_tar(path: str | Path) -> pa.Table:
    """One webdataset tar (and the img2dataset ``.parquet`` beside it) as a table, one row per
    sample in tar order (see the module docstring). :class:`NotParquetError` when it is not a
    readable tar."""
    path = Path(path)
    samples: dict[str, dict] = {}
    try:
        with tarfile.open(path) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                name = Path(member.name).name
                key, _, ext = name.partition(".")
                data = tar.extractfile(member).read()
                sample = samples.setdefault(key, {})
                sample[ext.lower()] = (member.name, data)
    except (tarfile.TarError, OSError) as error:
        raise NotParquetError(f"{path}: not a readable webdataset tar ({error})") from None
    rows: dict[str, list] = {"id": [], "caption": [], IMAGE_BYTES: [], IMAGE_REF: []}
    extra: list[dict] = []
    for key, sample in samples.items():
        image = next((sample[e] for e in IMAGE_EXTENSIONS if e in sample), None)
        meta = json.loads(sample["json"][1]) if "json" in sample else {}
        caption = sample["txt"][1].decode() if "txt" in sample else meta.get("caption")
        if image is None and caption is None:
            continue  # not a pair (a stray file)
        rows["id"].append(key)
        rows["caption"].append(caption)
        rows[IMAGE_BYTES].append(image[1] if image else None)
        rows[IMAGE_REF].append(f"{path}::{image[0]}" if image else None)
        fields = {k: v for k, v in meta.items() if k not in ("key", "caption")}
        for ext, (_, data) in sample.items():
            if ext.endswith(".npy"):
                fields[ext[:-4]] = np.load(io.BytesIO(data)).astype(np.float32).ravel()
        extra.append(fields)
    table = pa.table({"id": pa.array(rows["id"], pa.string()),
                      "caption": pa.array(rows["caption"], pa.string()),
                      IMAGE_BYTES: pa.array(rows[IMAGE_BYTES], pa.binary()),
                      IMAGE_REF: pa.array(rows[IMAGE_REF], pa.string())})
    for name in sorted({k for fields in extra for k in fields}):
        if name not in table.column_names:
            table = table.append_column(name, _column([f.get(name) for f in extra]))
    return _with_sidecar(table, path.with_suffix(".parquet"))


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
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else json.dumps(v) for v in values], pa.string())


def _with_sidecar(table: pa.Table, sidecar: Path) -> pa.Table:
    """``table`` with the columns of img2dataset's per-shard Parquet, joined on the key."""
    if not sidecar.exists():
        return table
    meta = pq.read_table(sidecar)
    if "key" not in meta.column_names:
        return table
    keys = meta.column("key").cast(pa.string()).to_pylist()
    at = {key: k for k, key in enumerate(keys)}
    take = pa.array([at.get(key) for key in table.column("id").to_pylist()], pa.int64())
    for name in meta.column_names:
        if name not in table.column_names and name != "key":
            table = table.append_column(name, meta.column(name).take(take))
    return table
