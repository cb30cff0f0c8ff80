"""``bicro``: BiCro (Yang et al., "BiCro: Noisy Correspondence Rectification for Multi-modality
Data via Bi-directional Cross-modal Similarity Consistency", CVPR 2023).

The paper's full text was not available to this implementation; it follows the paper's abstract
(soft labels from the consistency of image-image and text-text similarities, "similar images
should have similar textual descriptions and vice versa") and the authors' public code
(``co_train.py``, ``model.py`` of xu5zhao/BiCro), read, not copied. Equation numbers are
therefore not cited; each step names the code it follows. Training:

1. Two matchers A and B warm up on every pair with NCR's mean hinge loss.
2. Every co-training epoch, each network's per-pair loss (min-max normalised) is fitted with a
   two-component Beta mixture (:mod:`ncclean_bicro.beta_mixture`); its low-loss posterior ``w``
   divides the pairs into clean (``w > p_threshold``) and noisy.
3. Anchors are the surest clean pairs: the ``anchor_share`` of the clean split with the lowest
   loss. Every pair gets a soft correspondence label ``y`` from the consistency of its
   image-to-anchor-image and text-to-anchor-text similarities in both directions
   (:mod:`ncclean_bicro.consistency`): ``y = (rho_IT + rho_TI) / 2``.
4. Each network trains on the *other's* division and labels (co-teaching). Labels follow the
   authors' ``predict``: an anchor 1, another clean pair ``0.5 + y / 2``, a noisy pair ``y``,
   and any label at or below ``label_floor`` 0 (``noise_soft`` mode). The label sets the soft
   margin of the triplet loss as in NCR (Eq. 7 there): ``margin * (10**y - 1) / 9``.
   Noisy pairs join the loss from the second half of co-training (the code's
   ``epoch >= num_epochs // 2``).

``clean_prob`` is each pair's clean posterior averaged over the two networks and over the
co-training divisions (as ``gmm``'s ``final="mean"``); ``bicro_consistency`` is the final
consistency label ``y`` (the two networks' mean), ``bicro_label`` the label the pair would train
with, ``bicro_loss`` the division loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from ncclean.methods.base import Context, Method, MethodResult, param
from ncclean.methods.gmm import schedule
from ncclean.methods.mixture import PosteriorMean, clean_split, fit_clean_posterior
from ncclean.models.matcher import Ensemble
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.losses import hardest_negative_hinge, mean_hinge, negative_mask, soft_margin
from ncclean.train.scoring import embed, kept_dtype, pair_losses
from ncclean_bicro.beta_mixture import fit_beta_posterior
from ncclean_bicro.consistency import consistency_labels, pick_anchors


def _cycle(indices: np.ndarray, batch_size: int, rng: np.random.Generator,
           count: int) -> list[np.ndarray]:
    """``count`` batches of ``indices``, reshuffled each time they run out."""
    if len(indices) == 0:
        return [indices] * count
    order, out = rng.permutation(indices), []
    while len(out) < count:
        if len(order) < batch_size and len(indices) > len(order):
            order = np.concatenate([order, rng.permutation(indices)])
        out.append(order[:batch_size])
        order = order[batch_size:]
    return out


class BiCroObjective(Objective):
    """Warm-up, then co-divided training of two matchers with consistency labels."""

    def __init__(self, features, method: BiCro, warmup: int, epochs: int, device: str,
                 seed: int):
        self.features, self.m = features, method
        self.warmup, self.epochs, self.device, self.seed = warmup, epochs, device, seed
        n = features.n_pairs
        self.stage = "warm-up"
        self.posterior = np.ones((2, n))
        self.losses = np.zeros((2, n), dtype=np.float32)
        self.consistency = np.ones((2, n), dtype=np.float32)
        self.labels = np.ones((2, n), dtype=np.float32)
        self.fits: list[Any] = [None, None]
        self.averaged = PosteriorMean(n)

    def divide(self, model: Ensemble) -> None:
        """Each network's losses, mixture posterior, anchors, consistency and training labels."""
        for k, member in enumerate(model.members):
            vectors = embed(member, self.features, self.device)
            self.losses[k] = pair_losses(vectors, self.features, margin=self.m.margin,
                                         pool_size=self.m.pool_size, seed=self.seed)
            if self.m.mixture == "beta":
                self.posterior[k], self.fits[k] = fit_beta_posterior(self.losses[k])
            else:
                self.posterior[k], self.fits[k] = fit_clean_posterior(self.losses[k], "low",
                                                                      seed=self.seed)
            clean = clean_split(self.posterior[k], self.m.p_threshold)
            anchors = pick_anchors(self.losses[k], clean, self.m.anchor_share)
            y = consistency_labels(vectors.images, vectors.texts, self.features.image_group,
                                   self.features.text_group, anchors)
            label = np.where(clean, 0.5 + y / 2, y)
            label[anchors] = 1.0
            label[label <= self.m.label_floor] = 0.0
            self.consistency[k], self.labels[k] = y, label

    def begin_epoch(self, model: Ensemble, epoch: int) -> None:
        if epoch < self.warmup:
            self.stage = "warm-up"
            return
        self.stage = "co-training"
        self.divide(model)
        self.averaged.add(self.posterior.mean(axis=0))

    def steps(self, epoch: int, rng: np.random.Generator) -> Iterator[Any]:
        n, b = self.features.n_pairs, self.m.batch_size
        if epoch < self.warmup:
            count = math.ceil(n / b)
            everyone = np.arange(n)
            for pair in zip(_cycle(everyone, b, rng, count), _cycle(everyone, b, rng, count)):
                yield "warm-up", pair
            return
        splits = [clean_split(self.posterior[1 - k], self.m.p_threshold) for k in (0, 1)]
        count = max(1, max(math.ceil(split.sum() / b) for split in splits))
        streams = [zip(_cycle(np.flatnonzero(s), b, rng, count),
                       _cycle(np.flatnonzero(~s), b, rng, count)) for s in splits]
        yield from (("co-training", pair) for pair in zip(*streams))

    def _hinge(self, member: torch.nn.Module, pairs: np.ndarray,
               label: torch.Tensor | None) -> torch.Tensor:
        batch = self.features.batch(pairs, self.device)
        sims = member.encode_images(*batch.images) @ member.encode_texts(*batch.texts).T
        mask = negative_mask(batch.image_group, batch.text_group)
        if label is None:
            return mean_hinge(sims, mask, self.m.margin)
        margins = soft_margin(label, self.m.margin, self.m.soft_margin_base)
        if self.m.robust_loss == "hardest":
            return hardest_negative_hinge(sims, mask, margins)
        return mean_hinge(sims, mask, margins)

    def loss(self, model: Ensemble, step: Any, epoch: int) -> torch.Tensor:
        kind, parts = step
        total = torch.zeros((), device=self.device)
        if kind == "warm-up":
            for member, pairs in zip(model.members, parts):
                total = total + self._hinge(member, pairs, None).sum()
            return total
        with_noisy = epoch - self.warmup >= int(self.m.noisy_from * self.epochs)
        for k, (clean, noisy) in enumerate(parts):
            member, labels = model.members[k], self.labels[1 - k]
            for pairs in (clean, noisy) if with_noisy else (clean,):
                if len(pairs):
                    label = torch.as_tensor(labels[pairs], device=self.device)
                    total = total + self._hinge(member, pairs, label).sum()
        return total

    def end_epoch(self, model: Ensemble, epoch: int) -> dict[str, float]:
        if epoch < self.warmup:
            return {}
        return {"clean_share_A": float((self.posterior[0] > 0.5).mean()),
                "clean_share_B": float((self.posterior[1] > 0.5).mean()),
                "noise_rate": float(np.mean([f.noise_rate for f in self.fits if f]))}

    def state(self) -> dict[str, np.ndarray]:
        return self.averaged.state()

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.averaged.load_state(state)


