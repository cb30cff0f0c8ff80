"""The one training loop every method uses.

A method never writes a loop: it writes an :class:`Objective` (which batches to draw each epoch,
the loss of one step, and its per-epoch bookkeeping such as re-fitting a mixture) and hands it to
:func:`train` with the model. The loop owns the rest: the AdamW optimiser, its learning-rate
drops and optional cosine decay, gradient clipping, seeding, the device, progress with the
running loss, and per-epoch checkpoints that ``resume`` continues from.

Randomness is derived from ``(seed, epoch)``: epoch ``k`` draws the same batches whether the run
started at epoch 0 or resumed at ``k``, so a resumed run ends with the same weights.
"""

from __future__ import annotations

import json
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ncclean.errors import BadOptionError
from ncclean.progress import Progress, no_progress
from ncclean.seeds import derive_seed, epoch_rng


@dataclass
class TrainConfig:
    """How to optimise; methods fill it from their parameters (paper defaults)."""

    epochs: int
    lr: float = 2e-4
    lr_drop_epochs: tuple[int, ...] = ()  # the rate is multiplied by 0.1 from each of these on
    decay_steps: int = 0  # > 0: the rate follows a cosine from lr to 0 over this many steps
    weight_decay: float = 0.0
    grad_clip: float = 2.0
    seed: int = 0
    device: str = "cpu"
    checkpoint_dir: Path | None = None
    resume: bool = False

    @classmethod
    def from_context(cls, context: Any, **settings: Any) -> TrainConfig:
        """The config of a method's training in the run ``context`` (a
        :class:`ncclean.methods.base.Context`: its seed, device, checkpoint folder and resume
        flag), with the method's own ``settings`` (``epochs``, ``lr``, ...); a setting named
        here wins over the context's (CRCL seeds and checkpoints each piece apart)."""
        run = {"seed": context.seed, "device": context.device,
               "checkpoint_dir": context.checkpoint_dir, "resume": context.resume}
        return cls(**(run | settings))

    def lr_at(self, epoch: int, step: int = 0) -> float:
        """The rate in ``epoch`` at optimiser step ``step`` (counted from the start of
        training): the drops, times the cosine decay when ``decay_steps`` is set."""
        rate = self.lr * 0.1 ** sum(epoch >= drop for drop in self.lr_drop_epochs)
        if self.decay_steps:
            rate *= 0.5 * (1 + math.cos(math.pi * min(step, self.decay_steps) / self.decay_steps))
        return rate


class Objective(ABC):
    """What a method plugs into :func:`train`."""

    stage: str = "training"

    def begin_epoch(self, model: nn.Module, epoch: int) -> None:  # noqa: B027 - optional hook
        """Bookkeeping before the epoch's steps (e.g. divide the data with a mixture)."""

    @abstractmethod
    def steps(self, epoch: int, rng: np.random.Generator) -> Iterable[Any]:
        """The epoch's steps, each whatever :meth:`loss` needs (usually index arrays)."""

    @abstractmethod
    def loss(self, model: nn.Module, step: Any, epoch: int) -> torch.Tensor:
        """The scalar loss of one step; the model is in training mode."""

    def end_epoch(self, model: nn.Module, epoch: int) -> dict[str, float]:
        """Bookkeeping after the epoch; returns numbers worth reporting."""
        return {}

    def state(self) -> dict[str, np.ndarray]:
        """Arrays to checkpoint so that a resumed run continues exactly (e.g. soft labels)."""
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:  # noqa: B027 - optional hook
        """Restore what :meth:`state` returned."""


def _fusable(parameters: Sequence[torch.Tensor]) -> bool:
    """Whether torch's fused AdamW kernel can step ``parameters``: one pass over each
    parameter instead of a dozen elementwise kernels (``benchmarks/results/throughput.md``).
    Its rounding differs from the unfused update's; the same seed still gives the same
    bytes."""
    return bool(parameters) and all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float64,
                                                         torch.float16, torch.bfloat16)
        for p in parameters)


