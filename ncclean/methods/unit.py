"""Unit-length vectors for ``clip``: precomputed image and caption vectors scaled to unit length
in their own dtype, without a copy where they already are."""

from __future__ import annotations

import warnings

import numpy as np

from ncclean.models.features import Features
from ncclean.train.scoring import Embeddings


def raw_embeddings(features: Features) -> Embeddings:
    """Unit-length precomputed image and caption vectors, in their own dtype (float16 stays
    float16). Vectors that are already unit length (CLIP's usually are) are used in place, so a
    million-pair corpus is not copied."""
    return Embeddings(images=unit_rows(features.image_data), texts=unit_rows(features.text_data))


def unit_rows(vectors: np.ndarray, block: int = 65536, tolerance: float = 1e-2) -> np.ndarray:
    """``vectors`` scaled to unit length by row, ``block`` rows at a time; a row within
    ``tolerance`` of unit length (or zero) is kept as it is, so a row's vector never depends on
    the other rows, and ``vectors`` itself is returned when every row is."""
    norms = np.concatenate([row_norms(vectors[i:i + block]) for i in range(0, len(vectors), block)]
                           or [np.zeros(0)])
    kept = (np.abs(norms - 1) <= tolerance) | (norms == 0)
    if kept.all():
        return vectors
    scale = np.where(kept, np.float32(1), np.maximum(norms, 1e-12)).astype(np.float32)
    dtype = vectors.dtype if vectors.dtype in (np.float16, np.float32) else np.float32
    out = np.empty(vectors.shape, dtype=dtype)
    for i in range(0, len(vectors), block):
        out[i:i + block] = vectors[i:i + block].astype(np.float32) / scale[i:i + block, None]
    return out


def row_norms(rows: np.ndarray) -> np.ndarray:
    """Row norms in float32, summed by torch from the rows' own dtype (no float32 copy)."""
    import torch

    if rows.dtype not in (np.float16, np.float32):
        rows = rows.astype(np.float32)
    with warnings.catch_warnings():  # vectors read from the cache are read-only; only read here
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        rows = torch.from_numpy(np.ascontiguousarray(rows))
    return torch.linalg.vector_norm(rows, dim=1, dtype=torch.float32).numpy()
