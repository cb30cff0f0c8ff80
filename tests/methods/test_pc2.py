import numpy as np
import pytest
import torch

from ncclean.evaluate.detection import detection_metrics
from ncclean.methods.base import Context
from ncclean.methods.pc2 import PC2, Classified, PseudoClassify, kl_divergence, n_classes_for
from ncclean.models.matcher import Ensemble, build_matcher
from ncclean.testing import check_method, tiny_features

SMALL = dict(warmup_epochs=2, epochs=2, batch_size=32, pool_size=64, noisy_from=0.0)
COLUMNS = {"pc2_loss", "pc2_sim", "pc2_label", "pc2_osc_kl", "pc2_w_osc", "pc2_class_img",
           "pc2_class_txt"}


def test_passes_the_conformance_suite():
    result = check_method(PC2(**(SMALL | dict(warmup_epochs=6, batch_size=16, lr=3e-3))), pairs=200)
    assert set(result.columns) == COLUMNS
    assert result.donor_space is not None and result.donor_space.min_score == 0.5
    assert result.report["n_classes"] == 5  # 100 images: max(2, 100 // 20)
    assert np.isfinite(result.columns["pc2_osc_kl"]).all()
    label, prob = result.columns["pc2_label"], result.clean_prob
    assert (label >= prob - 1e-12).all() and (label <= 1).all()  # rectification only raises


def test_finds_injected_noise_on_a_synthetic_corpus():
    features, config, truth = tiny_features(n_images=60, captions_per_image=3, noise=0.4)
    result = PC2(warmup_epochs=6, epochs=6, batch_size=32, lr=5e-4).fit(
        features, Context(seed=0, matcher_config=config))
    assert detection_metrics(truth[features.rows], result.clean_prob).auroc > 0.75
    assert len(np.unique(result.columns["pc2_class_img"])) > 1  # the classes did not collapse


def test_chinese_captions_score_as_well_as_english():
    aurocs = {}
    for lang in ("en", "zh"):
        features, config, truth = tiny_features(n_images=60, captions_per_image=3, noise=0.4,
                                                lang=lang)
        result = PC2(warmup_epochs=6, epochs=6, batch_size=32, lr=5e-4).fit(
            features, Context(seed=0, matcher_config=config))
        aurocs[lang] = detection_metrics(truth[features.rows], result.clean_prob).auroc
    assert aurocs["zh"] > 0.75 and abs(aurocs["zh"] - aurocs["en"]) < 0.1, aurocs


def test_class_count_rule():
    assert n_classes_for(29_000, None) == 128
    assert n_classes_for(1_000, None) == 50
    assert n_classes_for(10, None) == 2
    assert n_classes_for(10, 7) == 7


def test_kl_direction_and_zero_for_equal_predictions():
    p = np.array([[0.9, 0.1], [0.5, 0.5]])
    q = np.array([[0.9, 0.1], [0.9, 0.1]])
    kl = kl_divergence(p, q)
    assert kl[0] == pytest.approx(0, abs=1e-6)
    assert kl[1] == pytest.approx(0.5 * np.log(0.5 / 0.9) + 0.5 * np.log(0.5 / 0.1), rel=1e-5)


def test_entropy_term_spreads_the_batch_over_classes():
    # Minimising lambda_ent * sum(pbar log pbar) must raise the entropy of the batch mean.
    features, config, _ = tiny_features(n_images=8)
    member = Classified(build_matcher(config, seed=0), n_classes=4)
    objective = PseudoClassify(features, PC2(lambda_pse=0.0), 1, 1, "cpu", 0)
    images = torch.randn(16, 64)
    images = images / images.norm(dim=1, keepdim=True)
    optimizer = torch.optim.SGD(member.head.parameters(), lr=0.5)

    @torch.no_grad()
    def entropy():
        mean = torch.softmax(member.head(images), 1).mean(0)
        return float(-(mean * mean.log()).sum())

    before = entropy()
    for _ in range(30):
        optimizer.zero_grad()
        objective.classification(member, images, images).backward()
        optimizer.step()
    assert entropy() > before
    assert entropy() == pytest.approx(np.log(4), abs=0.05)


