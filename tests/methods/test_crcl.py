import numpy as np
import pytest
import torch

from ncclean.errors import BadOptionError
from ncclean.evaluate.detection import detection_metrics
from ncclean.methods.base import Context
from ncclean.methods.crcl import (
    CRCL,
    SelfRefine,
    acl_loss,
    complementary,
    freeze_for,
    matching_probabilities,
    pieces_for,
)
from ncclean.testing import check_method, tiny_features
from ncclean.train.scoring import embed, pool_matching_probability


def test_passes_the_conformance_suite():
    result = check_method(CRCL(pieces=(6, 4), freeze_epochs=3, batch_size=16, lr=3e-3), pairs=200)
    assert set(result.columns) == {"crcl_label", "crcl_p", "crcl_sim", "crcl_rank_mean"}
    assert result.report["pieces"] == [6, 4]
    assert ((result.columns["crcl_p"] > 0) & (result.columns["crcl_p"] <= 1)).all()


def test_finds_injected_noise_on_a_synthetic_corpus():
    features, config, truth = tiny_features(n_images=60, captions_per_image=3, noise=0.4)
    result = CRCL(pieces=(8, 6, 8), freeze_epochs=5, batch_size=32, lr=1e-3).fit(
        features, Context(seed=0, matcher_config=config))
    truth = truth[features.rows]
    assert detection_metrics(truth, result.clean_prob).auroc > 0.75
    labels = result.columns["crcl_label"]
    assert labels[truth].mean() < labels[~truth].mean()


def test_schedule_rules():
    assert freeze_for(8_000, 128, None) == 5
    assert freeze_for(1_000_000, 128, None) == 2
    assert freeze_for(100, 128, None) == 10
    assert pieces_for(8_000, 128, None, 5) == (10, 10, 10, 35)
    assert pieces_for(800_000, 128, None, 2) == (3, 3, 3, 3)
    assert pieces_for(10, 128, "3, 4", 2) == (3, 4)
    # a head on fixed image vectors: one frozen epoch at every size, a fifth of the pieces
    assert freeze_for(7_057, 128, None, frozen_images=True) == 1
    assert pieces_for(7_057, 128, None, 1, frozen_images=True) == (2, 2, 2, 7)
    assert freeze_for(100, 128, None, frozen_images=True) == 1
    assert pieces_for(10, 128, "3, 4", 2, frozen_images=True) == (3, 4)
    with pytest.raises(BadOptionError):
        pieces_for(10, 128, "three", 2)


def test_complementary_term_limits():
    # q = 0: the plain sum of tan over the negatives; q = 1: normalised by the total.
    p = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    t = torch.tan(p)
    zero = complementary(p, torch.zeros(3), 1)
    one = complementary(p, torch.ones(3), 1)
    assert torch.allclose(zero, t.sum(1) - t.diagonal())
    assert torch.allclose(one, (t.sum(1) - t.diagonal()) / t.sum(1))


def test_masked_entries_are_not_in_the_softmax():
    sims = torch.tensor([[0.9, 0.8, 0.1], [0.8, 0.9, 0.1], [0.1, 0.1, 0.9]])
    mask = torch.tensor([[False, False, True], [False, False, True], [True, True, False]])
    row, column = matching_probabilities(sims, mask, 0.05)
    assert row[0, 1] == 0 and column[1, 0] == 0
    assert torch.allclose(row.sum(1), torch.ones(3))


def test_zero_label_pairs_get_no_active_gradient():
    sims = torch.tensor([[0.5, 0.2], [0.1, 0.4]], requires_grad=True)
    mask = ~torch.eye(2, dtype=torch.bool)
    loss, p_hat = acl_loss(sims, mask, torch.tensor([0.0, 0.0]), 0.05, lam=0.0)
    assert loss.item() == 0.0 and p_hat.shape == (2,)


