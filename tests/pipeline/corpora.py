"""Tiny corpora with precomputed vectors, in shards, for the fit/apply tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def vector_table(n: int, d: int = 16, noise: float = 0.3, seed: int = 0,
                 dtype=np.float32, text_width: int | None = None) -> pa.Table:
    """``n`` pairs with ids ``p<k>``: captions' vectors near their images' for clean pairs, a
    random vector for the first ``noise`` share (``noisy_gt`` says which); some captions repeat.
    ``text_width``: the caption vectors cut to their first ``text_width`` columns, two encoders'
    columns (``clip`` fits a CCA on them)."""
    rng = np.random.default_rng(seed)
    image = rng.normal(size=(n, d))
    text = image + 0.5 * rng.normal(size=(n, d))
    noisy = rng.random(n) < noise
    text[noisy] = rng.normal(size=(int(noisy.sum()), d))
    text = text[:, :text_width]
    captions = [f"caption {k % (n // 2) if k % 7 == 0 else k}" for k in range(n)]
    vectors = {"img": image.astype(dtype), "txt": text.astype(dtype)}
    return pa.table({
        "id": [f"p{k}" for k in range(n)], "caption": captions,
        "img": pa.array(list(vectors["img"]), pa.list_(pa.from_numpy_dtype(dtype))),
        "txt": pa.array(list(vectors["txt"]), pa.list_(pa.from_numpy_dtype(dtype))),
        "noisy_gt": noisy,
    })


def write_shards(table: pa.Table, folder: Path, shards: int) -> Path:
    """``table`` split into ``shards`` Parquet files ``part-000.parquet``... in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, table.num_rows, shards + 1).astype(int)
    for k in range(shards):
        pq.write_table(table.slice(bounds[k], bounds[k + 1] - bounds[k]),
                       folder / f"part-{k:03d}.parquet")
    return folder
