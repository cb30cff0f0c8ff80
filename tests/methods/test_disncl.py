import functools
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

from ncclean import api
from ncclean.cli import main
from ncclean.errors import BadOptionError
from ncclean.methods.base import make_method
from ncclean.methods.disncl import (
    CRITICS,
    DisentangledMatcher,
    DisNCL,
    jsd_information,
    mutual_argmax,
    reverse_gradient,
    soft_alignment,
)
from ncclean.methods.mixture import fit_clean_posterior
from ncclean.models.disentangled import CriticBank, ResidualMLP, mlp
from ncclean.testing import check_method
from ncclean.train.losses import negative_mask

SMALL = dict(warmup_epochs=1, epochs=2, batch_size=32, pool_size=64, keep_passes=2)
COLUMNS = {"disncl_sim", "disncl_loss", "disncl_keep", "disncl_x_sim"}


def test_passes_the_conformance_suite():
    result = check_method(DisNCL(**SMALL), pairs=200)
    assert set(result.columns) == COLUMNS
    keep = result.columns["disncl_keep"]
    assert set(np.unique(keep)) <= {0.0, 0.5, 1.0}
    last = result.report["history"][-1]
    assert 0.0 <= last["clean_share"] <= 1.0
    accuracies = {name: last[f"accuracy_{name}"] for name in CRITICS if f"accuracy_{name}" in last}
    assert {"VS_VX", "TS_TX"} <= set(accuracies)  # L_reg runs on every batch
    assert all(0.0 <= value <= 1.0 for value in accuracies.values())
    # the returned matcher encodes into the invariant space
    assert result.matcher.embed_dim == result.report["head_dim"]


def test_parameters_are_declared_and_checked():
    assert make_method("disncl", {"terms": "align+dis", "soft_loss": "forward"}).terms == \
        "align+dis"
    with pytest.raises(BadOptionError, match="terms"):
        make_method("disncl", {"terms": "everything"})
    with pytest.raises(BadOptionError, match="gamma"):
        DisNCL(gamma=1.5)


def test_mutual_argmax_ignores_masked_duplicates():
    # pair 0's caption is beaten by pair 1's, but pair 1 shows the same image: not a rival.
    sims = torch.tensor([[0.5, 0.9, 0.1], [0.9, 0.5, 0.1], [0.1, 0.2, 0.8]])
    images, texts = torch.tensor([0, 0, 1]), torch.tensor([0, 1, 2])
    assert mutual_argmax(sims, negative_mask(images, texts)).tolist() == [True, True, True]
    # with three distinct images, the off-diagonal winner drops both pairs
    distinct = negative_mask(torch.tensor([0, 1, 2]), texts)
    assert mutual_argmax(sims, distinct).tolist() == [False, False, True]
    # a row winner that is not the column winner is not mutual
    sims = torch.tensor([[0.9, 0.1], [0.95, 0.2]])
    two = negative_mask(torch.tensor([0, 1]), torch.tensor([0, 1]))
    assert mutual_argmax(sims, two).tolist() == [False, False]
    # ours: within the top 2 both ways
    assert mutual_argmax(sims, two, rank=2).tolist() == [True, True]


