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
loss only. ``update="batch"`` is the authors' code: each batch updates its pairs' labels from the
current forward pass and uses them in the same step; piece 1 overwrites the labels with the raw
``p_hat`` in its last frozen epoch; labels under ``epsilon`` are written back as 0 (the "sticky
zero"). ``benchmarks/RESULTS.md`` compares both.

Where this departs from both, on purpose:

- The labels move towards the *rank* of ``p_hat``, not ``p_hat`` itself (``target="rank"``, the
  default with ``update="epoch"``): each epoch, a pair's target is the percentile of its
  ``p_hat`` among all pairs, 0 for the lowest and 1 for the highest. The paper's rule assumes a
  clean pair's in-batch ``p_hat`` approaches 1, as it does on pretrained region features. A
  matcher trained from scratch never gets there: on clip art at 80% noise, after the frozen
  epochs a clean pair's ``p_hat`` has a median of 0.014 (chance in a batch of 128: 0.008), the
  first update puts 83% of all labels under ``epsilon``, and the active term stops training
  almost every pair, clean or not. The percentile keeps the ranking the matcher has and drops
  the scale it lacks. Measured on clip art (retrain splits, seed 0): AUROC 0.825 against the
  paper's rule's 0.638 at 80% noise, 0.923 against 0.865 at 50%, 0.952 against 0.915 at 20%;
  retrained on its clean partition, 51% of the noisy-to-oracle rSum gap at 50% (the paper's
  rule: below the raw corpus). The cost: percentiles are spread evenly whatever the noise, so
  the final mixture's noise estimate reads 42-52% at every level. ``-p target=p`` restores the
  paper's rule (``benchmarks/RESULTS.md``, "crcl with rank labels").
- Two options measure better and retrain worse, so neither is the default
  (``benchmarks/RESULTS.md``, "crcl: p_hat against a fixed pool"). ``measure="pool"`` measures
  the ``p_hat`` the labels move towards after each epoch, in eval mode, against one fixed seeded
  pool of ``pool_size`` pairs, instead of collecting it from the training batches as they pass
  (``measure="train"``, the paper, the code and the default), which mix a whole epoch of matcher
  states, dropout and 127 random negatives. ``score="mean-rank"`` ranks ``clean_prob`` by each
  pair's percentile of ``p_hat`` averaged over every epoch that updated the labels (the column
  ``crcl_rank_mean``, written whatever the score) instead of by the final labels
  (``score="label"``, the default): at 80% noise the labels peak early in the long last piece
  and decay as its matcher fits the noise. Clip art, retrain splits, seed 0, AUROC with both
  against the defaults: 0.854 against 0.825 at 80% noise, 0.941 against 0.923 at 50%, 0.956
  against 0.952 at 20% (``measure="pool"`` alone: 0.839, 0.933, 0.953). But a plain matcher
  retrained on the clean partition did worse at 80%: strict rSum 23.3 / 23.8 / 27.7 at seeds
  0-2 (pool alone 24.2 / 24.2) against 29.4 / 27.2 / 27.7, and at 20% the clean set keeps 194 of
  the 958 clean pairs with unique captions against 364. With both and seven pieces of 10 epochs
  at 80% noise on a GPU, five seeds with deterministic kernels: AUROC 0.8586 against gmm's
  0.8585, a tie; retrained (3,200 steps) 26.6 against gmm's 28.0, and 26.8 with ``vague`` added
  to reach the size of gmm's clean set (RESULTS.md, "crcl against gmm at 80% on a GPU: five
  seeds with deterministic kernels"). The same at 50% (seed 0, CPU): AUROC 0.936 against gmm's
  0.934, a clean set of 2,917 pairs with 7.1% noise that keeps 235 of the 609 unique-caption clean
  pairs, and retrained for 3,200 steps it ends *below* the raw corpus (48.7 against 53.2; gmm's
  set 53.7): the purer set drops the pairs a retrain needs (RESULTS.md, "The methods' own
  matchers").
- In-batch negatives with the pair's image or caption text are masked out of every softmax
  (another caption of the same picture, or a second "gramastar", is not a mismatch), as in every
  loss here.
- ``clean_prob`` is the posterior of the high-mean component of the shared two-component mixture
  fitted to the final labels (``crcl_label``; with ``score="mean-rank"`` to ``crcl_rank_mean``):
  both are ranks (or matching probabilities), not calibrated probabilities of being clean.
  ``crcl_p`` is the final matcher's ``p_hat`` in eval mode, averaged over ``score_passes``
  passes of fixed seeded batches (deterministic).
- Frozen epochs and pieces follow the optimiser steps, not the paper's epoch counts
  (:func:`freeze_for`, :func:`pieces_for`): on an 8,000-pair corpus 5 frozen epochs, pieces
  ``[10, 10, 10, 35]`` (about 4,100 steps of one matcher; ``gmm`` takes about 3,200 steps of
  each of its two); larger corpora get proportionally fewer epochs, and a head on fixed image
  vectors (an embedding column, CLIP heads) a fifth of the steps.
- ``clean_prob`` uses a mixture with one shared variance (``mixture="tied"``): its posterior is
  monotone in the label, so it ranks pairs as the labels do. With separate variances (the
  reference mixture) the wide component wins again at the extremes; measured on a 100-image
  synthetic corpus at 50% noise, AUROC 0.823 against the labels' 0.860 (0.860 with ``tied``).
  That was before the shared mixture's posterior was made monotone, which now flattens that
  reversal with either covariance.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ncclean.errors import BadOptionError
from ncclean.methods.base import Context, Method, MethodResult
from ncclean.methods.mixture import fit_clean_posterior
from ncclean.models.features import Features
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.losses import negative_mask
from ncclean.train.scoring import (
    Embeddings,
    embed,
    fixed_batches,
    kept_dtype,
    pool_matching_probability,
)

PAPER_AFTER_FREEZE = (5, 5, 5, 30)  # F30K: [7, 7, 7, 32] with 2 frozen epochs each
UPDATES = ("epoch", "batch")
TARGETS = ("p", "posterior", "rank")
SCORES = ("label", "mean-rank")
MEASURES = ("train", "pool")


def freeze_for(n_pairs: int, batch_size: int, freeze_epochs: int | None,
               frozen_images: bool = False) -> int:
    """Frozen epochs at the start of each piece: ``freeze_epochs`` when given, else
    ``clip(round(320 / steps_per_epoch), 2, 10)``, about the 320 steps a matcher trained from
    scratch needs before its ``p_hat`` means anything (the paper's 2 epochs are 2,266 steps on
    F30K; measured here: with 20 steps the first labels are ``p_hat`` ~ 1/B for every pair, all
    fall under ``epsilon`` and the active term never trains again). With ``frozen_images`` (the
    image tower a head on fixed vectors, which learns from the first batch)
    ``clip(round(64 / steps_per_epoch), 1, 10)``, as in :func:`ncclean.methods.gmm.schedule`."""
    if freeze_epochs is not None:
        return freeze_epochs
    steps = max(1, math.ceil(n_pairs / batch_size))
    if frozen_images:
        return int(np.clip(round(64 / steps), 1, 10))
    return int(np.clip(round(320 / steps), 2, 10))


def pieces_for(n_pairs: int, batch_size: int, pieces: tuple[int, ...] | str | None,
               freeze_epochs: int, frozen_images: bool = False) -> tuple[int, ...]:
    """Epochs per piece, frozen epochs included: ``pieces`` when given (a tuple, or
    ``"7,7,7,32"`` from the command line), else ``freeze_epochs`` plus the paper's epochs after
    the freeze, ``[5, 5, 5, 30]``, scaled by ``min(1, 64 / steps_per_epoch)`` so that large
    corpora are not trained for more steps than an 8,000-pair one, and by a further fifth with
    ``frozen_images``: a head on fixed image vectors memorises the noise within a few epochs
    (clip art at 80% noise with ImageNet features: AUROC 0.612 with pieces ``[11, 11, 11, 36]``,
    0.887 with ``[2, 2, 2, 7]``; ``benchmarks/RESULTS.md``, "A pretrained image tower")."""
    if isinstance(pieces, str):
        try:
            pieces = tuple(int(p) for p in pieces.replace(" ", "").split(",") if p)
        except ValueError:
            raise BadOptionError(f"pieces must be epochs per piece like 7,7,7,32, got "
                                 f"{pieces!r}") from None
    if pieces:
        if min(pieces) < 1:
            raise BadOptionError(f"every piece needs at least one epoch, got {pieces}")
        return tuple(pieces)
    steps = max(1, math.ceil(n_pairs / batch_size))
    scale = min(1.0, 64 / steps) / (5 if frozen_images else 1)
    return tuple(freeze_epochs + max(1, round(e * scale)) for e in PAPER_AFTER_FREEZE)


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
        rng = np.random.default_rng([seed, 4111, k])
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
        self.m = method
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
        return np.where(y < self.m.epsilon, 0.0, y)

    def target(self, p_hat: np.ndarray) -> np.ndarray:
        """What the labels move towards: ``p_hat`` itself (the paper); with
        ``target="posterior"`` the clean posterior of a two-component mixture fitted to the
        epoch's ``p_hat``; with ``target="rank"`` its percentile among the epoch's pairs, 0 for
        the lowest and 1 for the highest (both ours; see :class:`CRCL`)."""
        target = self.m.label_target
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
        if self.m.update != "epoch":
            return
        target = self.target(self.p_last[seen])
        if self.piece == 0 and epoch == self.freeze:
            self.labels[seen] = target
        else:
            beta = self.m.beta
            self.labels[seen] = beta * self.labels[seen] + (1 - beta) * target

    def steps(self, epoch: int, rng: np.random.Generator) -> Iterator[Any]:
        order = rng.permutation(self.features.n_pairs)
        for start in range(0, len(order), self.m.batch_size):
            yield epoch, order[start:start + self.m.batch_size]

    def loss(self, model, step: Any, epoch: int) -> torch.Tensor:
        _, rows = step
        batch = self.features.batch(rows, self.device)
        sims = model.encode_images(*batch.images) @ model.encode_texts(*batch.texts).T
        mask = negative_mask(batch.image_group, batch.text_group)
        if self.m.update == "batch":
            with torch.no_grad():
                row, column = matching_probabilities(sims, mask, self.m.temperature)
                p_hat = ((row.diagonal() + column.diagonal()) / 2).cpu().numpy()
            self._update_batch(rows, p_hat, epoch)
        label = torch.as_tensor(self.used_labels(rows), dtype=torch.float32, device=self.device)
        loss, p_hat = acl_loss(sims, mask, label, self.m.temperature, self.m.lam)
        if self.m.measure == "train":
            self.p_now[rows] = p_hat.cpu().numpy()
        return loss

    def _update_batch(self, rows: np.ndarray, p_hat: np.ndarray, epoch: int) -> None:
        """The authors' code: per batch, before the step, with the sticky zero."""
        freeze = self.freeze
        if self.piece == 0 and epoch == freeze - 1:
            self.labels[rows] = p_hat
        elif epoch >= freeze:
            beta = self.m.beta
            self.labels[rows] = beta * self.labels[rows] + (1 - beta) * p_hat
        else:
            return
        low = self.labels[rows] < self.m.epsilon
        self.labels[rows[low]] = 0.0

    def end_epoch(self, model, epoch: int) -> dict[str, float]:
        if self.m.measure == "pool" and self.freeze - 1 <= epoch < self.pieces[self.piece] - 1:
            embeddings = embed(model, self.features, self.device,
                               dtype=kept_dtype(self.features))
            self.p_now = pool_matching_probability(
                embeddings, self.features, self.m.temperature, self.m.pool_size,
                self.seed).astype(np.float64)
        return {"mean_label": float(self.labels.mean()),
                "confident_noise_share": float((self.labels < self.m.epsilon).mean())}

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
    """CRCL with the paper's defaults: ``lam`` 5, ``temperature`` 0.05, ``beta`` 0.8,
    ``epsilon`` 0.1, AdamW 5e-4 with a drop every ``lr_update`` epochs within a piece (15,
    F30K), batch 128, clip 2.0; ``freeze_epochs`` and ``pieces`` per :func:`freeze_for` and
    :func:`pieces_for`; ``update`` ``epoch`` (paper) or ``batch`` (code); ``mixture`` the
    covariance of the final mixture (``tied`` or the reference ``full``).

    ``target``: what the labels move towards. ``rank`` (ours, the default with
    ``update="epoch"``) the percentile of each pair's ``p_hat`` in the epoch (see the module
    docstring); ``p`` (the paper, and the only choice with ``update="batch"``) ``p_hat`` itself;
    ``posterior`` (ours) the clean posterior of a two-component mixture fitted to the epoch's
    ``p_hat``, NCR's division used as a calibrated target. The calibrated target did not help
    (clip art, 80%: AUROC 0.598 against the paper's rule's 0.634; ``benchmarks/RESULTS.md``): the
    first separation after the freeze is poor and the near-binary labels lock it in. The rank
    stays soft, so later pieces can still reorder it.

    ``measure``: where each epoch's ``p_hat`` comes from: ``train`` (the paper, the code and the
    default) the training batches as they pass; ``pool`` (ours) the eval-mode matcher after the
    epoch against a fixed pool of ``pool_size`` pairs. ``score``: what ``clean_prob`` ranks by:
    ``label`` (the default) the final labels; ``mean-rank`` (ours) each pair's percentile of
    ``p_hat`` averaged over the updating epochs. Both rank noise better and retrain worse (see
    the module docstring)."""

    name: ClassVar[str] = "crcl"
    default_rules: ClassVar[dict[str, str]] = {
        "target": "'rank' with update=epoch, 'p' with update=batch"}
    summary: ClassVar[str] = ("CRCL (NeurIPS 2023): active complementary loss with self-refining "
                              "soft labels over restarted pieces")

    pieces: tuple[int, ...] | None = None
    freeze_epochs: int | None = None
    lam: float = 5.0
    temperature: float = 0.05
    beta: float = 0.8
    epsilon: float = 0.1
    update: str = "epoch"
    lr: float = 5e-4
    lr_update: int = 15
    batch_size: int = 128
    grad_clip: float = 2.0
    score_passes: int = 3
    mixture: str = "tied"
    target: str | None = None
    measure: str = "train"
    pool_size: int = 1024
    score: str = "label"

    @property
    def label_target(self) -> str:
        """``target``, or when unset ``rank`` (``update="epoch"``) or ``p`` (``"batch"``)."""
        if self.target is not None:
            return self.target
        return "rank" if self.update == "epoch" else "p"

    def fit(self, features: Features, context: Context) -> MethodResult:
        if self.update not in UPDATES:
            raise BadOptionError(f"update must be one of {UPDATES}, got {self.update!r}")
        frozen = context.frozen_images
        freeze = freeze_for(features.n_pairs, self.batch_size, self.freeze_epochs, frozen)
        pieces = pieces_for(features.n_pairs, self.batch_size, self.pieces, freeze, frozen)
        if self.target is not None and self.target not in TARGETS:
            raise BadOptionError(f"target must be one of {TARGETS}, got {self.target!r}")
        if self.score not in SCORES:
            raise BadOptionError(f"score must be one of {SCORES}, got {self.score!r}")
        if self.measure not in MEASURES:
            raise BadOptionError(f"measure must be one of {MEASURES}, got {self.measure!r}")
        if self.measure != "train" and self.update != "epoch":
            raise BadOptionError(f"measure={self.measure} needs update=epoch")
        if self.label_target != "p" and self.update != "epoch":
            raise BadOptionError(f"target={self.target} needs update=epoch (it reads the whole "
                                 "epoch's p_hat)")
        objective = SelfRefine(features, self, pieces, freeze, context.device, context.seed)
        history = []
        matcher = None
        for j, epochs in enumerate(pieces):
            objective.piece = j
            objective.p_now = np.full(features.n_pairs, np.nan)
            matcher = context.initial if (j == 0 and context.initial is not None) else \
                context.new_matcher(j)
            drops = tuple(range(self.lr_update, epochs, self.lr_update))
            config = TrainConfig(
                epochs=epochs, lr=self.lr, lr_drop_epochs=drops, grad_clip=self.grad_clip,
                seed=context.seed * 7 + j, device=context.device,
                checkpoint_dir=Path(context.checkpoint_dir) / f"piece-{j + 1}"
                if context.checkpoint_dir else None, resume=context.resume)
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
