"""Nearest references by inner product: exact in blocks when small, an index when over budget.

The pseudo-caption stage compares every noisy pair's image with the clean donors' captions. Up
to the stages' search budget (:data:`ncclean.stages.SEARCH_BUDGET` query-reference products) it
does so exactly, by blocked matrix products; beyond it, it asks this module. (The specificity
stage keeps a seeded pool within the budget: its softmax needs the whole pool's mass, and an
index over 20,000 images estimating it cost 0.73x the exact search of the whole pool and more
than the exact search when applying a fit, ``benchmarks/results/ann-index.md``.)

With faiss installed (the ``index`` extra: ``pip install 'ncclean[index]'``) the donors go into
an inverted-file index (faiss's IVF-SQ8: k-means lists of 8-bit codes, a query scans the lists
nearest to it) that proposes each query's ``k`` best candidates; their inner products are then
computed exactly here, so a score never depends on the library's arithmetic. Without faiss the
stage searches a seeded sample of the donors, as before, and says so in the run's record. Why an
IVF index and not an HNSW graph (faiss's or usearch's), and its recall@1 against exact search on
100,000 donors: ``benchmarks/results/ann-index.md``.

The lists are built with one thread from faiss's fixed k-means seed, so the same references in
the same order give the same index and the same answers. A process builds an index once per
reference array (:func:`reference_index` keeps the last few), so a worker applying a fit to
shard after shard builds it once.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ncclean.stages import SEARCH_BUDGET, reference_cap

LISTS_PER_ROOT = 4  # k-means lists per square root of the references (faiss's nlist)
PROBES = 16  # lists a query scans (nprobe)
CANDIDATES = 16  # candidates a query takes from the index for its best reference
_BLOCK = 2048
_CACHE: OrderedDict[int, tuple[np.ndarray, ReferenceIndex]] = OrderedDict()
_CACHE_SIZE = 4
MISSING = "faiss is not installed (pip install 'ncclean[index]')"


def over_budget(n_queries: int, n_references: int) -> bool:
    """Whether comparing every query with every reference exceeds the search budget."""
    return n_queries * n_references > SEARCH_BUDGET


def index_available() -> bool:
    """Whether the index library (faiss) can be imported."""
    return _faiss() is not None


INDEX_GAIN = 5
"""How many times the budget's references the index searches: it answers in 14-20% of the exact
search's time (``benchmarks/results/ann-index.md``), so the stage costs about the budget either
way. Searching every donor cost a million-pair run twice the time and 0.8 GB more
(``benchmarks/results/speed.md``)."""


def reference_limit(n_queries: int) -> int:
    """How many references a stage keeps for ``n_queries`` queries (a seeded sample beyond):
    :func:`ncclean.stages.reference_cap`, :data:`INDEX_GAIN` times as many when the index can
    search them."""
    cap = reference_cap(n_queries)
    return cap * INDEX_GAIN if index_available() else cap


def index_note() -> dict:
    """What a stage's report says when it searched through the index."""
    return {"search": "index",
            "index": f"faiss IVF-SQ8, {LISTS_PER_ROOT} sqrt(n) lists, {PROBES} probed"}


def sample_note() -> dict:
    """What a stage's report says when, without faiss, it searched a sample of its
    references."""
    return {"search": "sample", "search_note": MISSING}


def _faiss():
    try:
        import faiss
    except ImportError:
        return None
    return faiss


