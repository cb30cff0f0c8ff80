"""A shared space for image and caption vectors that come from different encoders.

Two precomputed columns from unrelated encoders (ImageNet features beside e5 caption vectors)
have no common coordinates, so their cosine means nothing (and is undefined when their widths
differ). Canonical correlation analysis finds the directions in which the two are most
correlated across the corpus's pairs; the cosine of a pair's projections onto the leading
directions is then a similarity like CLIP's, fitted in closed form on the corpus itself.

The fit is on the noisy pairs: CCA is a second-moment fit, and the mismatched pairs add
cross-covariance that is close to zero on average, so the aligned directions come from the
matched ones. Each covariance is shrunk towards a multiple of the identity (ridge, relative to
its mean eigenvalue): with a few thousand pairs and a thousand dimensions the unshrunk whitening
fits noise. A strong ridge (100) and 128 directions ranked noise best across 20-80% injected
noise on the clip-art corpus (``benchmarks/RESULTS.md``, "A shared space for two encoders").

scikit-learn's ``CCA`` is iterative (NIPALS, one component at a time), has no ridge, and copies
the pair matrix; this closed form accumulates the moments block by block, so a million pairs
cost one pass and ``O(d^2)`` memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ncclean.errors import BadOptionError

_BLOCK = 16384


@dataclass(frozen=True)
class Alignment:
    """A fitted CCA: ``project_images(x)`` for ``(n, d_image)`` vectors and ``project_texts``
    for ``(n, d_text)`` give ``(n, dims) float32`` unit vectors in the shared space.

    ``correlations``: ``(dims,) float64``, the canonical correlations of the kept directions,
    largest first (shrunk by the ridge, so below the unregularised ones)."""

    image_mean: np.ndarray
    text_mean: np.ndarray
    image_projection: np.ndarray
    text_projection: np.ndarray
    correlations: np.ndarray
    ridge: float

    @property
    def dims(self) -> int:
        return len(self.correlations)

    def project_images(self, vectors: np.ndarray) -> np.ndarray:
        return _project(vectors, self.image_mean, self.image_projection)

    def project_texts(self, vectors: np.ndarray) -> np.ndarray:
        return _project(vectors, self.text_mean, self.text_projection)

    def describe(self) -> dict:
        """The report's record of the fit."""
        return {"method": "ridge CCA", "dims": self.dims, "ridge": self.ridge,
                "top_correlations": [round(float(c), 4) for c in self.correlations[:5]]}


def fit_alignment(images: np.ndarray, texts: np.ndarray, image_group: np.ndarray,
                  text_group: np.ndarray, dims: int = 128, ridge: float = 100.0) -> Alignment:
    """Ridge CCA between ``images[image_group]`` and ``texts[text_group]``.

    ``images`` ``(n_images, d_image)`` and ``texts`` ``(n_texts, d_text)`` are the feature tables
    (any float dtype); ``image_group`` and ``text_group`` ``(n_pairs,) int64`` say which entries
    form each pair, and every pair counts once (an image in three pairs counts three times).
    ``dims`` is capped at the narrower width. Raises :class:`BadOptionError` for a ``dims`` below
    1, a negative ``ridge`` or fewer than two pairs."""
    if dims < 1:
        raise BadOptionError(f"align_dims must be at least 1, got {dims}")
    if ridge < 0:
        raise BadOptionError(f"align_ridge must not be negative, got {ridge}")
    if len(image_group) < 2:
        raise BadOptionError("aligning two encoders needs at least two pairs")
    image_counts = np.bincount(image_group, minlength=len(images)).astype(np.float64)
    text_counts = np.bincount(text_group, minlength=len(texts)).astype(np.float64)
    image_mean, image_cov = _moments(images, image_counts)
    text_mean, text_cov = _moments(texts, text_counts)
    cross = _cross_moment(images, texts, image_group, text_group, image_mean, text_mean)
    image_white = _whitener(image_cov, ridge)
    text_white = _whitener(text_cov, ridge)
    left, correlations, right_t = np.linalg.svd(image_white.T @ cross @ text_white)
    dims = min(dims, len(correlations))
    return Alignment(image_mean=image_mean.astype(np.float32),
                     text_mean=text_mean.astype(np.float32),
                     image_projection=(image_white @ left[:, :dims]).astype(np.float32),
                     text_projection=(text_white @ right_t[:dims].T).astype(np.float32),
                     correlations=correlations[:dims], ridge=ridge)


def _moments(table: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pair-weighted mean ``(d,)`` and covariance ``(d, d)`` of a feature table, float64."""
    total = counts.sum()
    mean = np.zeros(table.shape[1])
    for start in range(0, len(table), _BLOCK):
        mean += counts[start:start + _BLOCK] @ table[start:start + _BLOCK].astype(np.float64)
    mean /= total
    cov = np.zeros((table.shape[1], table.shape[1]))
    for start in range(0, len(table), _BLOCK):
        rows = table[start:start + _BLOCK].astype(np.float32) - mean.astype(np.float32)
        cov += (rows * counts[start:start + _BLOCK, None].astype(np.float32)).T @ rows
    return mean, cov / total


def _cross_moment(images: np.ndarray, texts: np.ndarray, image_group: np.ndarray,
                  text_group: np.ndarray, image_mean: np.ndarray,
                  text_mean: np.ndarray) -> np.ndarray:
    """``(d_image, d_text)`` float64: the pairs' cross-covariance."""
    out = np.zeros((images.shape[1], texts.shape[1]))
    for start in range(0, len(image_group), _BLOCK):
        a = images[image_group[start:start + _BLOCK]].astype(np.float32) - \
            image_mean.astype(np.float32)
        b = texts[text_group[start:start + _BLOCK]].astype(np.float32) - \
            text_mean.astype(np.float32)
        out += a.T @ b
    return out / len(image_group)


def _whitener(cov: np.ndarray, ridge: float) -> np.ndarray:
    """``W`` with ``W.T @ (cov + ridge * mean_eigenvalue * I) @ W = I``: the inverse transpose
    of the shrunk covariance's Cholesky factor."""
    shrunk = cov + ridge * max(np.trace(cov) / len(cov), 1e-12) * np.eye(len(cov))
    factor = np.linalg.cholesky(shrunk)
    return np.linalg.inv(factor).T


def _project(vectors: np.ndarray, mean: np.ndarray, projection: np.ndarray) -> np.ndarray:
    out = np.empty((len(vectors), projection.shape[1]), dtype=np.float32)
    for start in range(0, len(vectors), _BLOCK):
        rows = (vectors[start:start + _BLOCK].astype(np.float32) - mean) @ projection
        out[start:start + _BLOCK] = rows / np.maximum(
            np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return out
