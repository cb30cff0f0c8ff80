"""Pseudo-captions: for every noisy pair, a caption from the clean pool that fits its image.

After PC² (Sec. 3.3, Eq. 4): the donor of a noisy pair is the clean pair whose key is most
similar to the noisy pair's query. By default the space is the trained matcher's: the query is
the noisy pair's image embedding, the keys are the clean captions' embeddings, so the suggestion
is the clean caption the matcher scores highest for the image. A method may supply its own space
(PC² searches image class-probability vectors and borrows the caption of the closest clean
image).

Departures from PC², on purpose: the search covers the whole corpus's clean pool (blocked matrix
products), not one mini-batch, so suggestions do not depend on batch composition (for corpora
so large that this would exceed the stages' search budget, :data:`ncclean.stages.SEARCH_BUDGET`,
a nearest-neighbour index of the clean pool, :mod:`ncclean.stages.index`, or a seeded sample of
it without the index library); a donor whose text equals the pair's own caption is
skipped (it is the caption being replaced); and a suggestion scoring below ``min_score`` is
withheld (null) rather than offered. By default ``min_score`` is the lower of two floors in the
same space: the 5th percentile of the clean pairs' own scores (a suggestion fits the image as
well as the worst-fitting clean pairs fit theirs) and the 95th percentile of random clean
captions scored against noisy images (it fits better than 19 random captions in 20). The second
floor was added because the first withheld suggestions from 28% of the noisy pairs at 50% noise
(benchmarks/results/default-pipeline.md). Its random captions are drawn from what the search
offers: distinct captions when it searches by text, so a caption repeated across a collection
counts once, as it does in the search (drawn per pair, repeated captions put DisNCL's random
floor above its clean floor, and 31% of its noisy pairs got no suggestion).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ncclean.data.results import CLEAN, CLEAN_INSIGNIFICANT, INVALID
from ncclean.models.features import Features
from ncclean.options import DONORS
from ncclean.seeds import derive_rng
from ncclean.stages import corpus_queries
from ncclean.stages.index import (
    best_reference,
    index_available,
    index_note,
    over_budget,
    reference_index,
    reference_limit,
    rescored,
    sample_note,
)
from ncclean.train.scoring import Embeddings

_BLOCK = 2048


@dataclass(frozen=True)
class DonorSpace:
    """Vectors per pair to search donors in: pair ``i``'s donor maximises
    ``query(i) . key(j)`` over clean pairs ``j`` (unit length for cosine).

    ``query`` and ``key`` hold one row per pair, or, with ``query_index`` / ``key_index``
    (``(n_pairs,)``), one row per table entry that the index maps pairs to (the matcher's image
    and caption tables: nothing is copied per pair). ``by_text``: keys depend only on the caption
    text, so one donor per distinct text suffices. ``min_score``: scores below it get no
    suggestion; ``None`` derives it from the clean pairs' own ``query . key`` (see the module
    docstring)."""

    query: np.ndarray
    key: np.ndarray
    name: str
    by_text: bool = False
    min_score: float | None = None
    query_index: np.ndarray | None = None
    key_index: np.ndarray | None = None

    def queries(self, pairs: np.ndarray) -> np.ndarray:
        """``(len(pairs), k) float32`` query vectors of ``pairs``."""
        rows = pairs if self.query_index is None else self.query_index[pairs]
        return self.query[rows].astype(np.float32, copy=False)

    def keys(self, pairs: np.ndarray) -> np.ndarray:
        """``(len(pairs), k) float32`` key vectors of ``pairs``."""
        rows = pairs if self.key_index is None else self.key_index[pairs]
        return self.key[rows].astype(np.float32, copy=False)


def matcher_space(embeddings: Embeddings, features: Features) -> DonorSpace:
    """The matcher's joint space: image embedding as query, caption embedding as key."""
    return DonorSpace(query=embeddings.images, key=embeddings.texts, name="matcher",
                      by_text=True, query_index=features.image_group,
                      key_index=features.text_group)