def _grads(reverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    encoder, critic = nn.Linear(4, 3), CriticBank(("c",), 3, 3, hidden=5)
    x, y = torch.randn(8, 4), torch.randn(8, 3)
    code = encoder(x)
    code = reverse_gradient(code) if reverse else code
    estimate, _, _ = jsd_information(critic, code[None], y[None],
                                     (torch.arange(8), torch.arange(8)))
    (-estimate.sum()).backward()
    return encoder.weight.grad.clone(), critic.w1_first.grad.clone()


def test_gradient_reversal_flips_only_the_encoder_side():
    encoder, critic = _grads(reverse=False)
    encoder_reversed, critic_reversed = _grads(reverse=True)
    assert encoder.abs().sum() > 0
    assert torch.allclose(encoder_reversed, -encoder)
    assert torch.allclose(critic_reversed, critic)


def test_jsd_estimate_is_at_most_zero_and_skips_shared_partners():
    critics = CriticBank(("one", "two"), 2, 2, hidden=4)
    a, b = torch.randn(2, 6, 2), torch.randn(2, 6, 2)
    estimate, right, count = jsd_information(critics, a, b, (torch.arange(6), torch.arange(6)))
    assert estimate.shape == (2,) and (estimate <= 0).all()
    assert count == 12 and ((right >= 0) & (right <= 12)).all()
    same_image = torch.zeros(6, dtype=torch.long)  # every rolled partner shows the same image
    _, _, count = jsd_information(critics, a, b, (same_image, torch.arange(6)))
    assert count == 6


def test_a_bank_of_critics_is_the_papers_mlps_applied_one_by_one():
    """Stacked critics start with the weights :func:`mlp` draws for each, in order, and give
    each one's logits of the joint and the marginal samples (the batch rolled by one)."""
    torch.manual_seed(3)
    bank = CriticBank(("p", "q"), 3, 2, hidden=4)
    torch.manual_seed(3)
    critics = [mlp(5, 1, 4), mlp(5, 1, 4)]
    first, second = torch.randn(2, 7, 3), torch.randn(2, 7, 2)
    apart = torch.tensor([True, False, True, True, True, False, True])
    joint, marginal = bank(first, second, apart)
    for k, critic in enumerate(critics):
        expected_joint = critic(torch.cat([first[k], second[k]], dim=1)).squeeze(1)
        expected_marginal = critic(torch.cat([first[k], second[k].roll(1, dims=0)],
                                             dim=1)).squeeze(1)[apart]
        assert torch.allclose(joint[k], expected_joint, atol=1e-6)
        assert torch.allclose(marginal[k], expected_marginal, atol=1e-6)


def test_reverse_soft_loss_is_bounded_and_forward_is_not():
    generator = torch.Generator().manual_seed(0)
    bound = -2 * math.log(1e-4)
    clean = torch.ones(16, dtype=torch.bool)
    mask = negative_mask(torch.arange(16), torch.arange(16))
    worst_forward = 0.0
    for scale in (1.0, 10.0, 1000.0):
        sims = torch.randn(16, 16, generator=generator) * scale
        sims.fill_diagonal_(-scale)  # every positive the worst in its row and column
        for columns in ("all", "clean"):
            reverse = soft_alignment(sims, mask, clean, 0.05, 1.0, "reverse", columns)
            assert torch.isfinite(reverse).all()
            assert (reverse >= 0).all() and (reverse <= bound + 1e-4).all()
        forward = soft_alignment(sims, mask, clean, 0.05, 1.0, "forward")
        worst_forward = max(worst_forward, float(forward.max()))
    assert worst_forward > 100 * bound
    # pairs outside the clean set contribute nothing
    noisy = torch.zeros(16, dtype=torch.bool)
    assert soft_alignment(sims, mask, noisy, 0.05, 0.5).abs().sum() == 0


def test_same_seed_same_scores_and_another_seed_differs():
    from ncclean.methods.base import Context
    from ncclean.testing import tiny_features

    features, config, _ = tiny_features(n_images=12)
    runs = [DisNCL(**SMALL).fit(features, Context(seed=s, matcher_config=config))
            for s in (3, 3, 4)]
    assert np.array_equal(runs[0].clean_prob, runs[1].clean_prob)
    assert np.array_equal(runs[0].columns["disncl_sim"], runs[1].columns["disncl_sim"])
    assert not np.array_equal(runs[0].columns["disncl_sim"], runs[2].columns["disncl_sim"])


def test_a_residual_head_is_its_mlp_plus_a_linear_skip_and_old_args_rebuild_plain_heads():
    torch.manual_seed(0)
    head, x = ResidualMLP(6, 4, hidden=5), torch.randn(3, 6)
    assert torch.allclose(head(x), head.mlp(x) + x @ head.skip.weight.T)
    assert head.skip.bias is None
    backbone = nn.Module()
    backbone.config, backbone.embed_dim = None, 6
    assert isinstance(DisentangledMatcher(backbone, 4, 5, "residual").text_invariant, ResidualMLP)
    # a checkpoint written before the residual heads has no "heads" argument: plain MLPs
    plain = DisentangledMatcher(backbone, 4, 5)
    assert isinstance(plain.text_invariant, nn.Sequential)
    assert plain.checkpoint_args() == {"head_dim": 4, "hidden": 5, "heads": "mlp"}


def test_final_mean_averages_posteriors_without_changing_the_training():
    from ncclean.methods.base import Context
    from ncclean.testing import tiny_features

    features, config, _ = tiny_features(n_images=12)
    small = SMALL | {"epochs": 3}
    mean, last = (DisNCL(**small, final=final).fit(features, Context(seed=1, matcher_config=config))
                  for final in ("mean", "last"))
    # the divisions read the matcher and draw nothing: the same training, the same columns
    assert np.array_equal(mean.columns["disncl_sim"], last.columns["disncl_sim"])
    assert mean.report["divisions"] == 3 and last.report["divisions"] == 0
    expected, _ = fit_clean_posterior(last.columns["disncl_sim"], "high", seed=1)
    assert np.allclose(last.clean_prob, np.clip(expected, 0, 1))
    assert not np.allclose(mean.clean_prob, last.clean_prob)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("disncl")
    api.synth(folder / "clean.parquet", n_images=16, captions_per_image=2, seed=0)
    api.inject_noise(folder / "clean.parquet", folder / "noisy.parquet", ratio=0.4, seed=0)
    return folder


def _score(corpus, out, *extra: str) -> int:
    return main(["score", str(corpus / "noisy.parquet"), "-o", str(out), "--method", "disncl",
                 "-p", "warmup_epochs=1", "-p", "epochs=1", "-p", "batch_size=16",
                 "-p", "terms=full", "-p", "soft_loss=forward", "--no-cache", *extra])


def test_cli_writes_the_columns_and_the_same_seed_writes_the_same_file(corpus, capsys):
    first, second = corpus / "a.parquet", corpus / "b.parquet"
    assert _score(corpus, first) == 0, capsys.readouterr().err
    assert _score(corpus, second) == 0
    table = pq.read_table(first)
    assert set(table.column_names) >= COLUMNS
    assert table.equals(pq.read_table(second))
    sidecar = json.loads((corpus / "a.parquet.json").read_text())
    assert sidecar["report"]["history"][-1]["clean_share"] >= 0
    assert sidecar["detection_vs_noisy_gt"]["auroc"] is not None


def test_cli_saves_the_matcher_and_retrain_evaluates_it(corpus, capsys):
    saved = corpus / "m.safetensors"
    assert _score(corpus, corpus / "c.parquet", "--save-matcher", str(saved)) == 0
    assert json.loads((corpus / "m.safetensors.json").read_text())["wrapper"]["name"] == \
        "disentangled"
    capsys.readouterr()
    assert main(["retrain", str(corpus / "c.parquet"), "--steps", "2", "--eval-every", "0",
                 "--matcher", str(saved), "--cache-dir", str(corpus / "cache"),
                 "--json"]) == 0, capsys.readouterr().err
    arm = json.loads(capsys.readouterr().out)["arms"]["matcher"]
    assert arm["method"] == "disncl" and 0 <= arm["strict"]["rsum"] <= 600


def _objective(**params):
    """A fresh DisNCL network and its objective on a tiny corpus, past the warm-up."""
    from ncclean.methods.base import Context
    from ncclean.methods.disncl import Disentangle
    from ncclean.models.disentangled import DisNCLNet

    features, config, _ = _tiny()
    method = DisNCL(**SMALL | params)
    torch.manual_seed(0)
    matcher = DisentangledMatcher(Context(seed=0, matcher_config=config).new_matcher(0), 16, 8)
    net = DisNCLNet(matcher, 8)
    objective = Disentangle(features, method, warmup=0, device="cpu", seed=0)
    objective.begin_epoch(net, 0)
    net.train()
    return features, net, objective


@functools.cache
def _tiny():
    from ncclean.testing import tiny_features

    return tiny_features(n_images=12)


def test_the_union_clean_set_adds_the_epochs_division_to_the_batch_set():
    step = np.arange(32)
    shares = {}
    for clean_set, division in (("batch", None), ("union", 0.0), ("union", 1.0)):
        features, net, objective = _objective(clean_set=clean_set)
        if division is not None:  # the mixture's posterior, as begin_epoch leaves it
            assert objective.division.shape == (features.n_pairs,)
            objective.division = np.full(features.n_pairs, division)
        torch.manual_seed(1)
        objective.loss(net, step, 0)
        shares[clean_set, division] = objective.sums["clean_share"] / len(step)
    # a division that calls nobody clean leaves Eq. 2's set; one that calls everyone, all
    assert shares["union", 0.0] == shares["batch", None] < 1.0
    assert shares["union", 1.0] == 1.0


def test_the_soft_margin_reads_ncr_prediction_or_the_cosine():
    from ncclean.train.losses import adaptive_prediction, mean_hinge, soft_margin

    step = np.arange(32)
    aligns = {}
    for margin_from in ("cosine", "prediction"):
        features, net, objective = _objective(margin_from=margin_from, terms="align",
                                              clean_set="union")
        objective.division = np.ones(features.n_pairs)  # every pair in the hinge
        torch.manual_seed(1)
        objective.loss(net, step, 0)
        aligns[margin_from] = objective.sums["align"]
    torch.manual_seed(1)  # the same draws (augmentation) as the loss's forward
    batch = features.batch(step, "cpu")
    with torch.no_grad():
        vs = net.matcher.split_images(*batch.images)[1]
        ts = net.matcher.split_texts(*batch.texts)[1]
        sims = torch.nn.functional.normalize(vs, dim=-1) @ torch.nn.functional.normalize(ts,
                                                                                         dim=-1).T
        mask = negative_mask(batch.image_group, batch.text_group)
        labels = {"cosine": sims.diagonal().clamp(0.0, 1.0),
                  "prediction": adaptive_prediction(sims, mask, 0.2)}
        for margin_from, label in labels.items():
            expected = mean_hinge(sims, mask, soft_margin(label, 0.2, 10.0)).sum()
            assert math.isclose(aligns[margin_from], float(expected), rel_tol=1e-4)
    assert not math.isclose(aligns["cosine"], aligns["prediction"], rel_tol=1e-3)


def test_disncl_passes_the_conformance_check_at_its_defaults():
    # on a corpus of its measured minimum (min_pairs), as check_method draws it by default
    result = check_method(DisNCL())
    assert len(result.clean_prob) == DisNCL.min_pairs
