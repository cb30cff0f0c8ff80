"""What ``clip``'s ``auto`` settings read from the corpus when a CCA is fitted on it: whether pairs
are ranked cross-fitted (``rank``), whether captions are discounted (``conventions``), how
strongly the CCA is shrunk (``align_ridge``) and how many directions it keeps (``align_dims``).

Two signals decide them. The *convention share*: the share of pairs whose caption
:data:`CONVENTION_COUNT` or more pairs carry (a collection's label, a site's name, "Part of the
Flat Icon Collection"); a corpus where it reaches :data:`CONVENTION_SHARE` is one of
conventions, like clip art. And the fit's *entries*: the fewer of its distinct captions and
distinct images, the samples its covariances are estimated from, counted in widths (the
vectors' summed width).

- A corpus of conventions keeps clip art's settings: captions discounted
  (:mod:`ncclean.methods.conventions`), ridge :data:`RIDGE`, and below :data:`CROSS_FIT_WIDTHS`
  widths of pairs each pair ranked by fits that did not see it.
- Any other corpus with at least :data:`TRUSTED_FIT_WIDTHS` widths of entries is *trusted*:
  no discount, ranked in sample at every size, ridge :data:`TRUSTED_RIDGE` and :data:`DIMS`
  directions; :data:`WIDE_DIMS` directions from :data:`WIDE_DIMS_WIDTHS` widths, and ridge
  :data:`WIDE_RIDGE` from :data:`WIDE_RIDGE_WIDTHS`.
- Below that, its in-sample fit memorises: a pair's own memorisation is discounted, the ridge
  stays :data:`TRUSTED_RIDGE`; below :data:`SMALL_FIT_WIDTHS` widths of entries (any corpus),
  pairs are ranked cross-fitted, at ridge :data:`RIDGE`.
- Where pairs are ranked cross-fitted, or there are fewer than :data:`TRUSTED_FIT_WIDTHS` widths
  of entries, ``clip`` averages fits of four widths instead of keeping :data:`DIMS` directions
  (:mod:`ncclean.methods.clip_widths`).

Why: a corpus of collection labels gives the CCA a few caption directions that many pairs carry;
a small in-sample fit learns its noisy pairs' labels as descriptions, and the stronger ridge
tempers what a few captions teach. Captions that name their pictures one by one give the fit as
many directions as pairs: once they outnumber its dimensions a weaker ridge lets it use them
(with more, more directions and a weaker one still), and the discount's memorisation term costs
more than it finds; with fewer the memorisation is real, and with far fewer only fits that did
not see a pair can rank it. Chosen leave-one-corpus-out over clip art and two icon corpora with
their subsets (``benchmarks/results/rules.md``, one table per rule). Injected noise cannot show
what the discount is for on a corpus of conventions (moved images do not make a convention
wrong); clip art's hand-labelled mismatches do (``benchmarks/results/natural-noise.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONVENTION_COUNT = 3
CONVENTION_SHARE = 0.05
CROSS_FIT_WIDTHS = 3
TRUSTED_FIT_WIDTHS = 1
SMALL_FIT_WIDTHS = 0.25
WIDE_DIMS_WIDTHS = 2
WIDE_RIDGE_WIDTHS = 3
RIDGE = 100.0
TRUSTED_RIDGE = 30.0
WIDE_RIDGE = 10.0
DIMS = 128
WIDE_DIMS = 256


def convention_share(text_group: np.ndarray) -> float:
    """The share of pairs whose caption (``text_group``, ``(n,) int64``) at least
    :data:`CONVENTION_COUNT` pairs carry."""
    if len(text_group) == 0:
        return 0.0
    _, inverse, counts = np.unique(text_group, return_inverse=True, return_counts=True)
    return float((counts[inverse] >= CONVENTION_COUNT).mean())


def entries(image_group: np.ndarray, text_group: np.ndarray) -> int:
    """The fewer of the distinct images and distinct captions among the pairs (``(n,) int64``
    groups each)."""
    return min(len(np.unique(image_group)), len(np.unique(text_group)))


@dataclass(frozen=True)
class CorpusShape:
    """What the rules read from the pairs, read once per fit (:meth:`of`): the convention share,
    the entries, the pairs and the vectors' summed ``width``; each ``auto`` setting is a property
    of it."""

    convention_share: float
    entries: int
    pairs: int
    width: int

    @classmethod
    def of(cls, image_group: np.ndarray, text_group: np.ndarray, width: int) -> CorpusShape:
        """The shape of pairs of images ``image_group`` and captions ``text_group`` (``(n,)
        int64`` groups each), vectors of summed ``width``."""
        return cls(convention_share(text_group), entries(image_group, text_group),
                   len(text_group), width)

    @property
    def has_conventions(self) -> bool:
        return self.convention_share >= CONVENTION_SHARE

    def _entries_from(self, widths: float) -> bool:
        return self.entries >= widths * self.width

    @property
    def few_entries(self) -> bool:
        """Whether the entries are fewer than :data:`TRUSTED_FIT_WIDTHS` widths (a fit on them
        is never trusted, and ``clip`` averages its widths)."""
        return not self._entries_from(TRUSTED_FIT_WIDTHS)

    @property
    def trusted(self) -> bool:
        """Whether a fit on these pairs is trusted: no conventions, and at least
        :data:`TRUSTED_FIT_WIDTHS` widths of entries."""
        return not self.has_conventions and not self.few_entries

    @property
    def discounts(self) -> bool:
        """``conventions=auto``: whether captions (and a pair's own memorisation) are
        discounted."""
        return not self.trusted

    @property
    def ridge(self) -> float:
        """``align_ridge=auto``: the CCA's ridge."""
        if self.has_conventions or not self._entries_from(SMALL_FIT_WIDTHS):
            return RIDGE
        return WIDE_RIDGE if self._entries_from(WIDE_RIDGE_WIDTHS) else TRUSTED_RIDGE

    @property
    def dims(self) -> int:
        """``align_dims=auto``: the CCA's directions."""
        return WIDE_DIMS if self.trusted and self._entries_from(WIDE_DIMS_WIDTHS) else DIMS

    @property
    def cross_fits(self) -> bool:
        """``rank=auto``: whether pairs are ranked by fits that did not see them."""
        if not self._entries_from(SMALL_FIT_WIDTHS):
            return True
        return self.has_conventions and self.pairs < CROSS_FIT_WIDTHS * self.width


def ranks_cross_fitted(rank: str, shape: CorpusShape) -> bool:
    """Whether pairs are ranked by CCA fits that did not see them: ``clip``'s ``rank`` as
    given, ``auto`` as :attr:`CorpusShape.cross_fits` reads ``shape``."""
    return shape.cross_fits if rank == "auto" else rank == "cross-fitted"


def discounts(conventions: str, shape: CorpusShape, report: dict) -> bool:
    """Whether captions are discounted: ``clip``'s ``conventions`` as given (every setting but
    ``trust`` discounts), ``auto`` as :attr:`CorpusShape.discounts` reads ``shape``, its trust
    noted in ``report``."""
    if conventions != "auto":
        return conventions != "trust"
    if shape.discounts:
        return True
    report["conventions"] = {"trusted": "no conventions, enough distinct captions and images",
                             "convention_share": round(shape.convention_share, 4)}
    return False
