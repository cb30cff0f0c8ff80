"""The neighbours' agreement: does a pair's image look like the images of captions like its
caption, and its caption like the captions of images like its image?

A CCA scores a pair by one linear map fitted on the whole corpus. The corpus around a pair says
more: a caption moved onto the wrong image lands among captions whose images look nothing like
it. For a pair of image ``i`` and caption ``j``, with each side's vectors centred on the fitted
pairs and unit length:

- ``a``: the cosine of image ``i`` with the mean image of the ``k`` fitted captions nearest
  caption ``j`` (each caption's images averaged first);
- ``b``: the cosine of caption ``j`` with the mean caption of the ``k`` fitted images
  nearest image ``i`` (each image's captions averaged first);

where caption ``j`` (image ``i``) itself, or one at cosine :data:`SAME` or more, is never its
own neighbour: the pair being judged teaches nothing about itself, so its score is out of sample
as a cross-fitted cosine is, and shuffled pairs are a null for it too. Each is one product with
a vector per caption or image, so any pairing of images and captions, shuffled ones included,
costs what a cosine costs.

With a prior space (:mod:`ncclean.methods.prior`), ``p`` is one more side: the pair's cosine in
the prior.

``clip`` adds ``w_a * a + w_b * b + w_p * p`` to each pair's cosine, the weights read from the
corpus (:func:`read_weights`): those of the linear discriminant that best parts its pairs from
shuffled ones, which are all mismatched, so a corpus whose CCA is weak leans on its neighbours
(and its prior) more. Where the corpus has no null or its cosine does not part real pairs from
shuffled ones, or with ``clip``'s ``neighbour_weight`` set, ``a`` and ``b`` each get ``weight *
sd(cosine) / (2 * sd(side))`` instead, and ``p`` none. In a corpus of conventions only ``a``
(and ``p``) counts: there the images like a pair's image carry its own caption, a collection's
label put on a batch, so ``b`` vouches for a label that is wrong for the whole batch as much as
for one that is right, and it ranked clip art's hand-labelled mismatches worse; there ``k`` is
:data:`K_CONVENTIONS`, elsewhere :data:`K` (``benchmarks/results/neighbours.md``, which
measures the term on every corpus). The search is exact, so it is done only for fits of at most
:data:`MAX_PAIRS` pairs; a corpus applied shard by shard finds each new pair's neighbours among
the fitted pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ncclean.methods.align import Alignment
from ncclean.methods.null_rate import Cosine, NullEstimate, Space
from ncclean.methods.prior import in_prior, prior_arrays, prior_from_arrays

K = 7
#: Fewer in a corpus of conventions, where more of a caption's nearest captions are its batch's.
K_CONVENTIONS = 5
WEIGHT = 0.5
#: The cosine's least weight, as a share of the largest side's: it binds where the prior parts a
#: corpus's pairs better than its own cosine.
COSINE_FLOOR = 0.1
MAX_PAIRS = 20_000
#: Two vectors at this cosine or more are one caption (image): never each other's neighbours.
SAME = 0.9999
_BLOCK = 1024


@dataclass(frozen=True)
class Neighbourhood:
    """The fitted pairs as neighbours: each side's ``mean``; the distinct ``images`` and
    ``texts`` (centred, unit length), each with the mean of its pairs' other side
    (``image_texts``, ``text_images``); ``k``; the weights of ``a``, ``b`` and ``p``; the
    ``prior`` space whose cosine ``p`` is, if any."""

    image_mean: np.ndarray
    text_mean: np.ndarray
    images: np.ndarray
    texts: np.ndarray
    image_texts: np.ndarray
    text_images: np.ndarray
    k: int
    weights: tuple[float, float, float] = (0.0, 0.0, 0.0)
    prior: Alignment | None = None

    def targets(self, images: np.ndarray, texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For unit ``texts`` ``(m, d_text)``: the mean image of each one's nearest fitted
        captions, ``(m, d_image)``; for unit ``images``: the mean caption of each one's nearest
        fitted images, ``(m', d_text)``."""
        return (_mean_neighbours(texts, self.texts, self.text_images, self.k),
                _mean_neighbours(images, self.images, self.image_texts, self.k))

    @staticmethod
    def agreement(images: np.ndarray, texts: np.ndarray, by_caption: np.ndarray,
                  by_image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``a`` and ``b`` (``(n,)`` each) of the pairs of unit ``images[k]`` and ``texts[k]``,
        given each one's target (:meth:`targets`)."""
        return (np.einsum("nd,nd->n", images, by_caption),
                np.einsum("nd,nd->n", texts, by_image))

    def term(self, a: np.ndarray, b: np.ndarray, p: np.ndarray | float = 0.0) -> np.ndarray:
        """What ``clip`` adds to the cosine of pairs with agreements ``a`` and ``b`` and prior
        cosine ``p``."""
        return self.weights[0] * a + self.weights[1] * b + self.weights[2] * p

    def score_new(self, images: np.ndarray, texts: np.ndarray, image_group: np.ndarray,
                  text_group: np.ndarray) -> np.ndarray:
        """The term of new pairs ``(image_group[p], text_group[p])`` of the raw entry tables
        ``images`` and ``texts``, each entry's neighbours found among the fitted ones."""
        images, texts = np.asarray(images, np.float32), np.asarray(texts, np.float32)
        unit_images, unit_texts = _unit(images, self.image_mean), _unit(texts, self.text_mean)
        by_caption, by_image = self.targets(unit_images, unit_texts)
        p = 0.0
        if self.prior is not None and self.weights[2] > 0:
            prior_images, prior_texts = in_prior(self.prior, images, texts)
            p = np.einsum("nd,nd->n", prior_images[image_group], prior_texts[text_group])
        return self.term(*self.agreement(unit_images[image_group], unit_texts[text_group],
                                         by_caption[text_group], by_image[image_group]), p)

    def arrays(self) -> dict[str, np.ndarray]:
        """What a saved fit keeps to score new pairs (:meth:`from_arrays`)."""
        return {"neighbours.image_mean": self.image_mean, "neighbours.text_mean": self.text_mean,
                **{f"neighbours.{name}": getattr(self, name).astype(np.float16) for name in
                   ("images", "texts", "image_texts", "text_images")},
                "neighbours.shape": np.array([self.k, *self.weights], dtype=np.float64),
                **({} if self.prior is None or self.weights[2] == 0 else
                   prior_arrays(self.prior, "neighbours.prior."))}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Neighbourhood | None:
        if "neighbours.shape" not in arrays:
            return None
        k, *weights = arrays["neighbours.shape"]  # a fit saved before the prior has two
        tables = [np.asarray(arrays[f"neighbours.{name}"], np.float32) for name in (
            "image_mean", "text_mean", "images", "texts", "image_texts", "text_images")]
        # unit length again after float16: else an entry's cosine with itself strays about
        # 1e-4 from 1, across SAME, and a fitted entry applied again counts itself
        for side in (2, 3):
            tables[side] = tables[side] / np.maximum(
                np.linalg.norm(tables[side], axis=1, keepdims=True), 1e-12)
        return cls(*tables, int(k), tuple(float(w) for w in (*weights, 0.0)[:3]),
                   prior_from_arrays(arrays, "neighbours.prior."))


@dataclass(frozen=True)
class FittedNeighbours:
    """A :class:`Neighbourhood` fitted on pairs of image and caption entries, with every entry
    (``images``, ``texts``: unit length, those in no pair too) and its target, and each entry in
    the prior space if there is one (``prior_images``, ``prior_texts``):
    ``score(image_entries, text_entries)`` is the term of any pairing of them; ``pairs`` holds
    ``a``, ``b`` and ``p`` of the fitted pairs themselves, in their order, and ``pair_term()``
    their term; ``sides`` says which of ``a``, ``b`` and ``p`` may carry a weight."""

    hood: Neighbourhood
    images: np.ndarray
    texts: np.ndarray
    by_caption: np.ndarray
    by_image: np.ndarray
    pairs: tuple[np.ndarray, ...] = (np.zeros(0), np.zeros(0), np.zeros(0))
    sides: tuple[bool, bool, bool] = (True, True, False)
    prior_images: np.ndarray | None = None
    prior_texts: np.ndarray | None = None

    def agreement(self, image_entries: np.ndarray, text_entries: np.ndarray) \
            -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b = self.hood.agreement(self.images[image_entries], self.texts[text_entries],
                                   self.by_caption[text_entries], self.by_image[image_entries])
        p = np.zeros(len(a), np.float32) if self.prior_images is None else np.einsum(
            "nd,nd->n", self.prior_images[image_entries], self.prior_texts[text_entries])
        return a, b, p

    def score(self, image_entries: np.ndarray, text_entries: np.ndarray) -> np.ndarray:
        return self.hood.term(*self.agreement(image_entries, text_entries))

    def pair_term(self) -> np.ndarray:
        return self.hood.term(*self.pairs)

    def describe(self, read: bool) -> dict:
        """The run record's account: the count, the weights of ``a`` and ``b``, the sides
        weighed, whether the weights were ``read`` against shuffled pairs or follow the
        cosines' spread, and the prior's weight where there is a prior."""
        weights = self.hood.weights
        account = {"k": self.hood.k, "weights": [round(w, 4) for w in weights[:2]],
                   "sides": " and ".join(side for side, w in zip("abp", weights) if w > 0)
                   or "none",
                   "weighed": "against shuffled pairs" if read else "by the cosines' spread"}
        if self.sides[2]:
            account["prior"] = round(weights[2], 4)
        return account


def fit_neighbours(images: np.ndarray, texts: np.ndarray, image_group: np.ndarray,
                   text_group: np.ndarray, cosine: np.ndarray, *, k: int = K,
                   weight: float = WEIGHT, sides: tuple[bool, bool] = (True, True),
                   prior: Alignment | None = None) -> FittedNeighbours:
    """The neighbourhood of the pairs ``(image_group[p], text_group[p])`` of the raw entry
    tables ``images`` and ``texts`` (entries in no pair are no one's neighbours), weighted so
    that each of its ``sides`` (``a``, ``b``) has ``weight / 2`` times the spread of the pairs'
    ``cosine`` (``(n_pairs,)``, the CCA's); a side left out or that does not vary gets none.
    With a ``prior`` space, ``p`` is a third side, weighed only when the weights are read
    (:func:`read_weights`)."""
    images, texts = np.asarray(images, np.float32), np.asarray(texts, np.float32)
    image_mean, text_mean = images[image_group].mean(0), texts[text_group].mean(0)
    unit_images, unit_texts = _unit(images, image_mean), _unit(texts, text_mean)
    paired_images, image_at = np.unique(image_group, return_inverse=True)
    paired_texts, text_at = np.unique(text_group, return_inverse=True)
    tables = (image_mean, text_mean, unit_images[paired_images], unit_texts[paired_texts],
              _group_means(unit_texts[text_group], image_at, len(paired_images)),
              _group_means(unit_images[image_group], text_at, len(paired_texts)))
    hood = Neighbourhood(*tables, k)
    in_space = (None, None) if prior is None else in_prior(prior, images, texts)
    fitted = FittedNeighbours(hood, unit_images, unit_texts,
                              *hood.targets(unit_images, unit_texts),
                              prior_images=in_space[0], prior_texts=in_space[1])
    pairs = fitted.agreement(image_group, text_group)
    spread = float(np.std(cosine))
    weights = tuple(0.0 if not used or (sd := float(np.std(side))) < 1e-6
                    else weight * spread / (2 * sd) for side, used in zip(pairs, sides))
    return replace(fitted, hood=replace(hood, weights=(*weights, 0.0), prior=prior),
                   pairs=pairs, sides=(*sides, prior is not None))


def read_weights(fitted: FittedNeighbours, null: NullEstimate | None) -> FittedNeighbours | None:
    """``fitted`` weighted as the corpus says: the linear discriminant of the cosine, ``a``,
    ``b`` and, where there is a prior, ``p`` between the null's real pairs (``null.rows`` of the
    fitted pairs, whose sides are ``fitted.pairs``; their cosines as the null scored them, out
    of the fit where the corpus is cross-fitted) and its shuffled pairs (``null.null_images``,
    ``null.null_texts``), the within-class spread taken as the two samples' covariances summed,
    scaled so that the cosine's weight is one. A side not in ``fitted.sides``, one that does not
    vary, or one that the discriminant weighs below zero, is left out and the others solved
    again; ``p`` too where it and the cosine are both weighed at zero or below. The cosine keeps
    at least :data:`COSINE_FLOOR` of the largest side's weight, so no side weighs more than
    ``1 / COSINE_FLOOR``: that binds where with ``p`` the discriminant weighs the cosine at zero
    or below, the prior parting the corpus's pairs better than its own space (a corpus of the
    prior's own pictures). The weights are read against the null's cosine; a corpus ranked in
    sample adds them to its in-sample one.
    ``None`` where the null is missing or not finite, or its cosine does not part the two."""
    if null is None or len(null.null_images) == 0:
        return None
    real = np.column_stack([null.scores, *(side[null.rows] for side in fitted.pairs)])
    shuffled = np.column_stack([null.null, *fitted.agreement(null.null_images,
                                                             null.null_texts)])
    if not (np.isfinite(real).all() and np.isfinite(shuffled).all()):
        return None
    gap = real.mean(0) - shuffled.mean(0)
    spread = np.cov(real, rowvar=False) + np.cov(shuffled, rowvar=False)
    kept = [0] + [side for side in (1, 2, 3) if fitted.sides[side - 1] and np.std(
        np.r_[real[:, side], shuffled[:, side]]) >= 1e-6]
    while True:
        direction = np.linalg.lstsq(spread[np.ix_(kept, kept)], gap[kept], rcond=None)[0]
        if not np.isfinite(direction).all():
            return None
        prior = kept[-1] == 3
        if direction[0] <= 0 and prior and direction[-1] <= 0:
            kept.pop()  # the prior parts nothing the cosine does not: the corpus alone
            continue
        if direction[0] <= 0 and not prior:
            return None
        if direction[1:].min(initial=0.0) >= 0:
            break
        kept.pop(1 + int(np.argmin(direction[1:])))
    # a prior that parts the pairs better than the corpus's own cosine: the cosine keeps a share
    direction[0] = max(direction[0], COSINE_FLOOR * direction[1:].max(initial=0.0))
    weights = [0.0, 0.0, 0.0]
    for side, weight in zip(kept[1:], direction[1:]):
        weights[side - 1] = float(weight / direction[0])
    return replace(fitted, hood=replace(fitted.hood, weights=tuple(weights)))


def neighbour_count(neighbours: int | None, pairs: int, conventions: bool) -> int:
    """``clip``'s ``neighbours`` as given, or its rule's for a fit of ``pairs`` pairs: up to
    :data:`MAX_PAIRS` pairs :data:`K`, or :data:`K_CONVENTIONS` in a corpus of conventions
    (:mod:`ncclean.methods.cca_rules`); else none."""
    if neighbours is not None:
        return neighbours
    return 0 if pairs > MAX_PAIRS else K_CONVENTIONS if conventions else K


def neighbour_sides(sides: str, conventions: bool) -> tuple[bool, bool]:
    """Which of ``a`` and ``b`` may carry a weight, for ``clip``'s ``neighbour_sides``: ``a``
    alone in a corpus of conventions (:mod:`ncclean.methods.cca_rules`) under ``auto``."""
    return (True, sides == "both" or (sides == "auto" and not conventions))


def with_neighbours(space: Space, neighbours: FittedNeighbours) -> Space:
    """``space`` with each cosine plus the pairing's term, which no fit of the space changes."""
    def fitted(fit: np.ndarray | None) -> Cosine | None:
        cosine = space(fit)
        if cosine is None:
            return None
        return lambda images, texts: cosine(images, texts) + neighbours.score(images, texts)
    return fitted


def _unit(vectors: np.ndarray, mean: np.ndarray) -> np.ndarray:
    centred = np.asarray(vectors, np.float32) - mean
    norms = np.linalg.norm(centred, axis=1, keepdims=True)
    return centred / np.maximum(norms, 1e-12)


def _group_means(rows: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """``(n, d)``: the mean of ``rows`` over each group (``(len(rows),)`` in ``range(n)``)."""
    out = np.zeros((n, rows.shape[1]), dtype=np.float32)
    np.add.at(out, group, rows)
    return out / np.maximum(np.bincount(group, minlength=n), 1)[:, None]


def _mean_neighbours(queries: np.ndarray, entries: np.ndarray, others: np.ndarray,
                     k: int) -> np.ndarray:
    """For each unit query, the mean of ``others`` over the ``k`` unit ``entries`` nearest it
    (cosine below :data:`SAME`); fewer where fewer qualify, zero where none does."""
    entries_t = torch.from_numpy(np.ascontiguousarray(entries, dtype=np.float32))
    others_t = torch.from_numpy(np.ascontiguousarray(others, dtype=np.float32))
    take = min(k, len(entries))
    out = np.zeros((len(queries), others.shape[1]), dtype=np.float32)
    for start in range(0, len(queries), _BLOCK):
        block = torch.from_numpy(np.ascontiguousarray(queries[start:start + _BLOCK],
                                                      dtype=np.float32))
        sims = block @ entries_t.T
        sims[sims >= SAME] = -torch.inf
        values, nearest = torch.topk(sims, take, dim=1)
        found = torch.isfinite(values).float()
        total = torch.einsum("mk,mkd->md", found, others_t[nearest])
        out[start:start + len(block)] = (total / found.sum(1, keepdim=True).clamp(min=1)).numpy()
    return out
