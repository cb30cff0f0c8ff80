import math

import numpy as np
import pytest
import torch
from torch import nn

from ncclean.train.loop import Objective, TrainConfig, train


class Regression(Objective):
    """Fit y = 3x - 1 with batches drawn from the epoch's generator."""

    stage = "fitting"

    def __init__(self):
        self.x = torch.linspace(-1, 1, 64).unsqueeze(1)
        self.y = 3 * self.x - 1
        self.seen = np.zeros(1)

    def steps(self, epoch, rng):
        order = rng.permutation(64)
        return [order[i:i + 16] for i in range(0, 64, 16)]

    def loss(self, model, step, epoch):
        return ((model(self.x[step]) - self.y[step]) ** 2).mean()

    def end_epoch(self, model, epoch):
        self.seen += 1
        return {"seen": float(self.seen[0])}

    def state(self):
        return {"seen": self.seen}

    def load_state(self, state):
        self.seen = state["seen"].copy()


def fresh_model():
    torch.manual_seed(0)
    return nn.Linear(1, 1)


def test_loss_goes_down_and_reports_per_epoch():
    calls = []
    history = train(fresh_model(), Regression(), TrainConfig(epochs=30, lr=0.05),
                    progress=lambda stage, done, total, note="": calls.append((stage, done, note)))
    assert history[-1]["loss"] < 0.01 * history[0]["loss"]
    assert history[-1]["seen"] == 30.0 and history[0]["steps"] == 4
    assert calls[0][0] == "fitting 1/30" and calls[-1][2].startswith("loss ")


def test_operations_are_counted_only_when_asked_and_the_counted_step_is_not_timed(monkeypatch):
    monkeypatch.delenv("NCCLEAN_COUNT_FLOPS", raising=False)
    plain = train(fresh_model(), Regression(), TrainConfig(epochs=2, lr=0.05))
    assert all("gflop" not in epoch and "timed_steps" not in epoch for epoch in plain)
    monkeypatch.setenv("NCCLEAN_COUNT_FLOPS", "1")
    counted = train(fresh_model(), Regression(), TrainConfig(epochs=2, lr=0.05))
    # 16 rows x 1 x 1 forward, the weight's gradient in backward: 2 * 16 each; 3 timed steps.
    assert [epoch["timed_steps"] for epoch in counted] == [3, 3]
    assert counted[0]["gflop"] == pytest.approx(3 * 64 / 1e9)
    assert [epoch["loss"] for epoch in counted] == [epoch["loss"] for epoch in plain]


def test_learning_rate_drops():
    config = TrainConfig(epochs=5, lr=1.0, lr_drop_epochs=(2, 4))
    assert [config.lr_at(e) for e in range(5)] == [1.0, 1.0, 0.1, 0.1, 0.010000000000000002]


def test_cosine_decay_goes_from_the_rate_to_zero_step_by_step(monkeypatch):
    config = TrainConfig(epochs=2, lr=2.0, decay_steps=8, lr_drop_epochs=(1,))
    assert config.lr_at(0, 0) == 2.0 and config.lr_at(0, 4) == pytest.approx(1.0)
    assert config.lr_at(1, 4) == pytest.approx(0.1) and config.lr_at(1, 8) == 0.0
    rates, original = [], torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        rates.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    train(fresh_model(), Regression(), TrainConfig(epochs=2, lr=1.0, decay_steps=8))
    assert len(rates) == 8 and rates[0] == 1.0  # 4 steps per epoch
    assert rates == sorted(rates, reverse=True)
    assert rates[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))


def test_resume_ends_with_the_same_weights(tmp_path):
    straight = fresh_model()
    train(straight, Regression(), TrainConfig(epochs=6, lr=0.05, seed=3))

    partial = fresh_model()
    objective = Regression()
    train(partial, objective, TrainConfig(epochs=3, lr=0.05, seed=3, checkpoint_dir=tmp_path))
    resumed = fresh_model()  # a new process: fresh weights, state from the checkpoint
    objective = Regression()
    history = train(resumed, objective, TrainConfig(epochs=6, lr=0.05, seed=3,
                                                    checkpoint_dir=tmp_path, resume=True))
    assert [h["epoch"] for h in history] == list(range(6))
    assert objective.seen[0] == 6
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_resuming_another_models_checkpoint_is_a_clear_error(tmp_path):
    from ncclean.errors import BadOptionError

    train(fresh_model(), Regression(), TrainConfig(epochs=1, checkpoint_dir=tmp_path))
    with pytest.raises(BadOptionError, match="does not fit this run's model"):
        train(nn.Sequential(nn.Linear(1, 1)), Regression(),
              TrainConfig(epochs=2, checkpoint_dir=tmp_path, resume=True))


def test_gradient_clipping_is_applied():
    model = fresh_model()

    class Huge(Regression):
        def loss(self, model, step, epoch):
            return 1e6 * super().loss(model, step, epoch)

    before = [p.detach().clone() for p in model.parameters()]
    train(model, Huge(), TrainConfig(epochs=1, lr=1.0, grad_clip=1e-6))
    # Adam normalises steps, so compare with an unclipped run: clipping changes the update.
    unclipped = fresh_model()
    train(unclipped, Huge(), TrainConfig(epochs=1, lr=1.0, grad_clip=0.0))
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), before))
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(),
                                                     unclipped.parameters()))


def test_train_config_from_context_takes_the_run_and_the_methods_settings(tmp_path):
    from ncclean.methods.base import Context

    context = Context(seed=7, device="cpu", checkpoint_dir=tmp_path, resume=True)
    config = TrainConfig.from_context(context, epochs=3, lr=1e-3)
    assert (config.seed, config.device, config.checkpoint_dir, config.resume) == \
        (7, "cpu", tmp_path, True)
    assert (config.epochs, config.lr) == (3, 1e-3)
    assert TrainConfig.from_context(context, epochs=1, seed=50, checkpoint_dir=None).seed == 50


def test_clipping_is_clip_grad_norm_to_the_bit():
    from ncclean.train.loop import _clip

    for scale in (1e-3, 1e3):  # within the limit (nothing to do) and beyond it
        torch.manual_seed(0)
        ours = [nn.Parameter(torch.randn(5, 3)), nn.Parameter(torch.randn(7))]
        theirs = [nn.Parameter(p.detach().clone()) for p in ours]
        for a, b in zip(ours, theirs):
            a.grad = torch.randn_like(a) * scale
            b.grad = a.grad.clone()
        _clip(ours, 2.0)
        nn.utils.clip_grad_norm_(theirs, 2.0)
        for a, b in zip(ours, theirs):
            assert torch.equal(a.grad, b.grad)
        total = float(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in ours])))
        assert total == pytest.approx(2.0, rel=1e-4) if scale > 1 else total < 0.1
