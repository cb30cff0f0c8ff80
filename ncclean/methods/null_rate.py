"""The share of mismatched pairs, read against pairs known to be mismatched: shuffled ones.

Pairing each image with another pair's caption makes a pair that is mismatched by construction,
so the similarities of shuffled pairs are a sample of what noise scores (the null). Most clean
pairs score above the null's median, so the share of real pairs scoring below it, doubled,
estimates the noise rate (Storey's pi0 at ``alpha = 0.5``; it errs high by the clean pairs that
score that low). No distribution is assumed for either kind of pair, which is where a
two-component Gaussian mixture on similarities goes wrong: on clip art, clean pairs with rare
captions score lower than those with repeated ones, and the mixture estimated 35% noise where
19% was injected and 52% where 75% was (``benchmarks/RESULTS.md``, "A noise rate from shuffled
pairs").

The null is only a null for pairs the space was not fitted on. A space fitted on the corpus
(the CCA of :mod:`ncclean.methods.align`) fits its noisy pairs too and lifts their scores above
the shuffled ones (in-sample the estimate fell to 14% for 19%), so such a space is cross-fitted:
each fold of pairs, and its shuffled null, is scored by a fit on the other folds. A fixed space
(a frozen CLIP, vectors from one encoder) needs no folds. A matcher trained on the corpus is
neither, and gets no estimate here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Given the pairs to fit on (None: nothing to fit), a cosine of (image entries, caption entries).
Cosine = Callable[[np.ndarray, np.ndarray], np.ndarray]
Space = Callable[[np.ndarray | None], Cosine]

ALPHA = 0.5
MIN_PAIRS = 50  # per fold: fewer scored pairs or shuffled pairs give no estimate


@dataclass(frozen=True)
class NullEstimate:
    """``noise_rate`` in [0, 1], from ``pairs`` sampled pairs scored in ``folds`` folds (1: a
    fixed space) against ``null_pairs`` shuffled ones."""

    noise_rate: float
    pairs: int
    null_pairs: int
    folds: int
    alpha: float = ALPHA

    def describe(self) -> dict:
        return {"noise_rate": self.noise_rate, "pairs": self.pairs,
                "null_pairs": self.null_pairs, "folds": self.folds, "alpha": self.alpha}


def null_noise_rate(space: Space, image_group: np.ndarray, text_group: np.ndarray, *,
                    folds: int = 5, sample: int = 50_000, shuffles: int = 3, seed: int = 0,
                    alpha: float = ALPHA) -> NullEstimate | None:
    """Estimate the noise rate of the pairs ``(image_group[i], text_group[i])``.

    ``space(fit)`` returns the cosine of a space fitted on the pairs ``fit`` (an index array),
    or, called with ``None``, of a fixed space; with ``folds`` of 1 it is called once with
    ``None``. At most ``sample`` pairs are scored (a seeded sample), each against ``shuffles``
    shuffles of its own fold, leaving out shuffled pairs that share the image or the caption
    text. ``None`` when a fold has fewer than :data:`MIN_PAIRS` pairs or shuffled pairs (a tiny
    corpus, or one caption everywhere)."""
    if folds < 1:
        raise ValueError(f"folds must be at least 1, got {folds}")
    rng = np.random.default_rng(seed)
    n = len(image_group)
    chosen = np.sort(rng.choice(n, size=min(n, sample), replace=False))
    fold_of = rng.permutation(len(chosen)) % folds
    below = scored = null_total = 0
    if len(chosen) < folds * MIN_PAIRS:
        return None
    for fold in range(folds):
        held = chosen[fold_of == fold]
        cosine = space(None if folds == 1 else chosen[fold_of != fold])
        nulls = []
        for _ in range(shuffles):
            other = rng.permutation(held)
            mismatched = (image_group[other] != image_group[held]) & \
                (text_group[other] != text_group[held])
            nulls.append(cosine(image_group[held[mismatched]], text_group[other[mismatched]]))
        null = np.concatenate(nulls)
        if len(null) < MIN_PAIRS:
            return None
        scores = cosine(image_group[held], text_group[held])
        below += int((scores < np.quantile(null, alpha)).sum())
        scored += len(held)
        null_total += len(null)
    return NullEstimate(noise_rate=min(1.0, below / scored / alpha), pairs=scored,
                        null_pairs=null_total, folds=folds, alpha=alpha)
