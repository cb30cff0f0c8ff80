"""What ``clip``'s ``auto`` settings read from the corpus when a CCA is fitted on it: whether pairs
are ranked cross-fitted (``rank``), whether captions are discounted as conventions
(``conventions``) and how strongly the CCA is shrunk (``align_ridge``).

All three read one signal, the *convention share*: the share of pairs whose caption
:data:`CONVENTION_COUNT` or more pairs carry (a collection's label, a site's name, "Part of the
Flat Icon Collection"). Where it reaches :data:`CONVENTION_SHARE` the corpus is one of
conventions, like clip art, on which these settings were first measured: captions are discounted
(:mod:`ncclean.methods.conventions`), the CCA is shrunk by :data:`RIDGE`, and below
:data:`CROSS_FIT_WIDTHS` times the vectors' summed width in pairs each pair is ranked by fits
that did not see it. Elsewhere its captions name their pictures one by one: the fit is trusted,
ranked in sample at every size, and shrunk by the weaker :data:`WEAK_RIDGE` once it sees at
least :data:`WEAK_RIDGE_WIDTHS` times the width in *entries* (the fewer of its distinct captions
and distinct images: the samples its covariances are estimated from).

Why: a corpus of collection labels gives the CCA a few caption directions that many pairs carry;
a small in-sample fit learns its noisy pairs' labels as descriptions, and the stronger ridge
tempers what a few captions teach. Captions that name their pictures give the fit as many
directions as pairs, which a weaker ridge lets it use once they outnumber its dimensions, and
its in-sample fit ranks better than cross-fitted ones down to 1,000 pairs; the discount's
memorisation term then costs more than it finds. Chosen leave-one-corpus-out over clip art and
two icon corpora with their subsets (``benchmarks/results/rules.md``, one table per rule).
Injected noise cannot show what the discount is for (moved images do not make a convention
wrong); clip art's hand-labelled mismatches do (``benchmarks/results/natural-noise.md``).
"""

from __future__ import annotations

import numpy as np

CONVENTION_COUNT = 3
CONVENTION_SHARE = 0.05
CROSS_FIT_WIDTHS = 3
RIDGE = 100.0
WEAK_RIDGE = 30.0
WEAK_RIDGE_WIDTHS = 1


def convention_share(text_group: np.ndarray) -> float:
    """The share of pairs whose caption (``text_group``, ``(n,) int64``) at least
    :data:`CONVENTION_COUNT` pairs carry."""
    if len(text_group) == 0:
        return 0.0
    _, inverse, counts = np.unique(text_group, return_inverse=True, return_counts=True)
    return float((counts[inverse] >= CONVENTION_COUNT).mean())


def discounts(text_group: np.ndarray) -> bool:
    """``conventions=auto``: whether the captions (``(n,) int64`` groups) are discounted."""
    return convention_share(text_group) >= CONVENTION_SHARE


def cross_fits(text_group: np.ndarray, width: int) -> bool:
    """``rank=auto``: whether pairs of captions ``text_group`` (``(n,) int64``) are ranked by
    fits that did not see them, for vectors of summed ``width``."""
    return discounts(text_group) and len(text_group) < CROSS_FIT_WIDTHS * width


def entries(image_group: np.ndarray, text_group: np.ndarray) -> int:
    """The fewer of the distinct images and distinct captions among the pairs (``(n,) int64``
    groups each): the entries a CCA's covariances are estimated from."""
    return min(len(np.unique(image_group)), len(np.unique(text_group)))


def ridge(image_group: np.ndarray, text_group: np.ndarray, width: int) -> float:
    """``align_ridge=auto``: the CCA's ridge for pairs of images ``image_group`` and captions
    ``text_group`` (``(n,) int64`` each), vectors of summed ``width``."""
    if discounts(text_group) or entries(image_group, text_group) < WEAK_RIDGE_WIDTHS * width:
        return RIDGE
    return WEAK_RIDGE