def test_label_updates_paper_and_code():
    features, _, _ = tiny_features(n_images=4)
    n = features.n_pairs
    paper = SelfRefine(features, CRCL(update="epoch", target="p"), (4, 4), 2, "cpu")
    paper.p_now = np.full(n, 0.5)
    paper.begin_epoch(None, 1)  # frozen
    assert (paper.labels == 1).all()
    paper.p_now = np.full(n, 0.5)
    paper.begin_epoch(None, 2)  # piece 1, first free epoch: the raw p_hat
    assert np.allclose(paper.labels, 0.5)
    paper.p_now = np.full(n, 0.05)
    paper.begin_epoch(None, 3)  # momentum; the threshold applies to the loss only
    assert np.allclose(paper.labels, 0.8 * 0.5 + 0.2 * 0.05)
    code = SelfRefine(features, CRCL(update="batch"), (4, 4), 2, "cpu")
    rows = np.arange(n)
    assert code._update_batch(rows, np.full(n, 0.3), epoch=0)  # frozen: nothing written
    assert (code.labels == 1).all()
    # piece 1's last frozen epoch: the raw p_hat is written back, no threshold, and the step
    # trains on the old labels (train_self)
    assert code._update_batch(rows, np.full(n, 0.05), epoch=1)
    assert np.allclose(code.labels, 0.05)
    assert not code._update_batch(rows, np.full(n, 0.4), epoch=2)  # momentum, trained on
    assert np.allclose(code.labels, 0.8 * 0.05 + 0.2 * 0.4)  # 0.12: above epsilon, kept
    code._update_batch(rows, np.full(n, 0.0), epoch=3)
    assert (code.labels == 0).all()  # 0.096 < epsilon: written back as 0 (the sticky zero)
    code._update_batch(rows, np.full(n, 0.4), epoch=3)
    assert (code.labels == 0).all()  # 0.2 * 0.4 < epsilon: zeroed again


def test_batch_update_trains_the_last_frozen_epoch_on_the_old_labels():
    from ncclean.models.matcher import build_matcher
    from ncclean.train.losses import negative_mask

    features, config, _ = tiny_features(n_images=4)
    rows = np.arange(features.n_pairs)
    model = build_matcher(config, seed=0).eval()  # eval: the same similarities every call
    batch = features.batch(rows)
    with torch.no_grad():
        sims = model.batch_similarity(batch)
        mask = negative_mask(batch.image_group, batch.text_group)
        row, column = matching_probabilities(sims, mask, 0.05)
        p_hat = ((row.diagonal() + column.diagonal()) / 2).numpy()
    for epoch, trained_on in ((1, np.ones(len(rows))), (2, None)):
        code = SelfRefine(features, CRCL(update="batch"), (4, 4), 2, "cpu")
        if epoch == 2:
            code.labels[:] = 0.5
            trained_on = 0.8 * 0.5 + 0.2 * p_hat
            trained_on = np.where(trained_on < 0.1, 0.0, trained_on)
        with torch.no_grad():
            loss = code.loss(model, (epoch, rows), epoch)
            expected, _ = acl_loss(sims, mask, torch.as_tensor(trained_on, dtype=torch.float32),
                                   0.05, 5.0)
        assert torch.allclose(loss, expected)
        if epoch == 1:
            assert np.allclose(code.labels, p_hat)  # raw, even where under epsilon


def test_posterior_target_moves_labels_towards_the_mixtures_clean_posterior():
    features, _, _ = tiny_features(n_images=20)
    n = features.n_pairs
    rng = np.random.default_rng(0)
    clean = rng.random(n) < 0.3  # at high noise even clean pairs have a small p_hat
    p_hat = np.where(clean, rng.normal(0.08, 0.01, n), rng.normal(0.02, 0.005, n)).clip(1e-4)
    objective = SelfRefine(features, CRCL(target="posterior"), (4, 4), 2, "cpu")
    objective.p_now = p_hat.copy()
    objective.begin_epoch(None, 2)  # piece 1's first free epoch: the target itself
    assert objective.labels[clean].min() > 0.9 > 0.1 > objective.labels[~clean].max()
    plain = SelfRefine(features, CRCL(target="p"), (4, 4), 2, "cpu")
    plain.p_now = p_hat.copy()
    plain.begin_epoch(None, 2)
    assert (plain.labels < 0.1).all()  # the paper's target: every label under epsilon
    with pytest.raises(BadOptionError):
        CRCL(target="posterior", update="batch").fit(features, Context())


