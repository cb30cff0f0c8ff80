"""The share of mismatched pairs, read against pairs known to be mismatched: shuffled ones.

Pairing each image with another pair's caption makes a pair that is mismatched by construction,
so the similarities of shuffled pairs are a sample of what noise scores (the null). Most clean
pairs score above the null's median, so the share of real pairs scoring below it, doubled,
estimates the noise rate (Storey's pi0 at ``alpha = 0.5``; it errs high by the clean pairs that
score that low). No distribution is assumed for either kind of pair, which is where a
two-component Gaussian mixture on similarities goes wrong: on clip art, clean pairs with rare
captions score lower than those with repeated ones, and the mixture's estimate misses the
injected rate by tens of points (``benchmarks/results/clip.md``, "The noise rate from shuffled
pairs").

The same two samples give each pair a clean probability: one minus the local false discovery
rate, ``noise_rate * f0(s) / f(s)`` (Efron), with ``f0`` the shuffled pairs' density of scores
and ``f`` the real pairs'. It is calibrated as a mixture's posterior is not: on clip art a
mixture's 0.5 cut promised 13% noise on a set that held 50%, and called 48.7% of a corpus with no
injected noise noisy (:meth:`NullEstimate.clean_prob`).

The null is only a null for pairs the space was not fitted on. A space fitted on the corpus
(the CCA of :mod:`ncclean.methods.align`) fits its noisy pairs too and lifts their scores above
the shuffled ones (in-sample the estimate fell to 14% for 19%), so such a space is cross-fitted:
each fold of pairs, and its shuffled null, is scored by a fit on the other folds. A fixed space
(a frozen CLIP, vectors from one encoder) needs no folds. A matcher trained on the corpus is
neither, and gets no estimate here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ncclean.methods.isotonic import isotonic_fit

# Given the pairs to fit on (None: nothing to fit), a cosine of (image entries, caption entries),
# or None where those pairs cannot be fitted.
Cosine = Callable[[np.ndarray, np.ndarray], np.ndarray]
Space = Callable[[np.ndarray | None], Cosine | None]

ALPHA = 0.5
MIN_PAIRS = 50  # per fold: fewer scored pairs or shuffled pairs give no estimate


@dataclass(frozen=True)
class NullEstimate:
    """``noise_rate`` in [0, 1], from ``pairs`` sampled pairs scored in ``folds`` folds (1: a
    fixed space) against ``null_pairs`` shuffled ones; ``scores`` and ``null`` hold those
    cosines, each fold's less its shuffled pairs' ``alpha``-quantile (the folds' fits differ in
    scale), so ``noise_rate`` is the share of ``scores`` below 0 over ``alpha``."""

    noise_rate: float
    pairs: int
    null_pairs: int
    folds: int
    scores: np.ndarray = field(repr=False, compare=False)
    null: np.ndarray = field(repr=False, compare=False)
    alpha: float = ALPHA
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False,
                             compare=False)  # the pair of each entry of ``scores``
    # the image and caption entries of each shuffled pair of ``null``
    null_images: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64),
                                    repr=False, compare=False)
    null_texts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64),
                                   repr=False, compare=False)

    def describe(self) -> dict:
        return {"noise_rate": self.noise_rate, "pairs": self.pairs,
                "null_pairs": self.null_pairs, "folds": self.folds, "alpha": self.alpha}

    def interval(self, level: float = 0.95, n_boot: int = 1000, seed: int = 0) \
            -> tuple[float, float]:
        """Percentile bootstrap interval of ``noise_rate``: the sampled pairs and the shuffled
        ones resampled apart, the estimate recomputed on each resample (the null's
        ``alpha``-quantile moves with its resample). Deterministic for a ``seed``. The folds'
        own centring is taken as fixed, so on a cross-fitted estimate the interval is a little
        narrow. The estimator errs high (the clean pairs that score below the null's quantile
        count as noise), most where the interval is wide: a small corpus, weak separation."""
        if len(self.scores) == 0 or len(self.null) == 0:
            return self.noise_rate, self.noise_rate
        rng = np.random.default_rng(seed)
        scores = np.sort(self.scores)
        # A resample's alpha-quantile is the null's quantile function at the alpha-quantile of
        # as many uniforms, a Beta draw; the resampled pairs below it are a binomial draw.
        k = max(1, int(np.ceil(self.alpha * len(self.null))))
        middles = np.quantile(self.null, rng.beta(k, len(self.null) - k + 1, size=n_boot))
        below = rng.binomial(len(scores), np.searchsorted(scores, middles) / len(scores))
        rates = np.minimum(1.0, below / len(scores) / self.alpha)
        tail = (1.0 - level) / 2
        return float(np.quantile(rates, tail)), float(np.quantile(rates, 1.0 - tail))

    def clean_prob(self, similarity: np.ndarray) -> np.ndarray:
        """``(n,) float64``: one minus the local false discovery rate of each pair of the corpus,
        ``noise_rate * f0(s) / f(s)`` (Efron), with ``f0`` the shuffled pairs' density and ``f``
        the sampled pairs'. Their ratio comes from an isotonic regression of "shuffled" on the
        score over both samples, so it falls as the score rises and needs no bins.

        ``similarity`` ``(n,)`` ranks the pairs; each pair is read at the sampled score of its
        own rank (quantile). So the ranking stays the in-sample one, which ranks captions seen
        once or twice better than the folds do (AUROC 0.911 against 0.894 on clip art at 50%),
        and the scale is the folds', on which the shuffled pairs are a null."""
        similarity = np.asarray(similarity, dtype=np.float64)
        if len(similarity) == 0:
            return np.zeros(0)
        # each distinct similarity at the middle of its ranks, so equal ones stay equal
        _, inverse, counts = np.unique(similarity, return_inverse=True, return_counts=True)
        middle_rank = np.cumsum(counts) - counts / 2
        at = np.quantile(self.scores, middle_rank / len(similarity))[inverse]
        knots, shuffled, _ = isotonic_fit(
            np.concatenate([self.scores, self.null]),
            np.concatenate([np.zeros(len(self.scores)), np.ones(len(self.null))]),
            increasing=False)
        # The fit is a staircase; joining the middles of its steps keeps pairs on one step
        # apart, so the probability ranks them as their similarity does.
        steps = np.r_[0, np.flatnonzero(np.diff(shuffled)) + 1]
        ends = np.r_[steps[1:], len(shuffled)] - 1
        middles = (knots[steps] + knots[ends]) / 2
        p = np.interp(at, middles, shuffled[steps])
        ratio = len(self.scores) / len(self.null) * p / np.maximum(1.0 - p, 1e-12)
        return 1.0 - np.clip(self.noise_rate * ratio, 0.0, 1.0)


