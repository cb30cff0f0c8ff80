"""``crcl``: Cross-modal Active Complementary Learning with Self-refining Correspondence
(Qin et al., NeurIPS 2023).

Every pair carries a soft correspondence label ``y`` (1 at the start). The loss is the Active
Complementary Loss (Eq. 6-9): a label-weighted InfoNCE in both directions plus ``lambda`` times
the complementary term on the negatives,

``L_r(q) = sum_{j != i} tan(p_ij) / (sum_k tan(p_ik))^q`` (rows, image to text, and columns),

with the per-pair exponent ``q = 1 - y``: trusted pairs get the discriminative form, suspect
pairs the noise-tolerant one. ``p`` are in-batch softmax matching probabilities at temperature
``tau``; ``p_hat = (p_ii(i2t) + p_ii(t2i)) / 2``. Self-refining correspondence correction
(Eq. 10-12): training runs as ``pieces``, each a freshly initialised matcher and optimiser; the
labels carry over; within a piece they are frozen for ``freeze_epochs`` and then follow
``y <- beta y + (1 - beta) p_hat``; in the loss a label under ``epsilon`` counts as 0.

``update="epoch"`` is the paper's Eq. 11: at the start of each epoch the labels move towards the
``p_hat`` each pair had in its batch during the previous epoch; the threshold applies to the
loss only. ``update="batch"`` is the authors' code (``train_self``): each batch updates its pairs'
labels from the current forward pass and trains on them in the same step; in piece 1's last
frozen epoch the batch still trains on the old labels and then overwrites them with the raw
``p_hat``; later updates write labels under ``epsilon`` back as 0 (the "sticky zero").

Labels, ``clean_prob`` and the schedule depart from the paper where a matcher trained from
scratch needs it: :attr:`CRCL.departures` (``ncclean methods crcl``), measured in
``benchmarks/results/crcl.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from ncclean.errors import BadOptionError
from ncclean.methods.base import Context, Method, MethodResult, param
from ncclean.methods.mixture import fit_clean_posterior
from ncclean.models.features import Features
from ncclean.seeds import derive_rng, derive_seed
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.scoring import (
    Embeddings,
    embed,
    fixed_batches,
    kept_dtype,
    pool_matching_probability,
)
from ncclean.train.warmup import HEAD_WARMUP_EPOCHS

PAPER_AFTER_FREEZE = (5, 5, 5, 30)  # F30K: [7, 7, 7, 32] with 2 frozen epochs each
RESULTS = "benchmarks/results/crcl.md"


def freeze_for(n_pairs: int, batch_size: int, freeze_epochs: int | None,
               frozen_images: bool = False) -> int:
    """Frozen epochs at the start of each piece: ``freeze_epochs`` when given, else
    ``clip(round(320 / steps_per_epoch), 2, 10)``, about the 320 steps a matcher trained from
    scratch needs before its ``p_hat`` means anything (the paper's 2 epochs are 2,266 steps on
    F30K; measured here: with 20 steps the first labels are ``p_hat`` ~ 1/B for every pair, all
    fall under ``epsilon`` and the active term never trains again). With ``frozen_images`` (the
    image tower a head on fixed vectors, which learns from the first batch and memorises with
    every pass) one epoch at every size, as in :func:`ncclean.methods.gmm.schedule` (on 1,000
    clip-art pairs at 50% noise, AUROC 0.64 with 8 frozen epochs, 0.83 with 1)."""
    if freeze_epochs is not None:
        return freeze_epochs
    if frozen_images:
        return HEAD_WARMUP_EPOCHS
    steps = max(1, math.ceil(n_pairs / batch_size))
    return int(np.clip(round(320 / steps), 2, 10))


def pieces_for(n_pairs: int, batch_size: int, pieces: tuple[int, ...] | str | None,
               freeze_epochs: int, frozen_images: bool = False) -> tuple[int, ...]:
    """Epochs per piece, frozen epochs included: ``pieces`` when given (a tuple, or
    ``"7,7,7,32"`` from the command line), else ``freeze_epochs`` plus the paper's epochs after
    the freeze, ``[5, 5, 5, 30]``, scaled by ``min(1, 64 / steps_per_epoch)`` so that large
    corpora are not trained for more steps than an 8,000-pair one, and by a further fifth with
    ``frozen_images``: a head on fixed image vectors memorises the noise within a few epochs
    (``benchmarks/results/crcl.md``, "A pretrained image tower")."""
    pieces = parse_pieces(pieces)
    if pieces:
        return pieces
    steps = max(1, math.ceil(n_pairs / batch_size))
    scale = min(1.0, 64 / steps) / (5 if frozen_images else 1)
    return tuple(freeze_epochs + max(1, round(e * scale)) for e in PAPER_AFTER_FREEZE)


def parse_pieces(pieces: tuple[int, ...] | str | None) -> tuple[int, ...] | None:
    """Epochs per piece from a tuple or ``"7,7,7,32"``; ``None`` when none are given;
    :class:`BadOptionError` unless every piece has at least one epoch."""
    if isinstance(pieces, str):
        try:
            pieces = tuple(int(p) for p in pieces.replace(" ", "").split(",") if p)
        except ValueError:
            raise BadOptionError(f"parameter 'pieces' of 'crcl': epochs per piece like 7,7,7,32, "
                                 f"got {pieces!r}") from None
    if isinstance(pieces, int) and not isinstance(pieces, bool):
        pieces = (pieces,)  # one piece of that many epochs
    if not pieces:
        return None
    pieces = tuple(int(p) for p in pieces)
    if min(pieces) < 1:
        raise BadOptionError(f"parameter 'pieces' of 'crcl': every piece needs at least one "
                             f"epoch, got {pieces}")
    return pieces


def matching_probabilities(sims: torch.Tensor, mask: torch.Tensor,
                           temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Row (image-to-text) and column (text-to-image) softmax probabilities of a batch's
    ``(B, B)`` similarities, over the valid negatives and the positive (others are 0)."""
    keep = mask | torch.eye(len(sims), dtype=torch.bool, device=sims.device)
    logits = (sims / temperature).masked_fill(~keep, float("-inf"))
    return torch.softmax(logits, dim=1), torch.softmax(logits, dim=0)