def _clip(parameters: list[nn.Parameter], max_norm: float) -> None:
    """``clip_grad_norm_``, without its multiplication of every gradient by exactly 1 when the
    norm is within ``max_norm`` (the same numbers, one pass fewer over the gradients). Only
    on the CPU, where the test costs no device synchronisation."""
    if not parameters or parameters[0].device.type != "cpu":
        nn.utils.clip_grad_norm_(parameters, max_norm)
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    total = nn.utils.get_total_norm(grads)
    if bool(max_norm / (total + 1e-6) < 1.0):  # clip_grad_norm_'s coefficient, clamped at 1
        nn.utils.clip_grads_with_norm_(parameters, max_norm, total)


def _clip_groups(model: nn.Module) -> list[list[nn.Parameter]]:
    """Gradient clipping applies per network: each member of an ensemble (NCR's A and B) is
    clipped on its own, as when each has its own optimiser. A member with a ``clip_groups()``
    method names its own groups (pc2's detached classifier head is clipped apart from its
    matcher)."""
    members: Sequence[nn.Module] = getattr(model, "members", None) or [model]
    groups = []
    for member in members:
        split = getattr(member, "clip_groups", None)
        for params in split() if callable(split) else [member.parameters()]:
            groups.append([p for p in params if p.requires_grad])
    return groups