def _best(space: DonorSpace, query_rows: np.ndarray, donor_rows: np.ndarray,
          text_group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index into ``donor_rows`` of the best donor for every query pair (skipping donors with
    the query's own text) and its score, by blocked matrix products. When donors have distinct
    texts (``by_text``), a query's own text is at most one donor, excluded by position;
    otherwise by a mask."""
    keys = torch.from_numpy(space.keys(donor_rows))
    donor_text = text_group[donor_rows]
    order = np.argsort(donor_text, kind="stable")
    sorted_text = donor_text[order]
    distinct = space.by_text or len(np.unique(donor_text)) == len(donor_text)
    donor_text_tensor = torch.from_numpy(donor_text)
    best = np.empty(len(query_rows), dtype=np.int64)
    score = np.empty(len(query_rows), dtype=np.float32)
    for start in range(0, len(query_rows), _BLOCK):
        rows = query_rows[start:start + _BLOCK]
        queries = space.queries(rows)
        sims = torch.from_numpy(queries) @ keys.T
        texts = text_group[rows]
        if distinct:
            position = np.minimum(np.searchsorted(sorted_text, texts), len(sorted_text) - 1)
            inside = np.flatnonzero(sorted_text[position] == texts)
            sims[torch.from_numpy(inside), torch.from_numpy(order[position[inside]])] = \
                float("-inf")
        else:
            own = torch.from_numpy(texts)[:, None] == donor_text_tensor[None, :]
            sims.masked_fill_(own, float("-inf"))
        top = sims.max(dim=1)
        chosen = top.indices.numpy()
        best[start:start + len(rows)] = chosen
        score[start:start + len(rows)] = rescored(queries, keys.numpy()[chosen],
                                                  top.values.numpy())
    return best, score


def _indexed(space: DonorSpace, query_rows: np.ndarray, donor_rows: np.ndarray,
             text_group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_best` beyond the search budget: the donors' nearest-neighbour index proposes,
    exact inner products choose (:mod:`ncclean.stages.index`)."""
    index = reference_index(space.keys(donor_rows), keep=False)
    return best_reference(index, space.queries(query_rows), text_group[query_rows],
                          text_group[donor_rows])


def _random_caption_floor(space: DonorSpace, query_rows: np.ndarray, donor_rows: np.ndarray,
                          seed: int, n: int = 20_000, quantile: float = 95.0) -> float:
    """The score a random clean caption reaches with a noisy image only one time in twenty:
    the ``quantile`` of ``query . key`` over ``n`` seeded random (noisy, donor) pairs."""
    rng = derive_rng(seed, "donor-null")
    queries = space.queries(np.sort(rng.choice(query_rows, n)))
    keys = space.keys(rng.choice(donor_rows, n))
    return float(np.percentile(np.einsum("nd,nd->n", queries, keys), quantile))


def donor_pool(pool: str, parts: np.ndarray, text_group: np.ndarray) -> np.ndarray:
    """``(n,) bool``: the pairs (partitions ``parts``, captions ``text_group``) whose captions may
    be suggested, by ``pool`` (:data:`ncclean.options.DONORS`). ``clean``: the clean partitions'
    captions. ``corpus``: every valid pair's caption except the generic ones, a caption being
    generic when one of its pairs was judged clean but insignificant, or when it is repeated and
    none of its pairs is clean (a label no image was found to fit). With noise injected by
    moving captions, an image's own caption now sits on another, noisy row: only this pool
    holds it. On clip art at 50% it cut collection labels among the suggestions from 12% to 3%
    but right ones from 17% to 13.5%, judged by eye (``benchmarks/results/stages.md``), so
    ``clean`` is the default."""
    is_clean = np.isin(parts, list(CLEAN))
    if pool == "clean":
        return is_clean
    if pool not in DONORS:
        raise ValueError(f"donor pool must be one of {DONORS}, got {pool!r}")
    valid = parts != INVALID
    n_groups = int(text_group.max(initial=-1)) + 1
    uses = np.bincount(text_group[valid], minlength=n_groups)
    has_clean = np.bincount(text_group[is_clean], minlength=n_groups) > 0
    dull = np.bincount(text_group[parts == CLEAN_INSIGNIFICANT], minlength=n_groups) > 0
    generic = dull | ((uses > 1) & ~has_clean)
    return valid & ~generic[text_group]


def donor_cap(n_suggestions: int) -> int:
    """The most pairs one caption is suggested for: 1% of the suggestions, at least 2. A caption
    close to every image (a hub of the space) would otherwise be offered for hundreds."""
    return max(2, n_suggestions // 100)


def pseudo_captions(space: DonorSpace, features: Features, noisy: np.ndarray,
                    donors: np.ndarray, seed: int = 0, cap: bool = True,
                    corpus_pairs: int | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """Donor pair and score for every ``noisy`` pair, searched among ``donors``, each donor
    suggested for at most :func:`donor_cap` pairs (``cap``): a pair whose best donor is full
    (taken by pairs it fits better) gets its best donor among the others. On clip art at 50%
    the cap took the most repeated suggestion from 13.5% of them to 1%
    (``benchmarks/results/stages.md``).

    ``noisy``, ``donors``: ``(n_pairs,) bool``. Returns ``donor`` ``(n_pairs,)
    int64`` (pair index, -1 for no suggestion), ``score`` ``(n_pairs,) float32`` (NaN without
    suggestion) and a report (threshold, coverage, how many donors were searched, the most
    pairs one donor got, and beyond the stages' search budget,
    :data:`ncclean.stages.SEARCH_BUDGET`, how: ``search`` is ``index`` or, without the index
    library, ``sample``, a seeded sample of the donors). ``corpus_pairs``: the corpus the
    pairs are a fit sample of, whose noisy pairs share that budget
    (:func:`ncclean.stages.corpus_queries`).
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
    searched = donor_rows
    if space.by_text:  # one donor per distinct caption: the first clean pair with that text
        _, first = np.unique(features.text_group[donor_rows], return_index=True)
        searched = donor_rows[np.sort(first)]
    min_score = space.min_score
    if min_score is None:
        own = np.concatenate([
            np.einsum("nd,nd->n", space.queries(block), space.keys(block))
            for block in np.array_split(donor_rows, max(1, len(donor_rows) // 65536))])
        min_score = min(float(np.percentile(own, 5)),
                        _random_caption_floor(space, query_rows, searched, seed))
    donor_rows = searched
    queries = corpus_queries(len(query_rows), n, corpus_pairs)
    limit = reference_limit(queries)
    if len(donor_rows) > limit:
        if not index_available():
            report |= sample_note()
        donor_rows = np.sort(derive_rng(seed, "donor-sample").choice(donor_rows, limit,
                                                                     replace=False))
    report["searched_donors"] = int(len(donor_rows))
    indexed = over_budget(queries, len(donor_rows)) and index_available()
    if indexed:
        report |= index_note()
    best, best_score = _capped(space, query_rows, donor_rows, features.text_group, min_score,
                               indexed, rounds=8 if cap else 0)
    keep = best >= 0
    donor[query_rows[keep]] = donor_rows[best[keep]]
    score[query_rows[keep]] = best_score[keep]
    uses = np.bincount(best[keep], minlength=len(donor_rows))
    return donor, score, report | {"min_score": min_score, "suggested": int(keep.sum()),
                                   "most_uses_of_one_donor": int(uses.max(initial=0))}


def _capped(space: DonorSpace, query_rows: np.ndarray, donor_rows: np.ndarray,
            text_group: np.ndarray, min_score: float, indexed: bool,
            rounds: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Index into ``donor_rows`` of each query's donor (``-1``: none at or above
    ``min_score``) and its score, no donor taken by more than :func:`donor_cap` of the
    suggestions: the queries a full donor fits best keep it, the others search again among the
    donors not yet full, for up to ``rounds`` rounds; what is still over the cap then gets no
    suggestion."""
    search = _indexed if indexed else _best
    best, best_score = search(space, query_rows, donor_rows, text_group)
    best = np.where(np.isfinite(best_score) & (best_score >= min_score), best, -1)
    open_donors = np.ones(len(donor_rows), dtype=bool)
    for _ in range(rounds):
        released, full = _over_cap(best, best_score, len(donor_rows))
        if not len(released):
            break
        open_donors &= ~full  # full donors take no more pairs
        best[released] = -1
        if not open_donors.any():
            break
        remaining = np.flatnonzero(open_donors)
        again, again_score = search(space, query_rows[released], donor_rows[remaining],
                                    text_group)
        fits = np.isfinite(again_score) & (again_score >= min_score)
        best[released[fits]] = remaining[again[fits]]
        best_score[released] = np.where(fits, again_score, np.nan)
    if rounds:
        best = within_cap(best, best_score, len(donor_rows))
    return best, np.where(best >= 0, best_score, np.nan).astype(np.float32)


def within_cap(best: np.ndarray, score: np.ndarray, n_donors: int) -> np.ndarray:
    """``best`` (each query's donor index, ``-1`` for none) with the worst fitting queries of
    every donor beyond :func:`donor_cap` set to ``-1``; the cap falls with the suggestions it
    removes, so this repeats until no donor is over it."""
    best = best.copy()
    while len(released := _over_cap(best, score, n_donors)[0]):
        best[released] = -1
    return best


def _over_cap(best: np.ndarray, score: np.ndarray, n_donors: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """The queries beyond :func:`donor_cap` of their donor (the worst fitting of its queries)
    and which donors are full, ``(n_donors,) bool``."""
    taken = best >= 0
    cap = donor_cap(int(taken.sum()))
    uses = np.bincount(best[taken], minlength=n_donors)
    if uses.max(initial=0) <= cap:
        return np.zeros(0, dtype=np.int64), uses >= cap
    order = np.lexsort((-score, best))  # by donor, best fitting first
    order = order[taken[order]]
    rank = np.arange(len(order)) - np.searchsorted(best[order], best[order])
    return order[rank >= cap], uses >= cap
