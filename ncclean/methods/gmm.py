"""``gmm``: NCR, Noisy Correspondence Rectifier (Huang et al., NeurIPS 2021).

Two matchers A and B are warmed up on all pairs with the mean hinge loss ``L_w`` (Eq. 1-2,
:mod:`ncclean.train.warmup`). Then, every epoch, each network's per-pair loss is fitted with a
two-component GMM (Sec. 3.1) whose low-mean posterior ``w`` divides the pairs into clean and
noisy, and each network trains on the *other's* division (co-divide). Labels are co-rectified
(Eq. 4): a clean pair gets ``w + (1 - w) P_k``, a noisy pair ``(P_A + P_B) / 2``, with ``P`` the
adaptive prediction (Eq. 5); the label sets the margin of the hinge,
``alpha (m^y - 1) / (m - 1)`` (Eq. 6-7). The final ``clean_prob`` is the mean of the two
networks' posteriors. Where this departs from the paper: :attr:`GMM.departures`
(``ncclean methods gmm``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from ncclean.methods.applied import Application
from ncclean.methods.base import Context, Method, MethodResult, param
from ncclean.methods.mixture import MixtureFit, PosteriorMean, clean_split, fit_clean_posterior
from ncclean.methods.pool_loss import PoolLoss
from ncclean.models.features import Batch, Features
from ncclean.models.matcher import Ensemble
from ncclean.train.loop import TrainConfig, train
from ncclean.train.losses import (
    adaptive_prediction,
    hardest_negative_hinge,
    mean_hinge,
    relative_to_top,
    soft_margin,
)
from ncclean.train.scoring import embed, kept_dtype, pair_losses
from ncclean.train.warmup import WarmUp, cycled_batches, encode, warmup_epochs_for

RESULTS = "benchmarks/results/gmm.md"
HEAD_EPOCHS = 4  # co-training epochs of a head on fixed image vectors, at every size (schedule)
MAX_EPOCHS = 40  # co-training's cap, the paper's F30K length


def schedule(n_pairs: int, batch_size: int, warmup_epochs: int | None,
             epochs: int | None, frozen_images: bool = False) -> tuple[int, int]:
    """Warm-up and co-training epochs: given values are kept; missing ones follow the rule

    warm-up = ``clip(round(320 / steps_per_epoch), 1, 10)``,
    co-training = ``clip(round(1280 / steps_per_epoch), 4, 40)``,

    i.e. about 320 and 1,280 optimiser steps (5 and 20 epochs of 8,000 pairs in batches of 128),
    capped at the paper's COCO warm-up (10) and F30K length (40) for large corpora.

    With ``frozen_images`` (the image tower a head on fixed vectors) they are 1 and 4 epochs at
    every size: such a head learns from the first batch and memorises its noisy pairs with every
    pass, so a small corpus given more passes ranks its own pairs worse (on 1,000 clip-art pairs
    at 50% noise, AUROC 0.55 after 8 + 32 epochs, 0.86 after 1 + 4: ``benchmarks/results/gmm.md``,
    "Heads count passes, not steps").
    """
    steps_per_epoch = max(1, math.ceil(n_pairs / batch_size))
    if warmup_epochs is None:
        warmup_epochs = warmup_epochs_for(n_pairs, batch_size, frozen_images)
    if epochs is None:
        epochs = HEAD_EPOCHS if frozen_images else \
            int(np.clip(round(1280 / steps_per_epoch), 4, MAX_EPOCHS))
    return warmup_epochs, epochs


def noisy_from_rule(epochs: int) -> float:
    """``noisy_from`` when not given: 1.0 (the noisy pairs never join) when co-training runs
    ``MAX_EPOCHS`` epochs or more, a small corpus that many passes let the rectified labels
    memorise; else the authors' 0.5. From scratch at 50% noise the end of co-training then stays
    at its best division (1,000 / 3,000 / 4,000 clip-art pairs: 0.787 / 0.859 / 0.881 with 0.5,
    0.819 / 0.880 / 0.889 with 1.0: ``benchmarks/results/default-pipeline.md``)."""
    return 1.0 if epochs >= MAX_EPOCHS else 0.5


class CoDivide(WarmUp):
    """NCR's training as an objective over an :class:`Ensemble` of two matchers: the warm-up of
    :class:`~ncclean.train.warmup.WarmUp`, then co-division.

    ``divisions`` holds, after each co-training epoch's start, each network's posterior ``w`` and
    raw loss. PC2 extends this class through its hooks: :meth:`extra_loss` (a term on every
    batch), :meth:`noisy_loss` (the noisy pairs' term), :meth:`clean_label` and :meth:`observe`.
    """

    def __init__(self, features: Features, method: GMM, warmup: int, epochs: int,
                 device: str, seed: int):
        super().__init__(features, method.margin, method.batch_size, device, warmup)
        self.method = method
        self.epochs = epochs
        self.seed = seed
        self.noisy_from = method.noisy_from if method.noisy_from is not None else \
            noisy_from_rule(epochs)
        self.posterior = np.ones((2, features.n_pairs))
        self.losses = np.zeros((2, features.n_pairs), dtype=np.float32)
        self.fits: list[MixtureFit | None] = [None, None]
        self.averaged = PosteriorMean(features.n_pairs)

    # -- division -----------------------------------------------------------------------------

    def divide(self, model: Ensemble) -> None:
        """Each network's per-pair loss, mixture and clean posterior. One network's embeddings
        are held at a time (2 GB at a million pairs), shown to :meth:`observe`, then dropped."""
        for k, member in enumerate(model.members):
            embeddings = embed(member, self.features, self.device)
            self.observe(k, member, embeddings)
            self.losses[k] = pair_losses(
                embeddings, self.features, margin=self.method.margin,
                negatives=self.method.negatives, pool_size=self.method.pool_size,
                batch_size=self.method.batch_size, seed=self.seed)
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
        self.averaged.add(self.posterior.mean(axis=0))

    # -- steps ---------------------------------------------------------------------------------

    def steps(self, epoch: int, rng: np.random.Generator) -> Iterator[Any]:
        if epoch < self.warmup:
            yield from super().steps(epoch, rng)
            return
        b = self.method.batch_size
        # Network k trains on the division of the other network (co-divide).
        splits = [clean_split(self.posterior[1 - k], self.method.p_threshold) for k in (0, 1)]
        count = max(1, max(math.ceil(split.sum() / b) for split in splits))
        streams = []
        for split in splits:
            clean, noisy = np.flatnonzero(split), np.flatnonzero(~split)
            streams.append(zip(cycled_batches(clean, b, rng, count),
                               cycled_batches(noisy, b, rng, count)))
        yield from (("co-training", pair) for pair in zip(*streams))

    # -- loss ----------------------------------------------------------------------------------

    def loss(self, model: Ensemble, step: Any, epoch: int) -> torch.Tensor:
        kind, parts = step
        if kind == "warm-up":
            return super().loss(model, step, epoch)
        features, device = self.features, self.device
        total = torch.zeros((), device=device)
        for k, (clean, noisy) in enumerate(parts):
            member, other = model.members[k], model.members[1 - k]
            batch = features.batch(clean, device)
            noisy_batch = features.batch(noisy, device) \
                if self.use_noisy(epoch) and len(noisy) else None
            images, texts, noisy_embedded = self._encode(member, batch, noisy_batch)
            sims = images @ texts.T
            label = self.clean_label(member, batch, clean, k, sims)
            mask = batch.negatives
            total = total + self.robust_loss(sims, mask, label).sum()
            extra = self.extra_loss(member, images, texts)
            if extra is not None:
                total = total + extra
            if noisy_batch is not None:
                term = self.noisy_loss(member, other, noisy_batch, batch, images, texts,
                                       noisy_embedded)
                if term is not None:
                    total = total + term
        return total

    def _encode(self, member: torch.nn.Module, clean: Batch, noisy: Batch | None) \
            -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor | None, ...] | None]:
        """The clean batch's image and caption embeddings by ``member`` ``(B, d)``, and the
        noisy batch's sides named in :attr:`noisy_sides` (``None`` for the others), or ``None``
        without a noisy batch. With heads (``same_in_eval``: each row's embedding depends on
        that row alone and on no random draw) each side is encoded in one pass over both
        batches: matrix products twice as tall and one gradient per weight instead of two
        summed; the same numbers up to float rounding."""
        if noisy is None or not len(clean.pairs) or not getattr(member, "same_in_eval", False):
            return (*encode(member, clean), None)
        size, out = len(clean.pairs), []
        for side, tower in (("images", member.encode_images), ("texts", member.encode_texts)):
            inputs = zip(getattr(clean, side), getattr(noisy, side))
            if side not in self.noisy_sides:
                out.append((tower(*getattr(clean, side)), None))
                continue
            joint = tower(*(torch.cat(pair) for pair in inputs))
            out.append((joint[:size], joint[size:]))
        (images, noisy_images), (texts, noisy_texts) = out
        return images, texts, (noisy_images, noisy_texts)

    #: The sides of the noisy batch :meth:`noisy_loss` encodes with the member (NCR: both,
    #: PC2: the images), encoded together with the clean batch's by :meth:`_encode`.
    noisy_sides: tuple[str, ...] = ("images", "texts")

    def noisy_loss(self, member: torch.nn.Module, other: torch.nn.Module, noisy: Batch,
                   clean: Batch, clean_images: torch.Tensor, clean_texts: torch.Tensor,
                   embedded: tuple[torch.Tensor | None, ...] | None = None) \
            -> torch.Tensor | None:
        """Hook: the noisy pairs' term of network ``member``'s loss, given the step's clean
        batch and its embeddings, and the noisy batch's embeddings by side where
        :meth:`_encode` made them. NCR: the soft hinge with the co-rectified label
        ``(P_A + P_B) / 2`` (Eq. 4)."""
        if embedded is not None and None not in embedded:
            sims = embedded[0] @ embedded[1].T
        else:
            sims = member.batch_similarity(noisy)
        label = (self.predict(member, noisy, sims) + self.predict(other, noisy)) / 2
        mask = noisy.negatives
        return self.robust_loss(sims, mask, label).sum()

    def clean_label(self, member: torch.nn.Module, batch: Batch, clean: np.ndarray,
                    k: int, sims: torch.Tensor | None = None) -> torch.Tensor:
        """NCR's co-rectified label of network ``k``'s clean-set pairs, ``w + (1 - w) P(I, T)``
        with ``w`` the other network's clean posterior; ``sims``: the batch's similarities by
        ``member`` in training mode, if already computed (see :meth:`predict`)."""
        w = torch.as_tensor(self.posterior[1 - k][clean], dtype=torch.float32,
                            device=self.device)
        return w + (1 - w) * self.predict(member, batch, sims)

    def use_noisy(self, epoch: int) -> bool:
        """Whether the noisy pairs join the loss in co-training epoch ``epoch``."""
        return epoch - self.warmup >= int(self.noisy_from * self.epochs)

    @torch.no_grad()
    def predict(self, member: torch.nn.Module, batch: Batch,
                sims: torch.Tensor | None = None) -> torch.Tensor:
        """P(I, T) of Eq. 5 for the batch, by ``member`` in eval mode. ``sims``: the batch's
        similarities by ``member`` in training mode, if already computed; where the member's
        forward pass is the same in both modes (heads on fixed vectors: ``same_in_eval``) they
        are used as they are instead of a second forward pass, and a pass that is needed runs
        without switching the member's mode (the same numbers; the switch walks every module
        twice)."""
        mask = batch.negatives
        if getattr(member, "same_in_eval", False):
            if sims is None:
                sims = member.batch_similarity(batch)
            return adaptive_prediction(sims.detach(), mask, self.method.margin)
        member.eval()
        try:
            return adaptive_prediction(member.batch_similarity(batch), mask, self.method.margin)
        finally:
            member.train()

    def robust_loss(self, sims: torch.Tensor, mask: torch.Tensor,
                    label: torch.Tensor) -> torch.Tensor:
        """The per-pair hinge of ``sims`` with margins from the soft ``label`` (Eq. 6-7)."""
        margins = soft_margin(label, self.method.margin, self.method.soft_margin_base)
        if self.method.robust_loss == "mean":
            return mean_hinge(sims, mask, margins)
        return hardest_negative_hinge(sims, mask, margins)

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


# Where NCR's co-division departs from the paper, for every method built on it.
CO_DIVISION_DEPARTURES = (
    "The division loss is measured against fixed seeded negatives (negatives=pool or "
    "batches), not a reshuffled loader, so the same seed gives the same scores.",
    "Another caption of the same image, or the same caption text, is masked out of every "
    "negative.",
    "Noisy pairs join the loss only in the second half of co-training (noisy_from; the "
    "authors' code, the paper is silent).",
    "A and B step together on every batch, each clipped on its own, instead of A's whole "
    "epoch followed by B's.",
    "Soft margins are per anchor in both directions (the paper), not the authors' code's "
    "broadcast b x b margins.",
    "The soft margins apply to the mean hinge over valid negatives (robust_loss=mean), not "
    "Eq. 6's hardest negative, under which a matcher trained from scratch collapses "
    f"({RESULTS}).",
    "clean_prob averages each pair's posterior over every division (final=mean), not the "
    f"last one's ({RESULTS}).",
    "gmm_label takes the adaptive prediction's tau over the whole corpus (its top 10%), not "
    "over a random batch.",
    "Epochs follow the optimiser steps (schedule), not the paper's 5 + 40 epochs, which a "
    f"small corpus memorises long before ({RESULTS}).",
    "The matcher is this project's dual encoder trained from scratch (or heads on fixed "
    "vectors), not SGRAF on pretrained region features.",
)


@dataclass
class GMM(Method):
    """NCR's loss-GMM division with co-teaching matchers. Defaults are the paper's (margin 0.2,
    soft-margin base 10, Adam 2e-4, batch 128, clip 2.0, threshold 0.5) except ``robust_loss``;
    epochs follow :func:`schedule`."""

    name: ClassVar[str] = "gmm"
    min_pairs: ClassVar[int] = 1200
    application: ClassVar[Application] = PoolLoss()
    summary: ClassVar[str] = ("NCR (NeurIPS 2021): GMM on per-pair losses of two co-teaching "
                              "matchers, rectified soft margins")
    departures: ClassVar[tuple[str, ...]] = CO_DIVISION_DEPARTURES + (
        "Noisy pairs never join when co-training runs 40 epochs, on corpora of at most 32 "
        "batches (noisy_from's rule, ours: there they made the end lose its best division, "
        "benchmarks/results/default-pipeline.md).",
    )

    warmup_epochs: int | None = param(
        None, low=0, rule="clip(round(320 / steps per epoch), 1, 10); 1 with frozen image "
        "vectors", help="epochs of warm-up on every pair (Eq. 1-2)")
    epochs: int | None = param(
        None, low=1, rule="clip(round(1280 / steps per epoch), 4, 40); 4 with frozen image "
        "vectors", help="epochs of co-training after the warm-up")
    margin: float = param(0.2, low=0, low_open=True, help="hinge margin alpha (Eq. 2, 7)")
    soft_margin_base: float = param(10.0, low=1, low_open=True,
                                    help="m of the soft margin alpha (m^y - 1) / (m - 1) (Eq. 7)")
    lr: float = param(2e-4, low=0, low_open=True, help="learning rate (AdamW, no decay)")
    lr_update: int | None = param(None, low=0, rule="three quarters of the co-training epochs",
                                  help="co-training epoch from which the rate is a tenth")
    batch_size: int = param(128, low=2, help="pairs per batch")
    grad_clip: float = param(2.0, low=0, help="gradient-norm clip per network (0: none)")
    p_threshold: float = param(0.5, low=0, high=1,
                               help="clean posterior from which a pair is in the clean set")
    noisy_from: float | None = param(
        None, low=0, high=1, rule="1 (never) when co-training runs 40 epochs (a corpus of at "
        "most 32 batches); else 0.5", help="share of co-training after which noisy pairs join "
        "the loss")
    negatives: Literal["pool", "batches"] = param(
        "pool", help="fixed negatives of the division loss: a seeded pool, or seeded batches")
    pool_size: int = param(1024, low=1, help="pairs in the fixed negative pool")
    final: Literal["mean", "last"] = param(
        "mean", help="clean_prob: the posterior averaged over the divisions, or the last one")
    robust_loss: Literal["mean", "hardest"] = param(
        "mean", help="the soft hinge over the mean of the valid negatives, or the hardest (Eq. 6)")

    def _objective(self, features: Features, warmup: int, epochs: int,
                   context: Context) -> CoDivide:
        return CoDivide(features, self, warmup, epochs, context.device, context.seed)

    def fit(self, features: Features, context: Context) -> MethodResult:
        warmup, epochs = schedule(features.n_pairs, self.batch_size, self.warmup_epochs,
                                  self.epochs, context.frozen_images)
        if context.initial is not None:  # a loaded matcher: start both networks from it
            members = list(context.initial.members)
            model = Ensemble([members[0], members[-1] if len(members) > 1 else
                              copy.deepcopy(members[0])])
            warmup = 0
        else:
            model = Ensemble([context.new_matcher(0), context.new_matcher(1)])
        model = self._model(model, features, context)
        objective = self._objective(features, warmup, epochs, context)
        lr_update = self.lr_update if self.lr_update is not None else (3 * epochs) // 4
        config = TrainConfig.from_context(context, epochs=warmup + epochs, lr=self.lr,
                                          lr_drop_epochs=(warmup + lr_update,),
                                          grad_clip=self.grad_clip)
        history = train(model, objective, config, context.progress)

        objective.divide(model)
        clean_prob = objective.posterior.mean(axis=0)
        if self.final == "mean":
            clean_prob = objective.averaged.of(clean_prob)
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
            report={"warmup_epochs": warmup, "epochs": epochs,
                    "noisy_from": objective.noisy_from, "mixtures": fits,
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