def train(model: nn.Module, objective: Objective, config: TrainConfig,
          progress: Progress = no_progress) -> list[dict[str, float]]:
    """Optimise ``model`` for ``config.epochs`` epochs of ``objective``; returns one report per
    epoch (mean loss, seconds, and whatever the objective's ``end_epoch`` adds)."""
    model.to(config.device)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay,
                                  fused=_fusable(parameters) or None)
    history: list[dict[str, float]] = []
    start = 0
    if config.checkpoint_dir is not None and config.resume:
        start, history = _load_checkpoint(config.checkpoint_dir, model, optimizer, objective)

    groups = _clip_groups(model)
    counting = counting_flops()
    step_count = sum(int(report["steps"]) for report in history)
    for epoch in range(start, config.epochs):
        began = time.perf_counter()
        torch.manual_seed(derive_seed(config.seed, "epoch", epoch))
        objective.begin_epoch(model, epoch)
        steps = list(objective.steps(epoch, epoch_rng(config.seed, epoch)))
        model.train()
        total, label = 0.0, f"{objective.stage} {epoch + 1}/{config.epochs}"
        step_flop, untimed, stepping = 0, 0.0, time.perf_counter()
        for done, step in enumerate(steps, start=1):
            began_step = time.perf_counter()
            with _FlopCount(counting and done == 2) as counted:  # step 1 may warm caches
                loss = objective.loss(model, step, epoch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            step_flop = counted.flop or step_flop
            if config.grad_clip:
                for group in groups:
                    _clip(group, config.grad_clip)
            for group in optimizer.param_groups:
                group["lr"] = config.lr_at(epoch, step_count)
            optimizer.step()
            step_count += 1
            total += float(loss.detach())
            if counted.active:
                untimed += time.perf_counter() - began_step
            progress(label, done, len(steps), f"loss {total / done:.4f}")
        report = {"epoch": epoch, "loss": total / max(1, len(steps)), "steps": len(steps)}
        if counting:  # the counted step runs under a dispatch mode: timed apart, left out
            timed = len(steps) - (len(steps) >= 2)
            report |= {"timed_steps": timed, "gflop": step_flop * timed / 1e9,
                       "counted_seconds": untimed}
        report["step_seconds"] = time.perf_counter() - stepping - untimed
        report |= objective.end_epoch(model, epoch)
        report["seconds"] = time.perf_counter() - began
        history.append(report)
        if config.checkpoint_dir is not None:
            _save_checkpoint(config.checkpoint_dir, model, optimizer, objective, epoch, history)
    return history


def counting_flops() -> bool:
    """Whether ``NCCLEAN_COUNT_FLOPS`` asks the loop to count a step's operations per epoch.

    Benchmarks set it (``benchmarks/kernels/throughput.py``, ``benchmarks/speed.py``): each epoch's
    report then carries ``gflop`` and ``timed_steps``, and its ``step_seconds`` leave out the
    counted step, which runs 1.6-4x slower under the counter. Off by default: a user's run
    would pay that slower step each epoch for a number it does not use."""
    return os.environ.get("NCCLEAN_COUNT_FLOPS", "0").strip().lower() in ("1", "true", "yes", "on")


class _FlopCount:
    """Counts the floating-point operations (matmuls, convolutions; forward and backward) of the
    code inside it with torch's ``FlopCounterMode`` when ``active``; ``flop`` is 0 otherwise.
    The loop counts one step per epoch and multiplies, so throughput can be set against the
    machine's matmul ceiling (``benchmarks/speed.py``)."""

    def __init__(self, active: bool):
        self.active, self.flop, self._mode = active, 0, None

    def __enter__(self) -> _FlopCount:
        if self.active:
            from torch.utils.flop_counter import FlopCounterMode

            self._mode = FlopCounterMode(display=False)
            self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self.flop = self._mode.get_total_flops()


# ----------------------------------------------------------------------------------- checkpoints

_STATE = "training-state.safetensors"


def _save_checkpoint(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                     objective: Objective, epoch: int, history: list[dict[str, float]]) -> None:
    """Model, optimiser and objective state after ``epoch``, as safetensors plus JSON."""
    from safetensors.torch import save_file

    from ncclean.data.parquet import atomic_path, write_json

    directory.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    optimizer_state = optimizer.state_dict()
    for index, slots in optimizer_state["state"].items():
        for slot, value in slots.items():
            tensors[f"optimizer.{index}.{slot}"] = torch.as_tensor(value).detach().cpu()
    for name, value in objective.state().items():
        tensors[f"objective.{name}"] = torch.as_tensor(np.ascontiguousarray(value))
    with atomic_path(directory / _STATE) as tmp:
        save_file(tensors, str(tmp))
    write_json(directory / f"{_STATE}.json", {
        "epoch": epoch,
        "history": history,
        "param_groups": optimizer_state["param_groups"],
    })


def _load_checkpoint(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                     objective: Objective) -> tuple[int, list[dict[str, float]]]:
    """Restore the state saved by :func:`_save_checkpoint`; returns the epoch to start from."""
    from safetensors.torch import load_file

    meta_path = directory / f"{_STATE}.json"
    if not meta_path.exists():
        return 0, []
    meta = json.loads(meta_path.read_text())
    tensors = load_file(str(directory / _STATE))
    try:
        model.load_state_dict({k[len("model."):]: v for k, v in tensors.items()
                               if k.startswith("model.")})
    except RuntimeError as error:  # another method, other settings, or an older ncclean
        raise BadOptionError(
            f"--resume: the checkpoint in {directory} does not fit this run's model (another "
            f"method, other settings or another ncclean version: "
            f"{str(error).splitlines()[0].rstrip(':. ')}); drop --resume or use another "
            "--checkpoint-dir") from None
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, slot = key.split(".", 2)
            state.setdefault(int(index), {})[slot] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    objective.load_state({k[len("objective."):]: v.numpy() for k, v in tensors.items()
                          if k.startswith("objective.")})
    return int(meta["epoch"]) + 1, list(meta["history"])


def describe(config: TrainConfig) -> dict[str, Any]:
    """The config as JSON-ready values, for sidecars."""
    payload = asdict(config)
    payload["checkpoint_dir"] = str(config.checkpoint_dir) if config.checkpoint_dir else None
    return payload
