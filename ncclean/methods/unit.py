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
    """``vectors`` scaled to unit length by row, ``block`` rows at a time; ``vectors`` itself
    when every row is within ``tolerance`` of unit length (or zero)."""
    norms = np.concatenate([row_norms(vectors[i:i + block]) for i in range(0, len(vectors), block)]
                           or [np.zeros(0)])
    if np.all((np.abs(norms - 1) <= tolerance) | (norms == 0)):
        return vectors
    dtype = vectors.dtype if vectors.dtype in (np.float16, np.float32) else np.float32
    out = np.empty(vectors.shape, dtype=dtype)
    for i in range(0, len(vectors), block):
        rows = vectors[i:i + block].astype(np.float32)
        out[i:i + block] = rows / np.maximum(norms[i:i + block, None], 1e-12)
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
