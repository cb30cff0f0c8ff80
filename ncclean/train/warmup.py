"""NCR's warm-up (Huang et al., NeurIPS 2021, Eq. 1-2): two matchers trained on every pair with
the mean hinge loss over in-batch negatives, before any division of the data.

:class:`WarmUp` is the objective; ``gmm`` (and through it ``pc2``) extends it with co-division,
and ``clip`` and ``sdd`` call :func:`warm_up` for a matcher that has seen the corpus where no
pretrained model exists.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ncclean.models.features import Batch, Features
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.losses import mean_hinge

WARMUP_STEPS = 320  # optimiser steps of the warm-up rule (one epoch with frozen image vectors)
HEAD_WARMUP_EPOCHS = 1  # a head on fixed image vectors, at every size (gmm.schedule)


def warmup_epochs_for(n_pairs: int, batch_size: int, frozen_images: bool = False) -> int:
    """``clip(round(320 / steps_per_epoch), 1, 10)`` epochs; one with ``frozen_images``:
    see :func:`ncclean.methods.gmm.schedule`."""
    if frozen_images:
        return HEAD_WARMUP_EPOCHS
    steps_per_epoch = max(1, math.ceil(n_pairs / batch_size))
    return int(np.clip(round(WARMUP_STEPS / steps_per_epoch), 1, 10))


def cycled_batches(indices: np.ndarray, batch_size: int, rng: np.random.Generator,
                   count: int) -> list[np.ndarray]:
    """``count`` batches of ``indices`` drawn by cycling through reshuffles of them (a short
    last batch is filled from the next reshuffle)."""
    if len(indices) == 0:
        return [indices] * count
    out: list[np.ndarray] = []
    order = rng.permutation(indices)
    position = 0
    for _ in range(count):
        batch = order[position:position + batch_size]
        position += batch_size
        if len(batch) < batch_size and len(indices) > len(batch):
            order = rng.permutation(indices)
            position = batch_size - len(batch)
            batch = np.concatenate([batch, order[:position]])
        out.append(batch)
    return out


def encode(member: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch's image and caption embeddings by ``member``, ``(B, d)`` each (images first: the
    order the towers draw their random augmentations in)."""
    return member.encode_images(*batch.images), member.encode_texts(*batch.texts)


class WarmUp(Objective):
    """The warm-up of an ensemble of matchers (usually NCR's two), each on its own shuffle.

    Subclasses add a term to every member's loss with :meth:`extra_loss` (PC²'s
    pseudo-classification) and continue after ``warmup`` epochs (NCR's co-division).
    """

    stage = "warm-up"

    def __init__(self, features: Features, margin: float, batch_size: int, device: str,
                 warmup: int):
        self.features, self.margin, self.batch_size = features, margin, batch_size
        self.device, self.warmup = device, warmup

    def steps(self, epoch: int, rng: np.random.Generator) -> Iterator[Any]:
        n, b = self.features.n_pairs, self.batch_size
        count = math.ceil(n / b)
        everyone = np.arange(n)
        for pair in zip(cycled_batches(everyone, b, rng, count),
                        cycled_batches(everyone, b, rng, count)):
            yield "warm-up", pair

    def loss(self, model: Any, step: Any, epoch: int) -> torch.Tensor:
        _, parts = step
        total = torch.zeros((), device=self.device)
        for member, pairs in zip(model.members, parts):
            batch = self.features.batch(pairs, self.device)
            images, texts = encode(member, batch)
            mask = batch.negatives
            total = total + mean_hinge(images @ texts.T, mask, self.margin).sum()
            extra = self.extra_loss(member, images, texts)
            if extra is not None:
                total = total + extra
        return total

    def extra_loss(self, member: torch.nn.Module, images: torch.Tensor,
                   texts: torch.Tensor) -> torch.Tensor | None:
        """Hook: a term added to ``member``'s loss on a batch, given the batch's image and
        caption embeddings ``(B, d)``; ``None`` adds nothing."""
        return None


def warm_up(features: Features, context: Any, epochs: int | None, batch_size: int, lr: float,
            margin: float = 0.2, grad_clip: float = 2.0) -> tuple[Any, int]:
    """Two fresh matchers of ``context`` (a :class:`ncclean.methods.base.Context`) warmed up on
    the corpus for ``epochs`` (``None``: :func:`warmup_epochs_for`), as one
    :class:`~ncclean.models.matcher.Ensemble` in eval mode, and the number of epochs."""
    from ncclean.models.matcher import Ensemble

    if epochs is None:
        epochs = warmup_epochs_for(features.n_pairs, batch_size, context.frozen_images)
    model = Ensemble([context.new_matcher(0), context.new_matcher(1)])
    objective = WarmUp(features, margin, batch_size, context.device, epochs)
    config = TrainConfig.from_context(context, epochs=epochs, lr=lr, grad_clip=grad_clip)
    train(model, objective, config, context.progress)
    model.eval()
    return model, epochs


def warmed_matcher(features: Features, context: Any, epochs: int | None, batch_size: int,
                   lr: float) -> tuple[Any, Any, str]:
    """The similarity source of a method where no pretrained model exists (``clip``, ``sdd``):
    :func:`warm_up`'s ensemble, its :class:`~ncclean.train.scoring.Embeddings` of the corpus
    and a description for the sidecar."""
    from ncclean.train.scoring import embed, kept_dtype

    model, epochs = warm_up(features, context, epochs, batch_size, lr)
    embeddings = embed(model, features, context.device, dtype=kept_dtype(features))
    return model, embeddings, f"matcher warmed up for {epochs} epochs"


def starting_matcher(context: Any) -> tuple[Any, str]:
    """The matcher a method starts from when it needs no warm-up: the loaded one, or a whole
    pretrained CLIP (``--finetune full``); with a description."""
    if context.initial is not None:
        return context.initial, "loaded matcher"
    from ncclean.models.matcher import build_matcher

    config = context.matcher_config
    weights = config.clip_pretrained or config.clip_checkpoint
    return build_matcher(config, context.seed).to(context.device), \
        f"CLIP {config.clip_model} ({weights}), the whole model"