def null_noise_rate(space: Space, image_group: np.ndarray, text_group: np.ndarray, *,
                    folds: int = 5, sample: int = 50_000, shuffles: int = 3, seed: int = 0,
                    alpha: float = ALPHA, min_pairs: int = MIN_PAIRS) -> NullEstimate | None:
    """Estimate the noise rate of the pairs ``(image_group[i], text_group[i])``.

    ``space(fit)`` returns the cosine of a space fitted on the pairs ``fit`` (an index array),
    or, called with ``None``, of a fixed space; with ``folds`` of 1 it is called once with
    ``None``. At most ``sample`` pairs are scored (a seeded sample), each against ``shuffles``
    shuffles of its own fold, leaving out shuffled pairs that share the image or the caption
    text. ``None`` when a fold has fewer than ``min_pairs`` pairs or shuffled pairs (a tiny
    corpus, or one caption everywhere), or when ``space`` cannot fit the other folds."""
    if folds < 1:
        raise ValueError(f"folds must be at least 1, got {folds}")
    rng = np.random.default_rng(seed)
    n = len(image_group)
    chosen = np.sort(rng.choice(n, size=min(n, sample), replace=False))
    fold_of = rng.permutation(len(chosen)) % folds
    if len(chosen) < folds * min_pairs:
        return None
    all_scores, all_nulls, all_rows, null_images, null_texts = [], [], [], [], []
    for fold in range(folds):
        held = chosen[fold_of == fold]
        all_rows.append(held)
        cosine = space(None if folds == 1 else chosen[fold_of != fold])
        if cosine is None:
            return None
        nulls = []
        for _ in range(shuffles):
            other = rng.permutation(held)
            mismatched = (image_group[other] != image_group[held]) & \
                (text_group[other] != text_group[held])
            null_images.append(image_group[held[mismatched]])
            null_texts.append(text_group[other[mismatched]])
            nulls.append(cosine(null_images[-1], null_texts[-1]))
        null = np.concatenate(nulls)
        if len(null) < min_pairs:
            return None
        # each fold's fit has its own scale: measured from its own null's alpha-quantile
        middle = np.quantile(null, alpha)
        all_scores.append(cosine(image_group[held], text_group[held]) - middle)
        all_nulls.append(null - middle)
    scores, null = np.concatenate(all_scores), np.concatenate(all_nulls)
    below = (scores < 0).mean()
    return NullEstimate(noise_rate=float(min(1.0, below / alpha)), pairs=len(scores),
                        null_pairs=len(null), folds=folds, scores=scores, null=null, alpha=alpha,
                        rows=np.concatenate(all_rows), null_images=np.concatenate(null_images),
                        null_texts=np.concatenate(null_texts))