@dataclass
class BiCro(Method):
    """BiCro: a Beta-mixture division of two co-teaching matchers, and soft correspondence
    labels from the bidirectional similarity consistency with clean anchors. Defaults are the
    authors' (margin 0.2, soft-margin base 10, lr 2e-4, batch 128, clip 2, threshold 0.5,
    label floor 0.5); epochs follow ``gmm``'s rule (:func:`ncclean.methods.gmm.schedule`)."""

    name: ClassVar[str] = "bicro"
    min_pairs: ClassVar[int] = 2400
    summary: ClassVar[str] = ("BiCro (CVPR 2023): Beta-mixture division, soft labels from "
                              "bidirectional similarity consistency with clean anchors")
    departures: ClassVar[tuple[str, ...]] = (
        "Anchors are the lowest-loss share of the whole clean split, not the top tenth of each "
        "training batch by adaptive prediction.",
        "Consistency labels are computed once per epoch over the corpus from each network's "
        "embeddings, not per batch during the step.",
        "The division loss is measured against a fixed seeded pool of negatives "
        "(deterministic), not a reshuffled loader.",
        "The soft margins apply to the mean hinge over valid negatives by default "
        "(robust_loss=mean); the authors use the hardest negative, which collapses a matcher "
        "trained from scratch (as measured for gmm).",
        "A and B step together on every batch instead of one network's epoch after the "
        "other's.",
        "The Beta mixture's clean posterior is made non-increasing in the loss.",
        "Epoch counts scale with the corpus (gmm's rule) instead of the paper's 5 + 40.",
    )

    warmup_epochs: int | None = param(
        None, low=0, rule="gmm's rule: about 320 steps; 1 with frozen image vectors",
        help="warm-up epochs on every pair")
    epochs: int | None = param(
        None, low=1, rule="gmm's rule: about 1,280 steps; 4 with frozen image vectors",
        help="co-training epochs")
    margin: float = param(0.2, low=0, low_open=True, help="triplet margin")
    soft_margin_base: float = param(10.0, low=1, low_open=True,
                                    help="base of NCR's exponential soft margin")
    lr: float = param(2e-4, low=0, low_open=True, help="learning rate")
    batch_size: int = param(128, low=2, help="pairs per batch")
    grad_clip: float = param(2.0, low=0, help="gradient norm clip per network (0: none)")
    p_threshold: float = param(0.5, low=0, high=1, help="clean posterior above which a pair "
                               "is in the clean split")
    anchor_share: float = param(0.1, low=0, high=1, low_open=True,
                                help="share of the clean split used as anchors")
    label_floor: float = param(0.5, low=0, high=1, help="labels at or below it become 0 "
                               "(the code's noise_tem)")
    noisy_from: float = param(0.5, low=0, high=1, help="share of co-training after which "
                              "noisy pairs join the loss")
    mixture: Literal["beta", "gaussian"] = param("beta", help="the division's mixture")
    robust_loss: Literal["mean", "hardest"] = param("mean", help="hinge over all valid "
                                                    "negatives or the hardest")
    pool_size: int = param(1024, low=2, help="fixed negatives of the division loss")

    def fit(self, features, context: Context) -> MethodResult:
        warmup, epochs = schedule(features.n_pairs, self.batch_size, self.warmup_epochs,
                                  self.epochs, context.frozen_images)
        model = Ensemble([context.new_matcher(0), context.new_matcher(1)])
        objective = BiCroObjective(features, self, warmup, epochs, context.device,
                                   context.seed)
        config = TrainConfig(epochs=warmup + epochs, lr=self.lr,
                             lr_drop_epochs=(warmup + (3 * epochs) // 4,),
                             grad_clip=self.grad_clip, seed=context.seed, device=context.device,
                             checkpoint_dir=context.checkpoint_dir, resume=context.resume)
        history = train(model, objective, config, context.progress)

        objective.divide(model)
        clean_prob = objective.averaged.of(objective.posterior.mean(axis=0))
        model.eval()
        vectors = embed(model, features, context.device, dtype=kept_dtype(features))
        fits = [f.as_dict() for f in objective.fits if f is not None]
        return MethodResult(
            clean_prob=np.clip(clean_prob, 0.0, 1.0),
            columns={
                "bicro_loss": objective.losses.mean(axis=0),
                "bicro_consistency": objective.consistency.mean(axis=0),
                "bicro_label": objective.labels.mean(axis=0),
                "bicro_sim": vectors.pair_similarity(features),
            },
            matcher=model,
            embeddings=vectors,
            noise_rate=float(np.mean([f["noise_rate"] for f in fits])) if fits else None,
            report={"warmup_epochs": warmup, "epochs": epochs, "mixtures": fits,
                    "history": history},
        )
