"""``gmm``: NCR, Noisy Correspondence Rectifier (Huang et al., NeurIPS 2021).

Two matchers A and B are warmed up on all pairs with the mean hinge loss ``L_w`` (Eq. 1-2). Then,
every epoch, each network's per-pair loss is fitted with a two-component GMM (Sec. 3.1) whose
low-mean posterior ``w`` divides the pairs into clean and noisy, and each network trains on the
*other's* division (co-divide). Labels are co-rectified (Eq. 4): a clean pair gets
``w + (1 - w) P_k``, a noisy pair ``(P_A + P_B) / 2``, with ``P`` the adaptive prediction (Eq. 5);
the label sets the margin of the hardest-negative hinge, ``alpha (m^y - 1) / (m - 1)`` (Eq. 6-7).
The final ``clean_prob`` is the mean of the two networks' posteriors.

Where this follows the authors' code rather than the paper, or departs from both:

- The division loss is measured against fixed negatives (``negatives="pool"``: a seeded pool of
  ``pool_size`` pairs; ``"batches"``: fixed seeded batches), not a reshuffled loader, so scores
  are deterministic (``ncclean.train.scoring``).
- Per-pair losses average over *valid* negatives: another caption of the same image, or the same
  caption text, is masked out of every in-batch and pool negative.
- Noisy pairs join the loss only in the second half of co-training (the code's
  ``epoch >= num_epochs // 2``; the paper is silent): ``noisy_from``.
- A and B step together on every batch (one loop, each clipped on its own) instead of A's whole
  epoch followed by B's; B's noisy labels therefore use A of the same step, not of epoch's end.
- Soft margins are per anchor in both directions (the digest's "paper-faithful port"), not the
  code's broadcast ``b x b`` margins.
- By default the soft margins apply to the mean hinge over all valid negatives
  (``robust_loss="mean"``), not to the hardest negative of Eq. 6 (``robust_loss="hardest"``).
  The paper's backbone starts co-training from a warm-up of thousands of steps; a matcher trained
  from scratch for a few hundred steps collapses under hardest negatives. Measured on clip art at
  50% noise (5 warm-up epochs): with ``hardest`` the division's AUROC fell from 0.895 to 0.79
  within two co-training epochs (one network's mixture estimated 81% noise); with ``mean`` it
  rose to 0.905 after ten. ``benchmarks/RESULTS.md`` has both.
- The reported ``gmm_label`` uses the adaptive prediction with ``tau`` taken over the whole corpus
  (the top 10% of pairs), since a final score should not depend on a random batch.
- Epoch counts scale with the corpus (:func:`schedule`): the paper's 5 + 40 epochs on F30K are
  45,000 optimiser steps, which a CPU cannot afford, and on small corpora the matcher memorises
  the noise long before that; a head on fixed image vectors memorises it sooner still, and gets
  a fifth of the steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from ncclean.methods.base import Context, Method, MethodResult
from ncclean.methods.mixture import MixtureFit, clean_split, fit_clean_posterior
from ncclean.models.features import Batch, Features
from ncclean.models.matcher import Ensemble
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.losses import (
    adaptive_prediction,
    hardest_negative_hinge,
    mean_hinge,
    negative_mask,
    relative_to_top,
    soft_margin,
)
from ncclean.train.scoring import embed, kept_dtype, pair_losses


def schedule(n_pairs: int, batch_size: int, warmup_epochs: int | None,
             epochs: int | None, frozen_images: bool = False) -> tuple[int, int]:
    """Warm-up and co-training epochs: given values are kept; missing ones follow the rule

    warm-up = ``clip(round(320 / steps_per_epoch), 1, 10)``,
    co-training = ``clip(round(1280 / steps_per_epoch), 4, 40)``,

    i.e. about 320 and 1,280 optimiser steps (5 and 20 epochs of 8,000 pairs in batches of 128),
    capped at the paper's COCO warm-up (10) and F30K length (40) for large corpora.

    With ``frozen_images`` (the image tower a head on fixed vectors) the step counts are a fifth,
    64 and 256: such a head learns from the first batch and memorises a small corpus's noise
    within a few epochs. Measured on clip art at 50% noise with ImageNet features
    (``benchmarks/RESULTS.md``, "A pretrained image tower"): a plain matcher's loss ranks noise
    at AUROC 0.928 after one epoch and 0.78 after twelve, and gmm ends at 0.72 under the
    320 + 1,280 rule against 0.945 with 1 + 5 epochs (the shorter rule on 7,057 pairs).
    """
    steps_per_epoch = max(1, math.ceil(n_pairs / batch_size))
    warmup_steps, co_steps = (64, 256) if frozen_images else (320, 1280)
    if warmup_epochs is None:
        warmup_epochs = int(np.clip(round(warmup_steps / steps_per_epoch), 1, 10))
    if epochs is None:
        epochs = int(np.clip(round(co_steps / steps_per_epoch), 4, 40))
    return warmup_epochs, epochs


def _batches(indices: np.ndarray, batch_size: int, rng: np.random.Generator,
             count: int) -> list[np.ndarray]:
    """``count`` batches drawn by cycling through reshuffles of ``indices``."""
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


def _similarity(member: torch.nn.Module, batch: Batch) -> torch.Tensor:
    return member.encode_images(*batch.images) @ member.encode_texts(*batch.texts).T


class CoDivide(Objective):
    """NCR's training as an :class:`Objective` over an :class:`Ensemble` of two matchers.

    ``divisions`` holds, after each co-training epoch's start, each network's posterior ``w`` and
    raw loss. PC2 extends this class (its loss adds terms; its bookkeeping adds a second mixture).
    """

    def __init__(self, features: Features, method: GMM, warmup: int, epochs: int,
                 device: str, seed: int):
        self.features = features
        self.m = method
        self.warmup = warmup
        self.epochs = epochs
        self.device = device
        self.seed = seed
        self.stage = "warm-up"
        self.posterior = np.ones((2, features.n_pairs))
        self.losses = np.zeros((2, features.n_pairs), dtype=np.float32)
        self.fits: list[MixtureFit | None] = [None, None]
        self.posterior_sum = np.zeros(features.n_pairs)
        self.divisions = 0

    # -- division -----------------------------------------------------------------------------

    def divide(self, model: Ensemble) -> None:
        """Each network's per-pair loss, mixture and clean posterior. One network's embeddings
        are held at a time (2 GB at a million pairs), shown to :meth:`observe`, then dropped."""
        for k, member in enumerate(model.members):
            embeddings = embed(member, self.features, self.device)
            self.observe(k, member, embeddings)
            self.losses[k] = pair_losses(
                embeddings, self.features, margin=self.m.margin, negatives=self.m.negatives,
                pool_size=self.m.pool_size, batch_size=self.m.batch_size, seed=self.seed)
            self.posterior[k], self.fits[k] = fit_clean_posterior(self.losses[k], "low",
                                                                  seed=self.seed)
            del embeddings  # or the next network's embeddings are made while these live: +2 GB

    def observe(self, k: int, member: torch.nn.Module, embeddings) -> None:  # noqa: B027
        """Hook: network ``k``'s embeddings of every image and caption at a division."""

    def begin_epoch(self, model: Ensemble, epoch: int) -> None:
        if epoch < self.warmup:
            self.stage = "warm-up"
            return
        self.stage = "co-training"
        self.divide(model)
        self.posterior_sum += self.posterior.mean(axis=0)
        self.divisions += 1

    # -- steps ---------------------------------------------------------------------------------

    def steps(self, epoch: int, rng: np.random.Generator) -> Iterator[Any]:
        n, b = self.features.n_pairs, self.m.batch_size
        if epoch < self.warmup:
            count = math.ceil(n / b)
            everyone = np.arange(n)
            for pair in zip(_batches(everyone, b, rng, count), _batches(everyone, b, rng, count)):
                yield "warm-up", pair
            return
        # Network k trains on the division of the other network (co-divide).
        splits = [clean_split(self.posterior[1 - k], self.m.p_threshold) for k in (0, 1)]
        count = max(1, max(math.ceil(split.sum() / b) for split in splits))
        streams = []
        for split in splits:
            clean, noisy = np.flatnonzero(split), np.flatnonzero(~split)
            streams.append(zip(_batches(clean, b, rng, count), _batches(noisy, b, rng, count)))
        yield from (("co-training", pair) for pair in zip(*streams))

    # -- loss ----------------------------------------------------------------------------------

    def loss(self, model: Ensemble, step: Any, epoch: int) -> torch.Tensor:
        kind, parts = step
        features, device, margin = self.features, self.device, self.m.margin
        total = torch.zeros((), device=device)
        if kind == "warm-up":
            for member, pairs in zip(model.members, parts):
                batch = features.batch(pairs, device)
                mask = negative_mask(batch.image_group, batch.text_group)
                total = total + mean_hinge(_similarity(member, batch), mask, margin).sum()
            return total

        for k, (clean, noisy) in enumerate(parts):
            member, other = model.members[k], model.members[1 - k]
            batch = features.batch(clean, device)
            label = self.clean_label(member, batch, clean, k)
            total = total + self.soft_loss(member, batch, label).sum()
            if self.use_noisy(epoch) and len(noisy):
                batch = features.batch(noisy, device)
                label = (self.predict(member, batch) + self.predict(other, batch)) / 2
                total = total + self.soft_loss(member, batch, label).sum()
        return total

    def clean_label(self, member: torch.nn.Module, batch: Batch, clean: np.ndarray,
                    k: int) -> torch.Tensor:
        """NCR's co-rectified label of network ``k``'s clean-set pairs, ``w + (1 - w) P(I, T)``
        with ``w`` the other network's clean posterior."""
        w = torch.as_tensor(self.posterior[1 - k][clean], dtype=torch.float32,
                            device=self.device)
        return w + (1 - w) * self.predict(member, batch)

    def use_noisy(self, epoch: int) -> bool:
        """Whether the noisy pairs join the loss in co-training epoch ``epoch``."""
        return epoch - self.warmup >= int(self.m.noisy_from * self.epochs)

    @torch.no_grad()
    def predict(self, member: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """P(I, T) of Eq. 5 for the batch, by ``member`` in eval mode."""
        member.eval()
        try:
            mask = negative_mask(batch.image_group, batch.text_group)
            return adaptive_prediction(_similarity(member, batch), mask, self.m.margin)
        finally:
            member.train()

    def soft_loss(self, member: torch.nn.Module, batch: Batch,
                  label: torch.Tensor) -> torch.Tensor:
        """L_soft (Eq. 6) with the soft margins of Eq. 7, against the hardest negative (the
        paper) or the mean over all valid negatives (``robust_loss="mean"``)."""
        mask = negative_mask(batch.image_group, batch.text_group)
        return self.robust_loss(_similarity(member, batch), mask, label)

    def robust_loss(self, sims: torch.Tensor, mask: torch.Tensor,
                    label: torch.Tensor) -> torch.Tensor:
        """The per-pair hinge of ``sims`` with margins from the soft ``label`` (Eq. 6-7)."""
        margins = soft_margin(label, self.m.margin, self.m.soft_margin_base)
        if self.m.robust_loss == "mean":
            return mean_hinge(sims, mask, margins)
        return hardest_negative_hinge(sims, mask, margins)

    def end_epoch(self, model: Ensemble, epoch: int) -> dict[str, float]:
        if epoch < self.warmup:
            return {}
        return {"clean_share_A": float((self.posterior[0] > 0.5).mean()),
                "clean_share_B": float((self.posterior[1] > 0.5).mean()),
                "noise_rate": float(np.mean([f.noise_rate for f in self.fits if f]))}

    def state(self) -> dict[str, np.ndarray]:
        return {"posterior_sum": self.posterior_sum,
                "divisions": np.array([self.divisions])}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if "posterior_sum" in state:
            self.posterior_sum = state["posterior_sum"].astype(np.float64)
            self.divisions = int(state["divisions"][0])


@dataclass
class GMM(Method):
    """NCR's loss-GMM division with co-teaching matchers. Defaults are the paper's (margin 0.2,
    soft-margin base 10, Adam 2e-4, batch 128, clip 2.0, threshold 0.5) except ``robust_loss``
    (see the module docstring); epochs follow :func:`schedule`. ``final="mean"`` averages each
    pair's clean posterior over the co-training epochs instead of taking the last division's;
    ``negatives`` chooses the fixed negatives of the division loss (``pool`` or ``batches``)."""

    name: ClassVar[str] = "gmm"
    summary: ClassVar[str] = ("NCR (NeurIPS 2021): GMM on per-pair losses of two co-teaching "
                              "matchers, rectified soft margins")

    warmup_epochs: int | None = None
    epochs: int | None = None
    margin: float = 0.2
    soft_margin_base: float = 10.0
    lr: float = 2e-4
    lr_update: int | None = None
    batch_size: int = 128
    grad_clip: float = 2.0
    p_threshold: float = 0.5
    noisy_from: float = 0.5
    negatives: str = "pool"
    pool_size: int = 1024
    final: str = "mean"
    robust_loss: str = "mean"

    def _objective(self, features: Features, warmup: int, epochs: int,
                   context: Context) -> CoDivide:
        return CoDivide(features, self, warmup, epochs, context.device, context.seed)

    def fit(self, features: Features, context: Context) -> MethodResult:
        if self.final not in ("last", "mean"):
            raise ValueError(f"final must be 'last' or 'mean', got {self.final!r}")
        warmup, epochs = schedule(features.n_pairs, self.batch_size, self.warmup_epochs,
                                  self.epochs, context.frozen_images)
        if context.initial is not None:  # a loaded matcher: start both networks from it
            members = list(context.initial.members)
            model = Ensemble([members[0], members[-1] if len(members) > 1 else
                              _copy(members[0])])
            warmup = 0
        else:
            model = Ensemble([context.new_matcher(0), context.new_matcher(1)])
        model = self._model(model, features, context)
        objective = self._objective(features, warmup, epochs, context)
        lr_update = self.lr_update if self.lr_update is not None else (3 * epochs) // 4
        config = TrainConfig(epochs=warmup + epochs, lr=self.lr,
                             lr_drop_epochs=(warmup + lr_update,), grad_clip=self.grad_clip,
                             seed=context.seed, device=context.device,
                             checkpoint_dir=context.checkpoint_dir, resume=context.resume)
        history = train(model, objective, config, context.progress)

        objective.divide(model)
        if self.final == "mean" and objective.divisions:
            clean_prob = (objective.posterior_sum + objective.posterior.mean(axis=0)) / \
                (objective.divisions + 1)
        else:
            clean_prob = objective.posterior.mean(axis=0)
        model.eval()
        matcher = self._matcher(model)
        embeddings = embed(matcher, features, context.device, dtype=kept_dtype(features))
        fits = [f.as_dict() for f in objective.fits if f is not None]
        return self._finish(MethodResult(
            clean_prob=np.clip(clean_prob, 0.0, 1.0),
            columns={
                f"{self.name}_loss": objective.losses.mean(axis=0),
                f"{self.name}_sim": embeddings.pair_similarity(features),
                f"{self.name}_label": self._rectified_label(clean_prob, objective.losses),
            },
            matcher=matcher,
            embeddings=embeddings,
            noise_rate=float(np.mean([f["noise_rate"] for f in fits])) if fits else None,
            report={"warmup_epochs": warmup, "epochs": epochs, "mixtures": fits,
                    "history": history},
        ), objective, model)

    # Hooks for methods built on NCR's co-division (PC2): the trained model may carry more than
    # the two matchers, and the result more than NCR's columns.

    def _model(self, ensemble: Ensemble, features: Features, context: Context) -> torch.nn.Module:
        """The model to train, built around the two matchers."""
        return ensemble

    def _matcher(self, model: torch.nn.Module) -> Ensemble:
        """The trained matchers, as the ensemble later stages score with."""
        return model

    def _finish(self, result: MethodResult, objective: CoDivide,
                model: torch.nn.Module) -> MethodResult:
        return result

    def _rectified_label(self, clean_prob: np.ndarray, losses: np.ndarray) -> np.ndarray:
        """Eq. 4 at the end of training: clean pairs ``w + (1 - w) P``, noisy pairs ``P``, with
        ``P`` the two networks' mean adaptive prediction and ``tau`` over the whole corpus."""
        margin_over_negatives = np.clip(self.margin - losses / 2, 0.0, self.margin)
        prediction = np.mean([relative_to_top(torch.from_numpy(p)).numpy()
                              for p in margin_over_negatives], axis=0)
        clean = clean_split(clean_prob, self.p_threshold)
        return np.where(clean, clean_prob + (1 - clean_prob) * prediction, prediction)


def _copy(module: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(module)
