import math

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, precision_recall_fscore_support, roc_auc_score

from ncclean.evaluate.detection import detection_metrics, precision_recall_f1


def test_agrees_with_scikit_learn(rng):
    noisy = rng.random(500) < 0.4
    clean_prob = np.clip(0.7 - 0.4 * noisy + rng.normal(0, 0.25, 500), 0, 1)
    metrics = detection_metrics(noisy, clean_prob)
    assert metrics.auroc == pytest.approx(roc_auc_score(noisy, 1 - clean_prob))
    assert metrics.ap == pytest.approx(average_precision_score(noisy, 1 - clean_prob))
    p, r, f, _ = precision_recall_fscore_support(noisy, clean_prob < 0.5, average="binary")
    assert (metrics.precision, metrics.recall, metrics.f1) == pytest.approx((p, r, f))
    assert metrics.auroc > 0.8  # the orientation is right: low clean_prob means noisy


def test_hand_computed_case():
    noisy = np.array([True, True, False, False, False])
    clean_prob = np.array([0.1, 0.6, 0.4, 0.8, 0.9])
    metrics = detection_metrics(noisy, clean_prob)
    # Noisy scores 0.9, 0.4 vs clean 0.6, 0.2, 0.1: 5 of 6 noisy-clean pairs ordered right.
    assert metrics.auroc == pytest.approx(5 / 6)
    assert (metrics.n_flagged, metrics.precision, metrics.recall) == (2, 0.5, 0.5)
    flagged = np.array([True, True, True, False, False])
    assert detection_metrics(noisy, clean_prob, flagged=flagged).recall == 1.0


def test_degenerate_cases_are_nan_not_errors():
    metrics = detection_metrics(np.zeros(4, bool), np.full(4, 0.9))
    assert math.isnan(metrics.auroc) and math.isnan(metrics.ap)
    assert math.isnan(metrics.precision)  # nothing flagged
    p, r, f = precision_recall_f1(np.array([True, False]), np.array([False, False]))
    assert math.isnan(p) and r == 0.0 and f == 0.0


def test_tiny_clean_probabilities_keep_their_order():
    # 1 - 1e-20 and 1 - 1e-30 are both exactly 1.0: ranking must not go through 1 - p.
    truth = np.array([True, False, True, False])
    prob = np.array([1e-30, 1e-20, 1e-25, 0.9])
    assert detection_metrics(truth, prob).auroc == 1.0


def test_nan_scores_are_left_out_and_counted():
    noisy = np.array([True, True, False, False, False, True, False])
    clean_prob = np.array([0.1, 0.6, 0.4, 0.8, 0.9, np.nan, np.nan])
    metrics = detection_metrics(noisy, clean_prob)
    assert metrics.auroc == pytest.approx(5 / 6)  # the hand-computed case on the scored five
    assert (metrics.n_pairs, metrics.n_noisy, metrics.n_unscored, metrics.n_flagged) == \
        (5, 2, 2, 2)
    flagged = np.array([True, True, True, False, False, True, True])
    assert detection_metrics(noisy, clean_prob, flagged=flagged).n_flagged == 3


def test_no_score_at_all_gives_nan_metrics_not_an_error():
    metrics = detection_metrics(np.array([True, False]), np.array([np.nan, np.nan]))
    assert math.isnan(metrics.auroc) and metrics.n_unscored == 2 and metrics.n_pairs == 0
