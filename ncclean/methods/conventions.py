"""Captions the corpus taught the CCA: a repeated caption's score discounted by what only its own
pairs taught.

A CCA fitted on the corpus (:mod:`ncclean.methods.align`) learns every convention the corpus
repeats. A caption that a collection attaches to a hundred pictures ("gramastar", a site's name,
"advertising" on a set of warning signs) gets its own direction, so its pairs score as clean as
real matches whether or not the words describe the picture. Injected shuffles cannot show this
(the repeated caption's own pairs count as clean there); a hand-labelled sample of clip art's own
noise can: there the in-sample cosine ranked a repeated wrong caption ("advertising" on warning
signs) above most real matches.

So each pair is also scored by a CCA fitted without any pair of its caption (the caption groups
split into ``folds`` folds): what the rest of the corpus says the words mean. The difference
between the ranking score and that held-out score is what the caption's own pairs taught the
fit. For a caption seen once it is the pair's own memorisation; for a repeated caption, its
group's mean difference beyond ``quantile`` of the single captions' (what one pair teaches) is
the convention's gain. The ranking score loses that gain shrunk by the caption's support,
``kappa / (count + kappa)``: a convention a thousand pairs share is mostly kept (it is what the
injected-noise ranking rests on), one that twenty share is mostly not. Ours, not a paper's;
``quantile`` and ``kappa`` measured against both kinds of noise in
``benchmarks/results/natural-noise.md``, "Conventions discounted".
"""

from __future__ import annotations

import numpy as np

from ncclean.methods.align import PairSums, alignment_from_sums, pair_sums, unalignable

FOLDS = 10
QUANTILE = 0.75
KAPPA = 300.0
MIN_FIT_PAIRS = 20  # a fold whose fit would see fewer pairs is not scored (NaN: no discount)


def caption_folds(text_group: np.ndarray, folds: int = FOLDS, seed: int = 0) -> np.ndarray:
    """``(n,) int64`` fold of each pair, every pair of one caption (``text_group``) in the same
    fold: the captions in a seeded random order, dealt round the folds. Random, not balanced by
    size: a corpus is often ordered by topic, and folds of neighbouring captions would hold a
    whole topic out of its own fit (measured in ``benchmarks/results/natural-noise.md``)."""
    groups, inverse = np.unique(text_group, return_inverse=True)
    order = np.random.default_rng([seed, 4099]).permutation(len(groups))
    return (order % folds)[inverse].astype(np.int64)


def held_out_similarity(images: np.ndarray, texts: np.ndarray, image_group: np.ndarray,
                        text_group: np.ndarray, dims: int, ridge: float, seed: int = 0,
                        folds: int = FOLDS, total: PairSums | None = None) -> np.ndarray:
    """``(n,) float32``: each pair's cosine in a CCA (``dims``, ``ridge``) fitted on the pairs of
    the other caption folds (:func:`caption_folds` with ``seed``); NaN in a fold whose fit would
    see fewer than :data:`MIN_FIT_PAIRS` pairs (one caption nearly everywhere) or pairs that
    cannot be aligned (:func:`~ncclean.methods.align.unalignable`). ``images`` and
    ``texts`` are the raw vector tables (``texts`` one row per distinct caption: ``text_group``
    indexes it), ``image_group`` and ``text_group`` ``(n,) int64`` the pairs. One
    pass over the pairs for the whole corpus's moments (none when ``total`` holds them already:
    :func:`~ncclean.methods.align.pair_sums` of the same pairs), and the folds' together one
    more; each fit subtracts its fold from the whole."""
    fold_of = caption_folds(text_group, folds, seed)
    if total is None:
        total = pair_sums(images, texts, image_group, text_group)
    out = np.full(len(image_group), np.nan, dtype=np.float32)
    for fold in range(folds):
        held = np.flatnonzero(fold_of == fold)
        if len(held) == 0 or len(image_group) - len(held) < MIN_FIT_PAIRS:
            continue
        moments = total - pair_sums(images, texts, image_group[held], text_group[held])
        if unalignable(moments) is not None:  # the other folds hold one image or one caption
            continue
        alignment = alignment_from_sums(moments, dims, ridge)
        out[held] = alignment.pair_cosine(images, texts, image_group[held], text_group[held])
    return out


def convention_discount(similarity: np.ndarray, held_out: np.ndarray, text_group: np.ndarray,
                        quantile: float = QUANTILE, kappa: float = KAPPA) -> np.ndarray:
    """``(n,) float64``, at least 0: what to take from each pair's ranking ``similarity`` for
    the gain its caption's own pairs gave it over ``held_out`` (:func:`held_out_similarity`),
    both ``(n,)``; ``text_group`` ``(n,)`` the caption of each pair (module docstring). A pair
    without a held-out score counts no gain."""
    gain = np.asarray(similarity, np.float64) - np.asarray(held_out, np.float64)
    gain = np.where(np.isfinite(gain), gain, 0.0)
    _, inverse, counts = np.unique(text_group, return_inverse=True, return_counts=True)
    count = counts[inverse]
    single = count == 1
    typical = float(np.quantile(gain[single], quantile)) if single.any() else 0.0
    mean_gain = (np.bincount(inverse, gain) / counts)[inverse]
    return kappa / (count + kappa) * np.maximum(mean_gain - typical, 0.0)


def repeated_caption_discount(discount: np.ndarray, text_group: np.ndarray,
                              n_texts: int) -> np.ndarray:
    """``(n_texts,) float64``: the discount (``(n,)``, :func:`convention_discount`) of each
    caption entry that more than one pair (``text_group``, ``(n,) int64``) carries (a
    caption's, the same for all its pairs), 0 for the others (a single caption's discount is
    its own pair's memorisation, which a held-out fit does not have)."""
    out = np.zeros(n_texts)
    counts = np.bincount(text_group, minlength=n_texts)
    repeated = counts[text_group] > 1
    out[text_group[repeated]] = discount[repeated]
    return out


def describe_discount(discount: np.ndarray, text_group: np.ndarray) -> dict:
    """The run report's record of the discount (``(n,)``) of pairs of captions ``text_group``."""
    _, first, counts = np.unique(text_group, return_index=True, return_counts=True)
    repeated = (counts > 1) & (discount[first] > 0)
    return {"discounted_captions": int(repeated.sum()),
            "discounted_pairs": int(counts[repeated].sum()),
            "pairs_with_any_discount": int((discount > 0).sum()),
            "largest": round(float(discount.max()), 4) if len(discount) else 0.0}