def test_rank_target_is_the_percentile_of_p_hat_whatever_its_scale():
    features, _, _ = tiny_features(n_images=20)
    n = features.n_pairs
    p_hat = np.random.default_rng(1).random(n) * 0.02  # every pair near chance
    p_hat[:2] = p_hat[2]  # a tie shares its mean rank
    objective = SelfRefine(features, CRCL(target="rank"), (4, 4), 2, "cpu")
    objective.p_now = p_hat.copy()
    objective.begin_epoch(None, 2)
    order = np.argsort(p_hat, kind="stable")
    assert objective.labels.min() == 0.0 and objective.labels.max() == 1.0
    assert (np.diff(objective.labels[order]) >= 0).all()
    assert objective.labels[0] == objective.labels[1] == objective.labels[2]
    assert np.isclose(np.sort(objective.labels).sum(), n / 2)  # uniform over [0, 1]
    with pytest.raises(BadOptionError):
        CRCL(target="rank", update="batch").fit(features, Context())


def test_default_target_is_the_rank_except_with_the_codes_per_batch_update():
    assert CRCL().label_target == "rank"
    assert CRCL(update="batch").label_target == "p"
    assert CRCL(target="p").label_target == "p"
    assert CRCL().measure == "train" and CRCL().score == "label"
    features, _, _ = tiny_features(n_images=4)
    with pytest.raises(BadOptionError):
        CRCL(update="sometimes").fit(features, Context())


def test_pool_measure_reads_p_hat_from_the_eval_mode_matcher_against_a_fixed_pool():
    features, config, _ = tiny_features(n_images=20)
    context = Context(seed=0, matcher_config=config)
    model = context.new_matcher()
    method = CRCL(measure="pool", pool_size=16)
    objective = SelfRefine(features, method, (4, 4), 2, "cpu")
    objective.end_epoch(model, 0)  # frozen, and its p_hat is not read: nothing measured
    assert np.isnan(objective.p_now).all()
    objective.end_epoch(model, 1)  # read by the first free epoch's update
    expected = pool_matching_probability(embed(model, features), features, 0.05, 16, 0)
    assert np.allclose(objective.p_now, expected) and model.training
    objective.p_now = np.full(features.n_pairs, np.nan)
    objective.end_epoch(model, 3)  # the piece's last epoch: the next piece restarts
    assert np.isnan(objective.p_now).all()
    with pytest.raises(BadOptionError):
        CRCL(measure="pool", update="batch").fit(features, context)
    with pytest.raises(BadOptionError):
        CRCL(measure="eval").fit(features, context)
    result = check_method(CRCL(pieces=(3, 2), freeze_epochs=1, batch_size=16, lr=3e-3,
                               measure="pool"), pairs=200)
    assert result.report["measure"] == "pool"


def test_mean_rank_averages_each_updating_epochs_percentile_of_p_hat():
    features, config, _ = tiny_features(n_images=20)
    n = features.n_pairs
    objective = SelfRefine(features, CRCL(), (5, 5), 2, "cpu")
    assert objective.mean_rank() is None  # no update yet: the score falls back to the labels
    rng = np.random.default_rng(2)
    draws = []
    for epoch in range(5):
        objective.p_now = rng.random(n)
        draws.append(objective.p_now.copy())
        objective.begin_epoch(None, epoch)
    updating = draws[2:]  # read by the updates of epochs 2, 3 and 4; epochs 0 and 1 frozen
    expected = np.mean([np.argsort(np.argsort(p)) / (n - 1) for p in updating], axis=0)
    assert np.allclose(objective.mean_rank(), expected)
    restored = SelfRefine(features, CRCL(), (5, 5), 2, "cpu")
    restored.load_state(objective.state())
    assert np.array_equal(restored.mean_rank(), objective.mean_rank())
    with pytest.raises(BadOptionError):
        CRCL(score="final").fit(features, Context(matcher_config=config))
    by_rank = check_method(CRCL(pieces=(3, 2), freeze_epochs=1, batch_size=16, lr=3e-3,
                                score="mean-rank"), pairs=200)
    assert by_rank.report["score"] == "mean-rank"