class ReferenceIndex:
    """An inverted-file index over ``references`` (``(n, d) float32``, kept by reference, not
    copied): k-means lists of the references, of which a query scans the ``PROBES`` whose
    centroids are nearest, holding each reference as 8-bit codes (a quarter of its float32
    size); it proposes candidates, whose scores are recomputed exactly from ``references``."""

    def __init__(self, references: np.ndarray):
        faiss = _faiss()
        if faiss is None:
            raise ImportError(MISSING)
        self.references = np.ascontiguousarray(references, dtype=np.float32)
        n, dim = self.references.shape
        # 4 sqrt(n) lists, at least 39 references each (faiss's k-means warns below that)
        self.n_lists = max(1, min(int(LISTS_PER_ROOT * np.sqrt(n)), n // 39))
        self.lists = faiss.IndexIVFScalarQuantizer(
            faiss.IndexFlatIP(dim), dim, self.n_lists, faiss.ScalarQuantizer.QT_8bit,
            faiss.METRIC_INNER_PRODUCT)
        self.lists.nprobe = min(PROBES, self.n_lists)
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # one thread: the lists are a function of the references
        try:
            self.lists.train(self.references)
            self.lists.add(self.references)
        finally:
            faiss.omp_set_num_threads(threads)

    def candidates(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, scores)``, ``(len(queries), k)`` each: up to ``k`` references per query
        (``int64``, -1 where the lists scanned hold fewer) and their exact inner products
        (``float32``, -inf at -1), best first."""
        k = min(k, len(self.references))
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        _, found = self.lists.search(queries, k)
        found = found.astype(np.int64)
        scores = np.einsum("qd,qkd->qk", queries, self.references[np.maximum(found, 0)])
        scores[found < 0] = -np.inf
        order = np.argsort(-scores, axis=1, kind="stable")
        return np.take_along_axis(found, order, 1), np.take_along_axis(scores, order, 1)


def reference_index(references: np.ndarray, keep: bool = True) -> ReferenceIndex | None:
    """The index of ``references``, or ``None`` without faiss. With ``keep`` it is built once
    per array object in this process (a worker applying a fit to shard after shard builds it
    once); a one-pass stage, whose references are a temporary array, passes ``keep=False``."""
    if not index_available():
        return None
    if not keep:
        return ReferenceIndex(references)
    key = id(references)
    if key in _CACHE and _CACHE[key][0] is references:
        _CACHE.move_to_end(key)
        return _CACHE[key][1]
    index = ReferenceIndex(references)
    _CACHE[key] = (references, index)  # holding the array keeps its id from being reused
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return index


def best_reference(index: ReferenceIndex, queries: np.ndarray, query_label: np.ndarray,
                   reference_label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every query (``(nq, d) float32``), the reference maximising the inner product among
    those whose label differs from the query's (``query_label`` ``(nq,)``, ``reference_label``
    ``(n,)``, e.g. caption identities: a pair's own caption is no donor). Returns positions
    ``(nq,) int64`` and scores ``(nq,) float32`` (-inf where every reference is excluded). A
    query whose candidates are all excluded is searched exactly."""
    best = np.empty(len(queries), dtype=np.int64)
    score = np.empty(len(queries), dtype=np.float32)
    for start in range(0, len(queries), _BLOCK):
        block = slice(start, start + _BLOCK)
        found, scores = index.candidates(queries[block], CANDIDATES)
        excluded = (found < 0) | (reference_label[np.maximum(found, 0)]
                                  == query_label[block][:, None])
        scores[excluded] = -np.inf
        first = scores.argmax(1)
        rows = np.arange(len(found))
        best[block], score[block] = found[rows, first], scores[rows, first]
        redo = start + np.flatnonzero(~np.isfinite(score[block]))  # rare: search them exactly
        for at in range(0, len(redo), 256):
            rows = redo[at:at + 256]
            sims = queries[rows] @ index.references.T
            sims[query_label[rows][:, None] == reference_label[None, :]] = -np.inf
            best[rows] = sims.argmax(1)
            score[rows] = rescored(queries[rows], index.references[best[rows]], sims.max(1))
    return best, score


def rescored(queries: np.ndarray, chosen: np.ndarray, top: np.ndarray) -> np.ndarray:
    """The winners' scores ``top`` (``(nq,)``, -inf where none) again, as the inner product of
    each query with its chosen reference (``(nq, d)``), pair by pair: a matrix product's
    rounding depends on how many rows it has, and a pair must score the same bytes whatever
    shard or block it is searched in."""
    return np.where(np.isfinite(top), np.einsum("qd,qd->q", queries, chosen), top)


__all__ = ["CANDIDATES", "ReferenceIndex", "best_reference", "index_available",
           "index_note", "over_budget", "reference_index", "reference_limit", "rescored",
           "sample_note"]