def test_rectification_formula():
    objective = PseudoClassify(tiny_features(n_images=8)[0], PC2(), 1, 1, "cpu", 0)
    w = np.array([0.6, 0.6, 0.2])
    w_osc = np.array([0.9, 0.4, 0.5])
    assert objective.rectified(w, w_osc) == pytest.approx([0.6 + 0.4 * 0.9, 0.6, 0.2 + 0.8 * 0.5])


def test_model_wraps_matchers_and_returns_them_plain():
    features, config, _ = tiny_features(n_images=8)
    ensemble = Ensemble([build_matcher(config, 0), build_matcher(config, 1)])
    method = PC2()
    model = method._model(ensemble, features, Context(seed=0, matcher_config=config))
    assert all(isinstance(m, Classified) for m in model.members)
    plain = method._matcher(model)
    assert plain.members[0] is ensemble.members[0]


def test_ncr_rectification_trains_and_finds_noise():
    features, config, truth = tiny_features(n_images=60, captions_per_image=3, noise=0.4)
    result = PC2(warmup_epochs=6, epochs=6, batch_size=32, lr=5e-4, rectify="ncr").fit(
        features, Context(seed=0, matcher_config=config))
    assert detection_metrics(truth[features.rows], result.clean_prob).auroc > 0.75


def test_unknown_rectification_is_a_bad_option():
    from ncclean.errors import BadOptionError

    with pytest.raises(BadOptionError, match="rectify"):
        PC2(**SMALL, rectify="both")


@pytest.mark.parametrize("head_gradient", [True, False])
def test_head_gradient_decides_whether_classification_trains_the_embeddings(head_gradient):
    features, config, _ = tiny_features(n_images=8)
    member = Classified(build_matcher(config, seed=0), n_classes=4)
    objective = PseudoClassify(features, PC2(head_gradient=head_gradient), 1, 1, "cpu", 0)
    images = torch.randn(16, 64, requires_grad=True)
    texts = torch.randn(16, 64, requires_grad=True)
    objective.classification(member, images, texts).backward()
    assert all(p.grad is not None for p in member.head.parameters())  # the head always learns
    assert (images.grad is not None) == head_gradient
    assert texts.grad is None  # the caption's class is a label: never a gradient


def test_a_detached_head_is_clipped_apart_from_its_matcher():
    from ncclean.train.loop import _clip_groups

    features, config, _ = tiny_features(n_images=8)
    for clip_apart, expected in ((False, 2), (True, 4)):
        ensemble = Ensemble([Classified(build_matcher(config, k), 4, clip_apart=clip_apart)
                             for k in range(2)])
        groups = _clip_groups(ensemble)
        assert len(groups) == expected
        assert sum(len(g) for g in groups) == len(list(ensemble.parameters()))


def test_pseudo_captions_train_the_same_on_several_threads():
    # Indexing's backward added the gradients of repeated donors in a varying order on two
    # threads: two runs of pc2 with one seed ended with different scores.
    import torch.nn.functional as F

    from ncclean.models.features import Batch

    features, config, _ = tiny_features(n_images=8)
    member = Classified(build_matcher(config, seed=0), n_classes=4)
    objective = PseudoClassify(features, PC2(), 1, 1, "cpu", 0)
    rows = 2 * 32_768 // member.embed_dim  # enough for torch to split the work over threads
    generator = torch.Generator().manual_seed(0)
    clean_images, noisy_images, texts = (
        F.normalize(torch.randn(rows, member.embed_dim, generator=generator), dim=1)
        for _ in range(3))
    texts.requires_grad_()
    groups = torch.arange(rows)
    noisy = Batch(pairs=np.arange(rows), images=(), texts=(), image_group=groups + rows,
                  text_group=groups + rows)
    threads, grads = torch.get_num_threads(), []
    torch.set_num_threads(2)
    try:
        for _ in range(10):
            texts.grad = None
            objective.pseudo_caption_loss(member, noisy, clean_images, texts, groups,
                                          noisy_images).backward()
            grads.append(texts.grad.clone())
    finally:
        torch.set_num_threads(threads)
    assert int((grads[0].abs().sum(1) > 0).sum()) < rows  # some captions are donors twice
    assert all(torch.equal(grad, grads[0]) for grad in grads)