def complementary(p: torch.Tensor, q: torch.Tensor, dim: int) -> torch.Tensor:
    """``L_r`` in one direction (Eq. 6): ``sum_{j != i} tan(p_ij) / (sum_k tan(p_ik))^q`` along
    ``dim`` (1: rows, 0: columns), ``(B,)``."""
    t = torch.tan(p)
    total = t.sum(dim=dim)
    negatives = total - t.diagonal()
    return negatives / total.clamp(min=1e-10) ** q


def acl_loss(sims: torch.Tensor, mask: torch.Tensor, label: torch.Tensor, temperature: float,
             lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The Active Complementary Loss of a batch (Eq. 9, the code's form ``mean(y (-log p_ii^o
    - log p_ii^d)) + lambda mean(L_r(1 - y))``) and the batch's ``p_hat`` (detached)."""
    row, column = matching_probabilities(sims, mask, temperature)
    p_row, p_column = row.diagonal(), column.diagonal()
    active = label * (-torch.log(p_row.clamp(min=1e-10)) - torch.log(p_column.clamp(min=1e-10)))
    q = 1 - label
    robust = complementary(row, q, 1) + complementary(column, q, 0)
    return active.mean() + lam * robust.mean(), ((p_row + p_column) / 2).detach()


def eval_p_hat(embeddings: Embeddings, features: Features, temperature: float,
               batch_size: int, passes: int, seed: int) -> np.ndarray:
    """``p_hat`` of every pair in eval mode, averaged over ``passes`` partitions of the corpus
    into fixed seeded batches. ``(n,) float32``."""
    total = np.zeros(features.n_pairs, dtype=np.float64)
    for k in range(passes):
        rng = derive_rng(seed, "crcl-scoring", k)
        for pairs, sims, mask in fixed_batches(embeddings, features, batch_size, rng):
            row, column = matching_probabilities(sims, mask, temperature)
            total[pairs] += ((row.diagonal() + column.diagonal()) / 2).numpy()
    return (total / passes).astype(np.float32)


def percentile(values: np.ndarray) -> np.ndarray:
    """Each value's percentile among ``values``: 0 for the lowest, 1 for the highest; tied
    values share their mean rank. ``(n,) float64``; needs ``n >= 2``."""
    ordered = np.sort(values)
    rank = np.searchsorted(ordered, values, "left") + np.searchsorted(ordered, values, "right")
    return (rank - 1) / 2 / (len(values) - 1)


