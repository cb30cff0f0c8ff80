"""How well a score finds the noisy pairs: AUROC, average precision, precision/recall/F1.

The positive class is *noisy*. Scores follow the output contract, ``clean_prob`` (higher = more
likely clean), so they are turned around here once, not by every caller.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class DetectionMetrics:
    """Detection quality against ground truth. AUROC and AP are ``nan`` when the truth holds one
    class only; precision is ``nan`` when nothing was flagged. Pairs without a score (a NaN
    ``clean_prob``, e.g. invalid rows read back from a scored file) are left out of every figure
    and counted in ``n_unscored``; ``n_pairs`` counts the scored ones."""

    auroc: float
    ap: float
    precision: float
    recall: float
    f1: float
    n_pairs: int
    n_noisy: int
    n_flagged: int
    n_unscored: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def precision_recall_f1(truth: np.ndarray, flagged: np.ndarray) -> tuple[float, float, float]:
    """Precision, recall and F1 of ``flagged`` against ``truth`` (both ``(n,) bool``)."""
    truth = np.asarray(truth, dtype=bool)
    flagged = np.asarray(flagged, dtype=bool)
    hits = int((truth & flagged).sum())
    precision = hits / int(flagged.sum()) if flagged.any() else float("nan")
    recall = hits / int(truth.sum()) if truth.any() else float("nan")
    f1 = 2 * hits / (int(truth.sum()) + int(flagged.sum())) if (truth.any() or flagged.any()) \
        else float("nan")
    return precision, recall, f1


def detection_metrics(noisy_gt: np.ndarray, clean_prob: np.ndarray,
                      flagged: np.ndarray | None = None,
                      threshold: float = 0.5) -> DetectionMetrics:
    """Detection metrics of ``clean_prob`` (``(n,) float``) against ``noisy_gt`` (``(n,) bool``).

    ``flagged`` is the set called noisy (for instance ``partition == "noisy"``); by default the
    pairs with ``clean_prob < threshold``. Pairs whose ``clean_prob`` is NaN are left out (and
    counted, ``n_unscored``).
    """
    from sklearn.metrics import average_precision_score, roc_auc_score

    noisy_gt = np.asarray(noisy_gt, dtype=bool)
    clean_prob = np.asarray(clean_prob, dtype=np.float64)
    if noisy_gt.shape != clean_prob.shape:
        raise ValueError(f"noisy_gt {noisy_gt.shape} and clean_prob {clean_prob.shape} differ")
    if flagged is None:
        flagged = clean_prob < threshold
    flagged = np.asarray(flagged, dtype=bool)
    scored = ~np.isnan(clean_prob)
    n_unscored = int((~scored).sum())
    if n_unscored:
        noisy_gt, clean_prob, flagged = noisy_gt[scored], clean_prob[scored], flagged[scored]
    # Ranked by -clean_prob, not 1 - clean_prob: posteriors of 1e-20 and 1e-30 are different
    # ranks, but 1 minus either is exactly 1.0 in floating point (measured: a crcl run's AUROC
    # read 0.567 instead of 0.634 through that rounding).
    noisy_score = -clean_prob
    both_classes = 0 < noisy_gt.sum() < len(noisy_gt)
    auroc = float(roc_auc_score(noisy_gt, noisy_score)) if both_classes else float("nan")
    ap = float(average_precision_score(noisy_gt, noisy_score)) if both_classes else float("nan")
    precision, recall, f1 = precision_recall_f1(noisy_gt, flagged)
    return DetectionMetrics(auroc=auroc, ap=ap, precision=precision, recall=recall, f1=f1,
                            n_pairs=len(noisy_gt), n_noisy=int(noisy_gt.sum()),
                            n_flagged=int(flagged.sum()), n_unscored=n_unscored)
