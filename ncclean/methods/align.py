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
noise on the clip-art corpus (``benchmarks/results/clip.md``, "A shared space for two encoders");
corpora without clip art's repeated collection labels, once their distinct captions and images
outnumber the dimensions, rank better with a ridge of 30
(``clip``'s ``align_ridge=auto``, :mod:`ncclean.methods.cca_rules`).

scikit-learn's ``CCA`` is iterative (NIPALS, one component at a time), has no ridge, and copies
the pair matrix; this closed form accumulates the moments block by block, so a million pairs
cost one pass and ``O(d^2)`` memory. A table with fewer rows than its width (a few hundred
images of 1,280 features) is summed in an orthonormal basis of its rows: every covariance and
cross-covariance of its pairs lies in their span, where the ridge CCA's directions lie too, so
the fit is the same in exact arithmetic and its factorisations are as wide as the table is long.

A CCA needs both sides to vary: where every pair has the same image (a corpus of two to four
captions of one picture, say) or the same caption, no direction of that side correlates with
anything, and :func:`unalignable` says so before a fit is tried.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ncclean.errors import BadOptionError
from ncclean.models.linear import linear

_BLOCK = 16384
#: A direction whose canonical correlation is below this share of the first's correlates nothing
#: (past the cross-covariance's rank the decomposition's vectors are arbitrary, up to rounding):
#: a fit keeps none, nor more than ``n - 1`` directions from ``n`` pairs.
NO_CORRELATION = 1e-6
#: The smallest ``ridge`` a fit takes (relative to the mean eigenvalue, as every ridge here).
MIN_RIDGE = 1e-6
#: How far above 1 rounding may carry the first canonical correlation of shrunk covariances
#: (which correlate below 1); past it the ridge was too small for the arithmetic.
ROUNDING = 1e-6
#: While a table lives: its basis (:func:`_in_basis`), so that every sum of its pairs, and so
#: every pair of moments that subtract, is in the same one (feature tables are never written in
#: place).
_BASES: dict[int, tuple] = {}
#: A side whose pairs' variance is below this share of their mean squared norm holds one vector
#: up to float32 rounding (about 1e-7 of it): it has nothing to correlate.
MIN_VARIANCE = 1e-5


@dataclass(frozen=True)
class Alignment:
    """A fitted CCA: ``project_images(x, dtype)`` for ``(n, d_image)`` vectors and
    ``project_texts`` for ``(n, d_text)`` give ``(n, dims)`` unit vectors in the shared space,
    stored as ``dtype`` (``np.float32`` or ``np.float16``).

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

    def project_images(self, vectors: np.ndarray, dtype: type = np.float32) -> np.ndarray:
        return _project(vectors, self.image_mean, self.image_projection, dtype)

    def project_texts(self, vectors: np.ndarray, dtype: type = np.float32) -> np.ndarray:
        return _project(vectors, self.text_mean, self.text_projection, dtype)

    def pair_cosine(self, images: np.ndarray, texts: np.ndarray, image_entries: np.ndarray,
                    text_entries: np.ndarray) -> np.ndarray:
        """``(n,) float32``: the cosine in this space of ``images[image_entries[k]]`` and
        ``texts[text_entries[k]]`` (raw vector tables), each distinct entry projected once."""
        from ncclean.train.scoring import Embeddings

        image_rows, image_at = np.unique(image_entries, return_inverse=True)
        text_rows, text_at = np.unique(text_entries, return_inverse=True)
        projected = Embeddings(images=self.project_images(images[image_rows]),
                               texts=self.project_texts(texts[text_rows]))
        return projected.similarity(image_at, text_at)

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
    ``dims`` is capped at the narrower width, at one less than the pairs, and at the directions
    in which they correlate at all (:data:`NO_CORRELATION`). Raises :class:`BadOptionError` for
    a ``dims`` below 1, a ``ridge`` below :data:`MIN_RIDGE`, or pairs :func:`unalignable`
    refuses."""
    return alignment_from_sums(pair_sums(images, texts, image_group, text_group), dims, ridge)


@dataclass(frozen=True)
class PairSums:
    """The raw moments of a set of pairs, float64 tensors: ``count``, the sums of image and
    caption vectors ``(d_image,)``, ``(d_text,)`` and of their products ``(d_image, d_image)``,
    ``(d_text, d_text)``, ``(d_image, d_text)``. Sums of disjoint sets subtract, so a fit that
    leaves a fold out costs no second pass over the pairs.

    ``bases``: for each side, ``None`` where its vectors were summed as they are, or the
    ``(d, r) float64`` orthonormal basis of its table's rows (:func:`pair_sums`) whose
    coordinates were summed instead (``d`` the vectors' width, ``r`` the table's rows).

    ``source``: within :func:`shared_fits`, a fingerprint of what was summed (the two tables'
    values and the pairs' indices), so a fit of the same pairs is found without hashing the
    moments; ``None`` elsewhere."""

    count: int
    sums: tuple[torch.Tensor, torch.Tensor]
    products: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    source: tuple | None = field(default=None, compare=False)
    bases: tuple[torch.Tensor | None, torch.Tensor | None] = field(default=(None, None),
                                                                   compare=False)

    @property
    def widths(self) -> tuple[int, int]:
        """The vectors' own widths (not their coordinates' where a side is in a basis)."""
        return tuple(len(total) if basis is None else basis.shape[0]
                     for total, basis in zip(self.sums, self.bases))

    def __sub__(self, other: PairSums) -> PairSums:
        if not all(a is b or (a is not None and b is not None and torch.equal(a, b))
                   for a, b in zip(self.bases, other.bases)):
            raise ValueError("moments summed in different bases do not subtract")
        source = None if self.source is None or other.source is None \
            else ("-", self.source, other.source)
        return PairSums(self.count - other.count,
                        tuple(a - b for a, b in zip(self.sums, other.sums)),
                        tuple(a - b for a, b in zip(self.products, other.products)), source,
                        self.bases)


#: While :func:`shared_fits` is active: the widest fit of each set of pairs and ridge solved.
_SHARED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("shared_fits",
                                                                     default=None)


@contextlib.contextmanager
def shared_fits(widest: int) -> Iterator[None]:
    """Within it, a CCA of pairs whose moments (and ridge) were fitted before is not solved
    again: each is solved once at ``widest`` directions and cut to the ``dims`` asked, the same
    directions a narrower fit keeps (fits of several widths on the same folds share their
    whitening and decomposition, most of a fit's cost)."""
    token = _SHARED.set({"widest": widest, "fits": {}, "tables": {}})
    try:
        yield
    finally:
        _SHARED.reset(token)


def alignment_from_sums(moments: PairSums, dims: int = 128, ridge: float = 100.0) -> Alignment:
    """The ridge CCA of the pairs whose moments are ``moments`` (:func:`fit_alignment`)."""
    if dims < 1:
        raise BadOptionError(f"align_dims must be at least 1, got {dims}")
    if not ridge >= MIN_RIDGE:  # without shrinkage the whitening fails where a width exceeds
        # the pairs; below this, in the rounding of the covariances, it fails or overfits by luck
        raise BadOptionError(f"align_ridge must be at least {MIN_RIDGE:g} (a share of the "
                             f"covariances' mean eigenvalue), got {ridge}")
    if (reason := unalignable(moments)) is not None:
        raise BadOptionError(f"aligning two encoders needs {reason}")
    if (shared := _SHARED.get()) is None or dims > shared["widest"]:
        return _solve(moments, dims, ridge)
    key = (moments.source or _digest(moments), ridge)
    if key not in shared["fits"]:
        shared["fits"][key] = _solve(moments, shared["widest"], ridge)
    widest = shared["fits"][key]
    dims = min(dims, widest.dims)
    return replace(widest, image_projection=widest.image_projection[:, :dims],
                   text_projection=widest.text_projection[:, :dims],
                   correlations=widest.correlations[:dims])


def _digest(moments: PairSums) -> bytes:
    """A fingerprint of ``moments``' values."""
    return _fingerprint(str(moments.count), *(t.numpy() for t in (
        *moments.sums, *moments.products, *(b for b in moments.bases if b is not None))))


def _fingerprint(*parts: str | np.ndarray) -> bytes:
    """A 128-bit hash of ``parts``: strings, and arrays with their dtype and shape."""
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        if isinstance(part, str):
            digest.update(part.encode() + b"\0")
        else:
            digest.update(f"{part.dtype.str}{part.shape}".encode())
            digest.update(np.ascontiguousarray(part).tobytes())
    return digest.digest()


def _sources(images: np.ndarray, texts: np.ndarray, image_group: np.ndarray,
             text_group: np.ndarray) -> tuple | None:
    """:attr:`PairSums.source` of these pairs within :func:`shared_fits`, else ``None``. Each
    table is hashed once while it lives (a weak reference tells a table from a later object
    given its ``id``)."""
    if (shared := _SHARED.get()) is None:
        return None
    digests = [_per_table(shared["tables"], table, lambda t: _fingerprint(np.asarray(t)))
               for table in (images, texts)]
    return ("pairs", *digests, _fingerprint(np.asarray(image_group), np.asarray(text_group)))


def _per_table(cache: dict, table: np.ndarray, compute, forget: bool = False):
    """``compute(table)``, kept in ``cache`` while ``table`` lives (a weak reference tells a
    table from a later object given its ``id``; ``forget``: the entry goes with the table)."""
    known = cache.get(id(table))
    if known is None or known[0]() is not table:
        known = cache[id(table)] = (weakref.ref(table), compute(table))
        if forget:
            weakref.finalize(table, cache.pop, id(table), None)
    return known[1]


def _in_basis(table: np.ndarray) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(basis, coordinates)`` of a table with fewer rows than its width: an orthonormal
    ``(d, r) float64`` basis of its rows (as float32, the values :func:`_block` reads) and the
    rows' ``(r, r) float64`` coordinates in it; ``(None, None)`` for a table at least as long as
    it is wide. Each table's is computed once while it lives (:data:`_BASES`)."""
    if len(table) >= table.shape[1]:
        return None, None
    return _per_table(_BASES, table, _basis, forget=True)


def _basis(table: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    rows = _block(table, slice(None)).double()
    basis = torch.linalg.qr(rows.T, mode="reduced").Q
    return basis, rows @ basis


def _solve(moments: PairSums, dims: int, ridge: float) -> Alignment:
    n = moments.count
    mean_i, mean_t = (total / n for total in moments.sums)
    image_cov, text_cov, cross = (
        total / n - torch.outer(u, v) for total, (u, v) in
        zip(moments.products, ((mean_i, mean_i), (mean_t, mean_t), (mean_i, mean_t))))
    # the ridge is relative to the mean eigenvalue over the vectors' whole width
    image_width, text_width = moments.widths
    try:
        image_factor = _factor(image_cov, ridge, image_width)
        text_factor = _factor(text_cov, ridge, text_width)
    except torch.linalg.LinAlgError:  # rounding beat a tiny ridge on a nearly constant side
        raise _singular(ridge) from None
    # the whitened cross-covariance L_i^-1 C L_t^-T, by triangular solves against C; every
    # factorisation by torch, which took about half numpy's time in a whole score (speed.md)
    half = torch.linalg.solve_triangular(image_factor, cross, upper=False)
    whitened = torch.linalg.solve_triangular(text_factor, half.T, upper=False).T
    left, correlations, right_t = torch.linalg.svd(whitened, full_matrices=False)
    correlations = correlations.numpy()
    if not correlations[0] <= 1 + ROUNDING:
        raise _singular(ridge)
    dims = min(dims, n - 1, max(1, int(np.count_nonzero(
        correlations > NO_CORRELATION * correlations[0]))))
    image_basis, text_basis = moments.bases
    return Alignment(image_mean=_raw(image_basis, mean_i).numpy().astype(np.float32),
                     text_mean=_raw(text_basis, mean_t).numpy().astype(np.float32),
                     image_projection=_unwhiten(image_factor, left[:, :dims], image_basis),
                     text_projection=_unwhiten(text_factor, right_t[:dims].T, text_basis),
                     correlations=correlations[:dims], ridge=ridge)


def _singular(ridge: float) -> BadOptionError:
    """The error of a ridge too small for rounding: the factor failed, or a correlation came out
    above 1."""
    return BadOptionError(f"the CCA's covariances are singular at align_ridge {ridge}; give a "
                          "larger -p align_ridge")


def _raw(basis: torch.Tensor | None, coordinates: torch.Tensor) -> torch.Tensor:
    """Vectors (or projections) given by ``coordinates`` in ``basis`` in the raw coordinates."""
    return coordinates if basis is None else basis @ coordinates


def unalignable(moments: PairSums) -> str | None:
    """Why no CCA can be fitted on the pairs whose moments are ``moments`` (the end of a
    sentence: "at least two pairs", "pairs whose images differ", "pairs whose captions
    differ"), or ``None`` when one can."""
    if moments.count < 2:
        return "at least two pairs"
    for side, total, square in (("images", moments.sums[0], moments.products[0]),
                                ("captions", moments.sums[1], moments.products[1])):
        mean_square = float(torch.trace(square)) / moments.count
        variance = mean_square - float(total @ total) / moments.count ** 2
        if not variance > MIN_VARIANCE * mean_square:
            return f"pairs whose {side} differ"
    return None


def pair_sums(images: np.ndarray, texts: np.ndarray, image_group: np.ndarray,
              text_group: np.ndarray) -> PairSums:
    """The raw moments (:class:`PairSums`) of the pairs ``(image_group[i], text_group[i])``, in
    one pass over them.

    Each block is converted to float32 once (by torch, which does float16 faster than numpy) and
    its raw products are summed in float64; centring happens once, in the fit: the products are
    most of the cost (a million 512-d pairs: about 19 s on two cores). A table with fewer rows
    than its width is summed in its rows' basis (:attr:`PairSums.bases`), in float64."""
    (image_basis, image_rows), (text_basis, text_rows) = _in_basis(images), _in_basis(texts)
    # each side's summed width: its vectors', or its coordinates' in the basis of its rows
    width = tuple(t.shape[1] if rows is None else rows.shape[1]
                  for t, rows in ((images, image_rows), (texts, text_rows)))
    sums = (torch.zeros(width[0], dtype=torch.float64), torch.zeros(width[1], dtype=torch.float64))
    products = (torch.zeros(width[0], width[0], dtype=torch.float64),
                torch.zeros(width[1], width[1], dtype=torch.float64),
                torch.zeros(width[0], width[1], dtype=torch.float64))
    for start in range(0, len(image_group), _BLOCK):
        a = _rows(images, image_rows, image_group[start:start + _BLOCK])
        b = _rows(texts, text_rows, text_group[start:start + _BLOCK])
        sums[0].add_(a.sum(0, dtype=torch.float64))
        sums[1].add_(b.sum(0, dtype=torch.float64))
        for total, (x, z) in zip(products, ((a, a), (b, b), (a, b))):
            if x.dtype != z.dtype:  # one side in its basis
                x, z = x.double(), z.double()
            total.add_((x.T @ z).double())
    return PairSums(len(image_group), sums, products,
                    _sources(images, texts, image_group, text_group), (image_basis, text_basis))


def _rows(table: np.ndarray, coordinates: torch.Tensor | None, index: np.ndarray) \
        -> torch.Tensor:
    """Rows ``index`` of a table: in its basis where ``coordinates`` holds them (float64), else
    as :func:`_block` reads them."""
    if coordinates is None:
        return _block(table, index)
    return coordinates[torch.from_numpy(np.asarray(index, np.int64))]


def _block(table: np.ndarray, index: np.ndarray | slice) -> torch.Tensor:
    """Rows ``index`` of a feature table as a float32 tensor (a copy: cached tables are
    read-only)."""
    return torch.from_numpy(np.array(table[index], dtype=np.float32))


def _factor(cov: torch.Tensor, ridge: float, width: int) -> torch.Tensor:
    """``L``, lower triangular, with ``L @ L.T = cov + ridge * mean_eigenvalue * I``: whitening
    is ``L^-1``. The mean eigenvalue is over ``width`` dimensions, the vectors' own, where
    ``cov`` is that of their coordinates in a basis of fewer."""
    shift = ridge * max(float(torch.diagonal(cov).sum()) / width, 1e-12)
    return torch.linalg.cholesky(cov + shift * torch.eye(len(cov), dtype=cov.dtype))


def _unwhiten(factor: torch.Tensor, directions: torch.Tensor,
              basis: torch.Tensor | None) -> np.ndarray:
    """``L^-T @ directions`` (float32), in raw coordinates: whitened directions as projections
    of raw vectors."""
    return _raw(basis, torch.linalg.solve_triangular(factor.T, directions.contiguous(),
                                                     upper=True)).numpy().astype(np.float32)


def _project(vectors: np.ndarray, mean: np.ndarray, projection: np.ndarray,
             dtype: type) -> np.ndarray:
    out = torch.from_numpy(np.empty((len(vectors), projection.shape[1]), dtype=dtype))
    projection_t = torch.from_numpy(projection)
    offset = torch.from_numpy(mean) @ projection_t
    weight = projection_t.t().contiguous()
    for start in range(0, len(vectors), _BLOCK):
        rows = linear(_block(vectors, slice(start, start + _BLOCK)), weight) - offset
        out[start:start + _BLOCK] = torch.nn.functional.normalize(rows, dim=1)
    return out.numpy()