class SelfRefine(Objective):
    """ACL with self-refining labels, for one piece at a time (``piece`` is set before each)."""

    stage = "piece"

    def __init__(self, features: Features, method: CRCL, pieces: tuple[int, ...], freeze: int,
                 device: str, seed: int = 0):
        self.features = features
        self.seed = seed
        self.pieces = pieces
        self.freeze = freeze
        self.method = method
        self.device = device
        n = features.n_pairs
        self.labels = np.ones(n)
        self.p_last = np.full(n, np.nan)  # p_hat of each pair in the previous epoch
        self.p_now = np.full(n, np.nan)
        self.piece = 0
        self.rank_sum = np.zeros(n)  # each pair's percentile of p_hat, summed over updates
        self.rank_count = np.zeros(n)

    def used_labels(self, rows: np.ndarray) -> np.ndarray:
        y = self.labels[rows]
        return np.where(y < self.method.epsilon, 0.0, y)

    def target(self, p_hat: np.ndarray) -> np.ndarray:
        """What the labels move towards: ``p_hat`` itself (the paper); with
        ``target="posterior"`` the clean posterior of a two-component mixture fitted to the
        epoch's ``p_hat``; with ``target="rank"`` its percentile among the epoch's pairs, 0 for
        the lowest and 1 for the highest (both ours; see :class:`CRCL`)."""
        target = self.method.label_target
        if target == "p" or len(p_hat) < 4:
            return p_hat
        if target == "rank":
            return percentile(p_hat)
        return fit_clean_posterior(p_hat, "high", seed=self.seed)[0]

    def begin_epoch(self, model, epoch: int) -> None:
        self.stage = f"piece {self.piece + 1}/{len(self.pieces)}"
        self.p_last, self.p_now = self.p_now, np.full(self.features.n_pairs, np.nan)
        if epoch < self.freeze:
            return
        seen = np.isfinite(self.p_last)
        if seen.sum() >= 2:
            self.rank_sum[seen] += percentile(self.p_last[seen])
            self.rank_count[seen] += 1
        if self.method.update != "epoch":
            return
        target = self.target(self.p_last[seen])
        if self.piece == 0 and epoch == self.freeze:
            self.labels[seen] = target
        else:
            beta = self.method.beta
            self.labels[seen] = beta * self.labels[seen] + (1 - beta) * target

    def steps(self, epoch: int, rng: np.random.Generator) -> Iterator[Any]:
        order = rng.permutation(self.features.n_pairs)
        for start in range(0, len(order), self.method.batch_size):
            yield epoch, order[start:start + self.method.batch_size]

    def loss(self, model, step: Any, epoch: int) -> torch.Tensor:
        _, rows = step
        batch = self.features.batch(rows, self.device)
        sims = model.batch_similarity(batch)
        mask = batch.negatives
        used = self.used_labels(rows)
        if self.method.update == "batch":
            with torch.no_grad():
                row, column = matching_probabilities(sims, mask, self.method.temperature)
                p_hat = ((row.diagonal() + column.diagonal()) / 2).cpu().numpy()
            if not self._update_batch(rows, p_hat, epoch):
                used = self.used_labels(rows)  # trained on the labels it just wrote
        label = torch.as_tensor(used, dtype=torch.float32, device=self.device)
        loss, p_hat = acl_loss(sims, mask, label, self.method.temperature, self.method.lam)
        if self.method.measure == "train":
            self.p_now[rows] = p_hat.cpu().numpy()
        return loss

    def _update_batch(self, rows: np.ndarray, p_hat: np.ndarray, epoch: int) -> bool:
        """The authors' code (``train_self``), per batch before the step. Returns whether the
        step trains on the labels from before this update: in piece 1's last frozen epoch the
        step uses the old labels and the raw ``p_hat`` is written back as it is; after the
        freeze the momentum update is written back with the sticky zero and trained on."""
        freeze = self.freeze
        if self.piece == 0 and epoch == freeze - 1:
            self.labels[rows] = p_hat
            return True
        if epoch < freeze:
            return True
        beta = self.method.beta
        self.labels[rows] = beta * self.labels[rows] + (1 - beta) * p_hat
        low = self.labels[rows] < self.method.epsilon
        self.labels[rows[low]] = 0.0
        return False

    def end_epoch(self, model, epoch: int) -> dict[str, float]:
        if self.method.measure == "pool" and self.freeze - 1 <= epoch < self.pieces[self.piece] - 1:
            embeddings = embed(model, self.features, self.device,
                               dtype=kept_dtype(self.features))
            self.p_now = pool_matching_probability(
                embeddings, self.features, self.method.temperature, self.method.pool_size,
                self.seed).astype(np.float64)
        return {"mean_label": float(self.labels.mean()),
                "confident_noise_share": float((self.labels < self.method.epsilon).mean())}

    def state(self) -> dict[str, np.ndarray]:
        return {"labels": self.labels, "p_now": self.p_now, "rank_sum": self.rank_sum,
                "rank_count": self.rank_count}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.labels = state["labels"].astype(np.float64)
        self.p_now = state["p_now"].astype(np.float64)
        if "rank_sum" in state:
            self.rank_sum = state["rank_sum"].astype(np.float64)
            self.rank_count = state["rank_count"].astype(np.float64)

    def mean_rank(self) -> np.ndarray | None:
        """Each pair's percentile of ``p_hat`` averaged over every epoch that updated the labels,
        or None before the first."""
        if not (self.rank_count > 0).all():
            return None
        return self.rank_sum / self.rank_count


