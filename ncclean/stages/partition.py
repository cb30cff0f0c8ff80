"""From ``clean_prob`` to partitions: clean, ``vague`` and ``noisy``.

Two ways to cut, after any method:

- **thresholds** (default): ``clean_prob >= clean_above`` is clean, ``clean_prob < noisy_below``
  is noisy, the band between is ``vague``. ``score`` defaults to 0.8 and 0.5: the papers' cut at
  the mixture's 0.5 posterior decides what is noisy, and pairs the mixture is less than 80% sure
  of are kept apart for review. This is SDD's reading of "vague" (Sec. 3.4): pairs kept for
  training but with a low confidence weight, neither trusted nor discarded. ``Cut()`` itself
  defaults to the single 0.5 cut (no band).
- **a noise rate** (``noise_rate``): the ``round(rate * n)`` pairs with the lowest
  ``clean_prob`` are noisy, the rest clean. Use the method's estimate (``"auto"``, the mixture's
  noisy weight) or a known rate. At high noise this can keep a cleaner set than the 0.5 cut.

With ``rare_clean_above``, pairs whose caption text occurs at most ``rare_count`` times among
the valid pairs are clean from that lower threshold (and noisy only below it, when it lies under
``noisy_below``). A cut for a training set, not for review: the clean pairs with rare captions
that the 0.8 cut drops are most of what cleaning gives a retrained matcher
(``benchmarks/results/retrain.md``, where ``--preset train`` sets it).

**Recall bands** (``noisy_recall``, ``review_recall``; ``score``'s default 0.5 and 0.9, the
``review`` preset): the thresholds' partitions are widened until ``noisy`` holds at least half of
the noisy pairs the scores expect (the sum of ``1 - clean_prob``, the method's own estimate) and
``noisy`` with ``vague`` at least 90% of them (:func:`recall_threshold`). Where noise is
plentiful and well separated the thresholds already reach that and nothing changes; where the
scores expect little noise spread over many middling pairs (natural noise: near misses, which
score above shuffled pairs) the 0.5 and 0.8 thresholds flag a sliver and the bands widen the
review to the pairs that hold the noise. ``clean_prob`` itself is untouched, and pairs are cut
at the precision the output holds it (float32), so the file agrees with its recorded thresholds.
Against injected noise the recall promised is the recall found, and on natural noise the bands
are what puts the real mismatches under review (``benchmarks/results/natural-noise.md``,
"Recall bands"). They belong to the review cut: a noise-rate cut and ``rare_clean_above`` (a
training cut) have none.

**A queue sized by the noise estimate** (``queue_by_estimate``, on in ``score``'s default):
where the pairs under ``clean_above`` outnumber the upper end of the 95% interval of the
method's estimate of the noisy pairs, the thresholds flag more than the corpus holds (a small or
weakly separated corpus, on which the calibrated scores are unsure of most clean pairs too), and
``noisy`` with ``vague`` is cut back to the lowest pairs, as many as the interval's lower end;
the bands then do not widen it (:meth:`Cut.with_queue`, ``benchmarks/results/review-queue.md``).
Where they do not outnumber it, the bands decide as above.

Every clean pair leaves here as ``clean_significant``; the significance stage
(:mod:`ncclean.stages.significance`) then moves the insignificant ones to
``clean_insignificant``.
"""

from __future__ import annotations

import numpy as np

from ncclean.data.results import (
    CLEAN_SIGNIFICANT,
    NOISY,
    VAGUE,
    as_written,
    recall_threshold,
)
from ncclean.options import Cut

__all__ = ["Cut", "as_written", "caption_counts", "partition", "recall_threshold"]


def caption_counts(text_group: np.ndarray) -> np.ndarray:
    """``(n,) int64``: how many of the pairs share each pair's caption text (``text_group``, the
    features' identical-text groups)."""
    text_group = np.asarray(text_group, dtype=np.int64)
    return np.bincount(text_group)[text_group] if len(text_group) else text_group


def partition(clean_prob: np.ndarray, cut: Cut = Cut(),
              counts: np.ndarray | None = None) -> np.ndarray:
    """``(n,)`` object array of partition names for ``clean_prob`` (``(n,) float``);
    ``counts`` (:func:`caption_counts`) is needed by ``cut.rare_clean_above``."""
    if cut.auto:
        raise ValueError("a noise rate of 'auto' must be resolved first (Cut.with_estimate)")
    clean_prob = np.asarray(clean_prob, dtype=np.float64)
    out = np.full(len(clean_prob), CLEAN_SIGNIFICANT, dtype=object)
    if cut.noise_rate is not None:
        n_noisy = int(round(float(cut.noise_rate) * len(clean_prob)))
        # Stable order: ties broken by position, so the same input gives the same cut.
        noisy = np.argsort(clean_prob, kind="stable")[:n_noisy]
        out[noisy] = NOISY
        return out
    cut = cut.with_recall(clean_prob) if cut.recall_clean_above is None \
        and cut.recall_noisy_below is None else cut
    above, below = cut.thresholds()
    clean_above = np.full(len(clean_prob), above)
    noisy_below = np.full(len(clean_prob), below)
    if cut.rare_clean_above is not None:
        if counts is None or len(counts) != len(clean_prob):
            raise ValueError("rare_clean_above needs each pair's caption count")
        rare = np.asarray(counts) <= cut.rare_count
        clean_above[rare] = cut.rare_clean_above
        noisy_below[rare] = min(below, cut.rare_clean_above)
    written = as_written(clean_prob)
    out[written < clean_above] = VAGUE
    out[written < noisy_below] = NOISY
    return out
