"""Pseudo-captions: for every noisy pair, a caption from the clean pool that fits its image.

After PC² (Sec. 3.3, Eq. 4): the donor of a noisy pair is the clean pair whose key is most
similar to the noisy pair's query. By default the space is the trained matcher's: the query is
the noisy pair's image embedding, the keys are the clean captions' embeddings, so the suggestion
is the clean caption the matcher scores highest for the image. A method may supply its own space
(PC² searches image class-probability vectors and borrows the caption of the closest clean
image).

Departures from PC², on purpose: the search covers the whole corpus's clean pool (blocked matrix
products, faiss when it is installed and the pool is large), not one mini-batch, so suggestions do
not depend on batch composition; a donor whose text equals the pair's own caption is skipped (it
is the caption being replaced); and a suggestion scoring below ``min_score`` is withheld (null)
rather than offered. By default ``min_score`` is the 5th percentile of the clean pairs' own
scores in the same space: a suggestion must fit the image at least as well as the
worst-fitting clean pairs fit theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ncclean.models.features import Features
from ncclean.train.scoring import Embeddings

_BLOCK = 2048
_FAISS_FROM = 200_000  # donors above which faiss is used when installed


@dataclass(frozen=True)
class DonorSpace:
    """Vectors per pair to search donors in: pair ``i``'s donor maximises
    ``query[i] . key[j]`` over clean pairs ``j`` (both ``(n_pairs, k)``, unit length for cosine).

    ``by_text``: keys depend only on the caption text, so one donor per distinct text suffices.
    ``min_score``: scores below it get no suggestion; ``None`` derives it from the clean pairs'
    own ``query . key`` (see the module docstring)."""

    query: np.ndarray
    key: np.ndarray
    name: str
    by_text: bool = False
    min_score: float | None = None


def matcher_space(embeddings: Embeddings, features: Features) -> DonorSpace:
    """The matcher's joint space: image embedding as query, caption embedding as key."""
    return DonorSpace(query=embeddings.images[features.image_group],
                      key=embeddings.texts[features.text_group], name="matcher", by_text=True)


def _best(queries: np.ndarray, keys: np.ndarray, query_text: np.ndarray,
          key_text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the best key for every query (skipping keys with the query's own text) and its
    score. Exact search by blocked products, or faiss's exact inner-product index."""
    if len(keys) >= _FAISS_FROM:
        try:
            import faiss
        except ImportError:
            faiss = None
        if faiss is not None:
            index = faiss.IndexFlatIP(keys.shape[1])
            index.add(np.ascontiguousarray(keys, dtype=np.float32))
            scores, found = index.search(np.ascontiguousarray(queries, dtype=np.float32), 2)
            own = key_text[found[:, 0]] == query_text
            pick = np.where(own, 1, 0)
            rows = np.arange(len(queries))
            return found[rows, pick], scores[rows, pick]
    key_tensor = torch.from_numpy(np.ascontiguousarray(keys, dtype=np.float32))
    key_text_tensor = torch.from_numpy(key_text)
    best = np.empty(len(queries), dtype=np.int64)
    score = np.empty(len(queries), dtype=np.float32)
    for start in range(0, len(queries), _BLOCK):
        block = torch.from_numpy(np.ascontiguousarray(queries[start:start + _BLOCK],
                                                      dtype=np.float32))
        sims = block @ key_tensor.T
        own = torch.from_numpy(query_text[start:start + _BLOCK])[:, None] == \
            key_text_tensor[None, :]
        top = sims.masked_fill(own, float("-inf")).max(dim=1)
        best[start:start + len(block)] = top.indices.numpy()
        score[start:start + len(block)] = top.values.numpy()
    return best, score


def pseudo_captions(space: DonorSpace, features: Features, noisy: np.ndarray,
                    donors: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """Donor pair and score for every ``noisy`` pair, searched among ``donors``.

    ``noisy``, ``donors``: ``(n_pairs,) bool``. Returns ``donor`` ``(n_pairs,) int64`` (pair
    index, -1 for no suggestion), ``score`` ``(n_pairs,) float32`` (NaN without suggestion) and
    a report (threshold, coverage).
    """
    n = features.n_pairs
    donor = np.full(n, -1, dtype=np.int64)
    score = np.full(n, np.nan, dtype=np.float32)
    donor_rows = np.flatnonzero(donors)
    query_rows = np.flatnonzero(noisy)
    report = {"space": space.name, "n_noisy": int(len(query_rows)),
              "n_donors": int(len(donor_rows))}
    if len(donor_rows) == 0 or len(query_rows) == 0:
        return donor, score, report | {"min_score": None, "suggested": 0}
    min_score = space.min_score
    if min_score is None:
        own = np.einsum("nd,nd->n", space.query[donor_rows], space.key[donor_rows])
        min_score = float(np.percentile(own, 5))
    if space.by_text:  # one donor per distinct caption: the first clean pair with that text
        _, first = np.unique(features.text_group[donor_rows], return_index=True)
        donor_rows = donor_rows[np.sort(first)]
    best, best_score = _best(space.query[query_rows], space.key[donor_rows],
                             features.text_group[query_rows], features.text_group[donor_rows])
    keep = np.isfinite(best_score) & (best_score >= min_score)
    donor[query_rows[keep]] = donor_rows[best[keep]]
    score[query_rows[keep]] = best_score[keep]
    return donor, score, report | {"min_score": min_score, "suggested": int(keep.sum())}