@dataclass
class CRCL(Method):
    """CRCL with the paper's defaults (``lam`` 5, ``temperature`` 0.05, ``beta`` 0.8, ``epsilon``
    0.1, AdamW 5e-4 with a drop every 15 epochs within a piece, batch 128, clip 2.0) except where
    :attr:`departures` says; frozen epochs and pieces per :func:`freeze_for` and
    :func:`pieces_for`."""

    name: ClassVar[str] = "crcl"
    min_pairs: ClassVar[int] = 1200
    summary: ClassVar[str] = ("CRCL (NeurIPS 2023): active complementary loss with self-refining "
                              "soft labels over restarted pieces")
    departures: ClassVar[tuple[str, ...]] = (
        "With update=epoch the labels move towards each pair's percentile of p_hat among the "
        "epoch's pairs (target=rank), not p_hat itself, whose scale a matcher trained from "
        f"scratch never reaches ({RESULTS}).",
        "In-batch negatives with the pair's image or caption text are masked out of every "
        "softmax, as in every loss here.",
        "clean_prob is the high-mean posterior of a tied two-component mixture fitted to the "
        "final labels (the paper gives no score), so it ranks pairs as the labels do.",
        "crcl_p is the final matcher's p_hat in eval mode, averaged over score_passes passes of "
        "fixed seeded batches.",
        "Frozen epochs and pieces follow the optimiser steps (about 320 frozen steps; the "
        "paper's [5, 5, 5, 30] after the freeze, scaled down for large corpora and a fifth for "
        "frozen image vectors, whose freeze is one epoch), not the paper's epoch counts "
        f"({RESULTS}).",
        "The matcher is this project's dual encoder trained from scratch (or heads on fixed "
        "vectors), not SGRAF or VSE-infinity on pretrained region features.",
    )

    pieces: tuple[int, ...] | None = param(
        None, rule="freeze_epochs plus the paper's [5, 5, 5, 30], scaled by the corpus size",
        help="epochs per piece, frozen epochs included, e.g. 7,7,7,32")
    freeze_epochs: int | None = param(
        None, low=0, rule="clip(round(320 / steps per epoch), 2, 10); 1 with frozen image "
        "vectors", help="frozen-label epochs at the start of each piece")
    lam: float = param(5.0, low=0, help="lambda, the weight of the complementary term (Eq. 9)")
    temperature: float = param(0.05, low=0, low_open=True, help="softmax temperature tau")
    beta: float = param(0.8, low=0, high=1, help="label momentum (Eq. 11)")
    epsilon: float = param(0.1, low=0, high=1, help="labels under this count as 0 in the loss")
    update: Literal["epoch", "batch"] = param(
        "epoch", help="labels updated once an epoch (the paper, Eq. 11) or per batch (the "
        "authors' code)")
    lr: float = param(5e-4, low=0, low_open=True, help="learning rate (AdamW)")
    lr_update: int = param(15, low=1, help="epochs between drops of the rate within a piece")
    batch_size: int = param(128, low=2, help="pairs per batch")
    grad_clip: float = param(2.0, low=0, help="gradient-norm clip (0: none)")
    score_passes: int = param(3, low=1, help="eval passes of fixed batches averaged for crcl_p")
    mixture: Literal["tied", "full"] = param(
        "tied", help="covariance of the final mixture: one shared variance, or one each")
    target: Literal["p", "posterior", "rank"] | None = param(
        None, rule="rank with update=epoch, p with update=batch",
        help="what the labels move towards: p_hat (the paper), a mixture posterior or the "
        "percentile of p_hat (ours)")
    measure: Literal["train", "pool"] = param(
        "train", help="each epoch's p_hat from the training batches (the paper), or an eval "
        "pass against a fixed pool (ours; update=epoch only)")
    pool_size: int = param(1024, low=1, help="pairs in the fixed pool of measure=pool")
    score: Literal["label", "mean-rank"] = param(
        "label", help="clean_prob ranks by the final labels, or by the percentile of p_hat "
        "averaged over the updating epochs (ours)")

    def check(self) -> None:
        self.pieces = parse_pieces(self.pieces)
        if self.measure != "train" and self.update != "epoch":
            raise BadOptionError(f"parameter 'measure' of 'crcl': measure={self.measure} needs "
                                 "update=epoch")
        if self.label_target != "p" and self.update != "epoch":
            raise BadOptionError(f"parameter 'target' of 'crcl': target={self.target} needs "
                                 "update=epoch (it reads the whole epoch's p_hat)")

    @property
    def label_target(self) -> str:
        """``target``, or when unset ``rank`` (``update="epoch"``) or ``p`` (``"batch"``)."""
        if self.target is not None:
            return self.target
        return "rank" if self.update == "epoch" else "p"

    def fit(self, features: Features, context: Context) -> MethodResult:
        frozen = context.frozen_images
        freeze = freeze_for(features.n_pairs, self.batch_size, self.freeze_epochs, frozen)
        pieces = pieces_for(features.n_pairs, self.batch_size, self.pieces, freeze, frozen)
        objective = SelfRefine(features, self, pieces, freeze, context.device, context.seed)
        history = []
        matcher = None
        for j, epochs in enumerate(pieces):
            objective.piece = j
            objective.p_now = np.full(features.n_pairs, np.nan)
            matcher = context.initial if (j == 0 and context.initial is not None) else \
                context.new_matcher(j)
            drops = tuple(range(self.lr_update, epochs, self.lr_update))
            config = TrainConfig.from_context(
                context, epochs=epochs, lr=self.lr, lr_drop_epochs=drops,
                grad_clip=self.grad_clip, seed=derive_seed(context.seed, "crcl-piece", j),
                checkpoint_dir=Path(context.checkpoint_dir) / f"piece-{j + 1}"
                if context.checkpoint_dir else None)
            history += [r | {"piece": j + 1} for r in train(matcher, objective, config,
                                                             context.progress)]
        matcher.eval()
        embeddings = embed(matcher, features, context.device, dtype=kept_dtype(features))
        p_hat = eval_p_hat(embeddings, features, self.temperature, self.batch_size,
                           self.score_passes, context.seed)
        labels = objective.labels.copy()
        mean_rank = objective.mean_rank()
        score = "label" if mean_rank is None else self.score
        clean_prob, fit = fit_clean_posterior(labels if score == "label" else mean_rank, "high",
                                              seed=context.seed, covariance=self.mixture)
        columns = {"crcl_label": labels.astype(np.float32), "crcl_p": p_hat,
                   "crcl_sim": embeddings.pair_similarity(features)}
        if mean_rank is not None:
            columns["crcl_rank_mean"] = mean_rank.astype(np.float32)
        return MethodResult(
            clean_prob=np.clip(clean_prob, 0.0, 1.0),
            columns=columns,
            matcher=matcher, embeddings=embeddings, noise_rate=fit.noise_rate,
            report={"pieces": list(pieces), "freeze_epochs": freeze, "target": self.label_target,
                    "measure": self.measure, "score": score,
                    "mixture": fit.as_dict(),
                    "history": history})
