import numpy as np

from ncclean.evaluate.detection import detection_metrics
from ncclean.methods.base import Context
from ncclean.methods.gmm import GMM, schedule
from ncclean.testing import check_method, tiny_features

SMALL = dict(warmup_epochs=1, epochs=2, batch_size=32, pool_size=64)


def test_passes_the_conformance_suite():
    result = check_method(GMM(warmup_epochs=6, epochs=2, batch_size=16, pool_size=64, lr=3e-3),
                          pairs=200)
    assert set(result.columns) == {"gmm_loss", "gmm_sim", "gmm_label"}
    assert len(result.report["mixtures"]) == 2 and 0 <= result.noise_rate <= 1


def test_finds_injected_noise_on_a_synthetic_corpus():
    features, config, truth = tiny_features(n_images=60, captions_per_image=3, noise=0.4)
    result = GMM(warmup_epochs=6, epochs=6, batch_size=32, lr=5e-4).fit(
        features, Context(seed=0, matcher_config=config))
    metrics = detection_metrics(truth[features.rows], result.clean_prob)
    assert metrics.auroc > 0.75, metrics  # chance is 0.5
    noisy = truth[features.rows]
    assert result.columns["gmm_loss"][noisy].mean() > result.columns["gmm_loss"][~noisy].mean()
    assert result.columns["gmm_sim"][noisy].mean() < result.columns["gmm_sim"][~noisy].mean()


def test_epoch_rule_scales_with_corpus_size():
    assert schedule(8_000, 128, None, None) == (5, 20)
    assert schedule(500, 128, None, None) == (10, 40)
    assert schedule(1_000_000, 128, None, None) == (1, 4)
    assert schedule(8_000, 128, 2, 7) == (2, 7)
    # a head on fixed image vectors memorises with every pass: 1 + 4 epochs at every size
    for n_pairs in (300, 7_057, 8_000, 1_000_000):
        assert schedule(n_pairs, 128, None, None, frozen_images=True) == (1, 4)
    assert schedule(8_000, 128, 2, 7, frozen_images=True) == (2, 7)


def test_final_mean_averages_the_divisions():
    features, config, _ = tiny_features(n_images=20)
    last = GMM(**SMALL, final="last").fit(features, Context(seed=1, matcher_config=config))
    mean = GMM(**SMALL).fit(features, Context(seed=1, matcher_config=config))
    assert not np.array_equal(last.clean_prob, mean.clean_prob)
    assert np.array_equal(last.columns["gmm_loss"], mean.columns["gmm_loss"])


def _co_training_loss_and_grads(same_in_eval: bool, method):
    """One co-training step's loss and gradients on heads, with the shortcuts for heads
    (``same_in_eval``) on or off."""

    from ncclean.methods.gmm import CoDivide
    from ncclean.models.matcher import Ensemble
    from ncclean.models.towers import VectorMLP
    from ncclean.testing import vector_features

    features, config, _ = vector_features(n_images=40)
    context = Context(seed=1, matcher_config=config)
    model = Ensemble([context.new_matcher(0), context.new_matcher(1)])
    model = method._model(model, features, context)
    objective = method._objective(features, 1, 2, context)
    assert isinstance(objective, CoDivide)
    objective.divide(model)
    for module in model.modules():  # an instance attribute hides the heads' class answer
        if isinstance(module, VectorMLP):
            module.same_in_eval = same_in_eval
    step = next(iter(objective.steps(2, np.random.default_rng(0))))
    loss = objective.loss(model, step, 2)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_heads_take_the_shortcuts_with_the_same_loss_and_gradients():
    """With heads on fixed vectors a co-training step encodes the clean and noisy batches in one
    pass and reads the eval-mode predictions off the training forward: the same loss and
    gradients as the separate passes, up to float rounding."""
    from ncclean.methods.pc2 import PC2

    for method in (GMM(batch_size=16, noisy_from=0.0), PC2(batch_size=16, noisy_from=0.0)):
        fast, fast_grads = _co_training_loss_and_grads(True, method)
        slow, slow_grads = _co_training_loss_and_grads(False, method)
        assert fast.item() > 0 and np.isclose(fast.item(), slow.item(), rtol=1e-5)
        assert len(fast_grads) == len(slow_grads)
        for a, b in zip(fast_grads, slow_grads):
            assert np.allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


def test_noisy_pairs_never_join_a_small_corpus_by_default():
    from ncclean.methods.gmm import HEAD_EPOCHS, MAX_EPOCHS, CoDivide, noisy_from_rule
    from ncclean.methods.pc2 import PC2

    # 1,000 pairs run the 40-epoch cap; 8,000 pairs run 20 epochs, the authors' half
    assert schedule(1000, 128, None, None)[1] == MAX_EPOCHS
    assert noisy_from_rule(schedule(1000, 128, None, None)[1]) == 1.0
    assert noisy_from_rule(schedule(8000, 128, None, None)[1]) == 0.5
    assert noisy_from_rule(HEAD_EPOCHS) == 0.5  # heads on fixed vectors: 4 epochs
    # a value given is kept, and PC2 keeps the authors' 0.5 (its noisy term needs the pairs)
    assert GMM(noisy_from=0.25).noisy_from == 0.25 and PC2().noisy_from == 0.5
    assert GMM().noisy_from is None
    # the objective resolves the rule from the epochs it runs, and a value given wins
    features, _, _ = tiny_features(n_images=8)
    assert CoDivide(features, GMM(), 1, MAX_EPOCHS, "cpu", 0).use_noisy(1 + MAX_EPOCHS - 1) \
        is False
    assert CoDivide(features, GMM(), 1, 20, "cpu", 0).use_noisy(1 + 10) is True
    assert CoDivide(features, GMM(noisy_from=0.5), 1, MAX_EPOCHS, "cpu", 0).use_noisy(1 + 20)
