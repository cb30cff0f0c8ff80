"""Recall@K and rSum for image-text retrieval, the metrics of every paper in the reference set.

``image_to_text``: for each image, the rank of its best-ranked relevant caption; ``text_to_image``:
for each caption, the rank of its image (NCR's ``i2t`` / ``t2i``). A hit at K means that rank is
below K. Ties count against the query: an irrelevant item scoring exactly as high as the best
relevant one ranks before it, so a matcher that scores everything alike gets no credit.

Two notions of relevance: *strict* (the caption's own image) and *by text identity* (any caption
whose text equals one of the image's captions counts): corpora repeat captions ("gramastar"), and a
retrieved duplicate is not a mistake.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

KS: tuple[int, ...] = (1, 5, 10)
_BLOCK = 1024


def recall_at_k(sims: np.ndarray, relevant: np.ndarray, ks: Sequence[int] = KS) -> dict[int, float]:
    """Recall@K in percent for each K.

    ``sims``: ``(n_queries, n_items)`` float scores; ``relevant``: the same shape, bool, with at
    least one relevant item per query. Rows are processed in blocks, so memory stays at a few
    blocks of the matrix.
    """
    sims = np.asarray(sims)
    relevant = np.asarray(relevant, dtype=bool)
    if sims.shape != relevant.shape:
        raise ValueError(f"sims {sims.shape} and relevant {relevant.shape} differ in shape")
    lacking = np.flatnonzero(~relevant.any(axis=1))
    if len(lacking):  # it would count as a miss, or a hit at any K past the item count
        raise ValueError(f"{len(lacking)} of {len(relevant)} queries have no relevant item "
                         f"(first: row {lacking[0]}); recall averages over real queries only")
    ranks = np.empty(sims.shape[0], dtype=np.int64)
    for start in range(0, sims.shape[0], _BLOCK):
        block = sims[start:start + _BLOCK]
        rel = relevant[start:start + _BLOCK]
        best = np.where(rel, block, -np.inf).max(axis=1, initial=-np.inf)
        ranks[start:start + _BLOCK] = ((block >= best[:, None]) & ~rel).sum(axis=1)
    return {k: 100.0 * float(np.mean(ranks < k)) for k in ks}


@dataclass(frozen=True)
class RetrievalMetrics:
    """Recall@K in percent, image-to-text and text-to-image, and their sum (rSum)."""

    i2t: dict[int, float]
    t2i: dict[int, float]

    @property
    def rsum(self) -> float:
        return sum(self.i2t.values()) + sum(self.t2i.values())

    def as_dict(self) -> dict[str, float]:
        out = {f"i2t_r{k}": v for k, v in self.i2t.items()}
        out |= {f"t2i_r{k}": v for k, v in self.t2i.items()}
        out["rsum"] = self.rsum
        return out


def relevance(text_image: np.ndarray, n_images: int,
              text_group: np.ndarray | None = None) -> np.ndarray:
    """``(n_images, n_texts) bool``: caption ``j`` is relevant to image ``i``.

    Strict when ``text_group`` is ``None`` (``text_image[j] == i``); otherwise by text identity:
    the text of ``j`` equals the text of some caption of ``i``.
    """
    text_image = np.asarray(text_image, dtype=np.int64)
    if text_group is None:
        return text_image[None, :] == np.arange(n_images)[:, None]
    text_group = np.asarray(text_group, dtype=np.int64)
    has_text = np.zeros((n_images, int(text_group.max()) + 1), dtype=bool)
    has_text[text_image, text_group] = True
    return has_text[:, text_group]


def retrieval_metrics(sims: np.ndarray, text_image: np.ndarray,
                      text_group: np.ndarray | None = None,
                      ks: Sequence[int] = KS) -> RetrievalMetrics:
    """Recall@K both ways for a test set.

    ``sims``: ``(n_images, n_texts)`` similarity of every test image to every test caption;
    ``text_image``: ``(n_texts,) int`` the image of each caption (every image has at least one);
    ``text_group``: ``(n_texts,) int`` equal for equal caption text, to score by text identity.
    """
    sims = np.asarray(sims)
    relevant = relevance(text_image, sims.shape[0], text_group)
    return RetrievalMetrics(i2t=recall_at_k(sims, relevant, ks),
                            t2i=recall_at_k(sims.T, relevant.T, ks))
