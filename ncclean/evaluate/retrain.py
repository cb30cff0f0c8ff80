"""Retraining: does a model trained on what a cleaner kept retrieve better?

Each *arm* trains a fresh plain matcher (no noise handling) on a selection of the scored corpus
and evaluates image-to-text and text-to-image Recall@K on a held-out test set:

- ``cleaned``: the pairs the cleaner kept (``keep``: ``clean``, ``significant`` (the
  ``clean_significant`` partition alone), ``clean+vague``, or ``weighted``, all valid pairs with
  ``clean_prob`` as the loss weight), optionally with the ``noisy`` pairs' captions replaced by
  their pseudo-captions;
- ``noisy`` (the baseline): every valid pair, as a plain matcher would see the raw corpus;
- ``oracle``: the truly clean pairs (``noisy_gt`` false), when the corpus has injected noise.

Every arm has the same architecture, seed and number of optimiser steps, so only the data
differs. The loss is the symmetric InfoNCE (temperature 0.05) over in-batch negatives, with the
same image or caption text masked out as everywhere here; AdamW at 2e-4, batch 128, clip 2.0.

With ``eval_every`` an arm also records its learning curve: the test metrics at the first epoch
end after every ``eval_every`` steps, and at the last step. Evaluating draws no random numbers,
so the final metrics are the same with or without it, and with the constant rate the curve's
point at step ``s`` is what ``steps = s`` would give. :func:`late_slope` reads from the curve
whether an arm was still improving when it stopped (an arm still rising flatters the smaller
set that converged sooner: ``docs/retraining.md``). ``schedule="cosine"`` decays the rate
to 0 over the steps, which steadies the last readings but, at the same step budget, ends every
arm lower; its curve flattens as the rate falls, so a small late slope means less with it.
:func:`best_stretch` reads the opposite: an arm that peaked and fell. With both towers heads on
fixed pretrained vectors (ImageNet image features and e5 captions at 50% noise) every arm peaked
within 400-1,400 steps and ended 2-14 rSum lower at 3,200, where the CNN's arms fell by at most
2.3.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ncclean.data.results import CLEAN, CLEAN_SIGNIFICANT, NOISY, PARTITIONS, VAGUE
from ncclean.evaluate.retrieval import retrieval_metrics
from ncclean.models.features import Features
from ncclean.models.matcher import MatcherConfig, build_matcher
from ncclean.progress import Progress, no_progress
from ncclean.records import Summary
from ncclean.seeds import derive_seed
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.losses import contrastive_ce
from ncclean.train.scoring import embed as embed_pairs

KEEPS = ("clean", "significant", "clean+vague", "weighted")
SCHEDULES = ("cosine", "constant")
RISING = 5.0  # rSum per 1,000 steps over a curve's second half: the arm was still improving
FALLING = 5.0  # rSum between a curve's best stretch and its end: the arm was past its best
SMALL = 0.1  # a cleaned arm with under this share of the valid pairs: warn that it is small


@dataclass(frozen=True)
class RetrainConfig:
    """How every arm trains. Each arm also reports its learning curve: test rSum every
    ``eval_every`` steps at epoch ends (0: off), how fast it was still rising over the curve's
    second half (``late_slope``), and its best stretch and how far the end fell below it
    (``best``); the summary's verdicts say which arms were ``still_improving`` or ``past_best``
    and whether the cleaned arm is a ``small_selection``. ``schedule``: the learning rate,
    ``constant`` or ``cosine`` (from ``lr`` down to 0 over the steps)."""

    steps: int = 1600
    batch_size: int = 128
    lr: float = 2e-4
    temperature: float = 0.05
    grad_clip: float = 2.0
    eval_every: int = 0  # 0: no learning curve
    schedule: str = "constant"  # or "cosine": the rate decays to 0 over the steps


@dataclass(frozen=True)
class Arm:
    """A training selection: ``pairs`` (indices into the features), per-pair loss ``weights``
    and, for pseudo-captions, replaced ``text_group`` values (``None`` or -1: the pair's own)."""

    name: str
    pairs: np.ndarray
    weights: np.ndarray
    text_group: np.ndarray | None = None


def cleaned_arm(partition: np.ndarray, clean_prob: np.ndarray, keep: str,
                pseudo_text_group: np.ndarray | None = None) -> Arm:
    """The cleaner's selection. ``partition``, ``clean_prob``: per pair of the features;
    ``pseudo_text_group``: per pair, the pseudo-caption's text group (-1 for none), which both
    replaces the noisy pairs' captions and adds those pairs to the selection."""
    if keep not in KEEPS:
        raise ValueError(f"keep must be one of {KEEPS}, got {keep!r}")
    n = len(partition)
    if keep == "weighted":
        chosen = np.ones(n, dtype=bool)
        weights = np.clip(np.nan_to_num(clean_prob, nan=0.0), 0.0, 1.0)
    else:
        names = {"clean": CLEAN, "significant": (CLEAN_SIGNIFICANT,),
                 "clean+vague": CLEAN + (VAGUE,)}[keep]
        chosen = np.isin(partition, names)
        weights = np.ones(n)
    text_group = None
    if pseudo_text_group is not None:
        swapped = (partition == NOISY) & (pseudo_text_group >= 0)
        chosen |= swapped
        weights = np.where(swapped, 1.0, weights)
        text_group = pseudo_text_group
    return Arm("cleaned", np.flatnonzero(chosen), weights[chosen],
               None if text_group is None else text_group[chosen])


class Plain(Objective):
    """Weighted symmetric InfoNCE over shuffled batches of the arm, for exactly ``steps``
    optimiser steps in all."""

    stage = "retrain"

    def __init__(self, features: Features, weights: np.ndarray, config: RetrainConfig,
                 device: str, test: Features | None = None):
        self.features = features
        self.weights = torch.as_tensor(weights, dtype=torch.float32)
        self.config = config
        self.device = device
        self.per_epoch = max(1, math.ceil(features.n_pairs / config.batch_size))
        self.test = test
        self.curve: list[dict[str, float]] = []

    def steps(self, epoch: int, rng: np.random.Generator) -> Iterator[Any]:
        left = self.config.steps - epoch * self.per_epoch
        order = rng.permutation(self.features.n_pairs)
        for k, start in enumerate(range(0, len(order), self.config.batch_size)):
            if k >= left:
                return
            yield order[start:start + self.config.batch_size]

    def loss(self, model, step: Any, epoch: int) -> torch.Tensor:
        batch = self.features.batch(step, self.device)
        sims = model.batch_similarity(batch)
        i2t, t2i = contrastive_ce(sims, batch.negatives, self.config.temperature)
        weights = self.weights[step].to(self.device)
        return (weights * (i2t + t2i) / 2).sum() / weights.sum().clamp(min=1e-8)

    def end_epoch(self, model, epoch: int) -> dict[str, float]:
        every = self.config.eval_every
        if not every or self.test is None:
            return {}
        done = min((epoch + 1) * self.per_epoch, self.config.steps)
        before = min(epoch * self.per_epoch, self.config.steps)
        if done // every == before // every and done != self.config.steps:
            return {}
        metrics = evaluate(model, self.test, self.device)
        self.curve.append({"step": done, "rsum": metrics["strict"]["rsum"],
                           "rsum_by_text": metrics["by_text"]["rsum"]})
        return {"test_rsum": metrics["strict"]["rsum"]}


def train_arm(features: Features, arm: Arm, matcher_config: MatcherConfig,
              config: RetrainConfig, seed: int, device: str = "cpu",
              progress: Progress = no_progress, test: Features | None = None):
    """A fresh matcher (seeded as every other arm's) trained on the arm's pairs, and its
    learning curve on ``test`` (empty unless ``config.eval_every``)."""
    subset = features.subset(arm.pairs)
    if arm.text_group is not None:  # -1: the pair keeps its own caption
        swapped = np.where(arm.text_group >= 0, arm.text_group, subset.text_group)
        subset = replace(subset, text_group=swapped)
    matcher = build_matcher(matcher_config, seed=derive_seed(seed, "retrain-matcher"))
    objective = Plain(subset, arm.weights, config, device, test)
    epochs = math.ceil(config.steps / objective.per_epoch)
    decay = config.steps if config.schedule == "cosine" else 0
    train(matcher, objective, TrainConfig(epochs=epochs, lr=config.lr, grad_clip=config.grad_clip,
                                          decay_steps=decay, seed=seed, device=device), progress)
    return matcher.eval(), objective.curve


def evaluate(matcher, test: Features, device: str = "cpu") -> dict[str, dict[str, float]]:
    """Recall@1/5/10 both ways and rSum on ``test``, strict (the caption's own image) and by
    text identity (any caption with the same text as one of the image's): image-to-text over
    the images of the test pairs, text-to-image over their captions.

    The image table may hold more than the test images (pairs held out of the scored corpus
    share its table), so only the images the test pairs use are queries and candidates."""
    embeddings = embed_pairs(matcher, test, device)
    images, text_image = np.unique(test.image_group, return_inverse=True)
    sims = embeddings.images[images] @ embeddings.texts[test.text_group].T
    strict = retrieval_metrics(sims, text_image)
    by_text = retrieval_metrics(sims, text_image, test.text_group)
    return {"strict": strict.as_dict(), "by_text": by_text.as_dict()}


def run_arms(features: Features, test: Features, arms: list[Arm],
             matcher_config: MatcherConfig, config: RetrainConfig, seed: int,
             device: str = "cpu", progress: Progress = no_progress) -> dict[str, dict]:
    """Train and evaluate every arm; per arm its size, metrics, seconds and, with
    ``config.eval_every``, its learning curve."""
    out = {}
    for arm in arms:
        began = time.perf_counter()
        matcher, curve = train_arm(features, arm, matcher_config, config, seed, device, progress,
                                   test)
        out[arm.name] = {"n_pairs": int(len(arm.pairs)), **evaluate(matcher, test, device),
                         "seconds": time.perf_counter() - began}
        if config.eval_every:
            out[arm.name] |= {"curve": curve, "late_slope": late_slope(curve),
                              "best": best_stretch(curve)}
    return out


def late_slope(curve: list[dict[str, float]]) -> float | None:
    """The least-squares slope of strict rSum against steps over the second half of a learning
    curve (the points after half its last step), in rSum per 1,000 steps; None with fewer than
    three points there."""
    if not curve:
        return None
    last = curve[-1]["step"]
    late = np.array([(p["step"], p["rsum"]) for p in curve if p["step"] > last / 2], dtype=float)
    if len(late) < 3 or np.ptp(late[:, 0]) == 0:
        return None
    return float(np.polyfit(late[:, 0], late[:, 1], 1)[0] * 1000)


def best_stretch(curve: list[dict[str, float]], span: int = 3) -> dict[str, float] | None:
    """The best mean strict rSum over ``span`` consecutive points of a learning curve, the step
    of the stretch's last point, and ``drop``: how far the last ``span`` points' mean lies below
    it. One reading moves by several rSum from one evaluation to the next, so single points would
    make every curve look past its best; None with fewer than ``2 * span`` points."""
    if len(curve) < 2 * span:
        return None
    rsum = np.array([p["rsum"] for p in curve], dtype=float)
    means = np.convolve(rsum, np.ones(span) / span, mode="valid")
    top = int(np.argmax(means))
    return {"step": int(curve[top + span - 1]["step"]), "rsum": float(means[top]),
            "drop": float(means[top] - means[-1])}


def gap_recovered(arms: dict[str, dict], cleaned: str) -> float | None:
    """The share of the noisy-to-oracle strict rSum gap that the cleaned arm recovers (1 = as
    good as the oracle, above 1 = better, below 0 = worse than the raw corpus)."""
    if "noisy" not in arms or "oracle" not in arms:
        return None
    low, high = arms["noisy"]["strict"]["rsum"], arms["oracle"]["strict"]["rsum"]
    if abs(high - low) < 1e-9:
        return None
    return (arms[cleaned]["strict"]["rsum"] - low) / (high - low)


def selection_arms(partition_codes: np.ndarray, clean_prob: np.ndarray, keep: str, *,
                   pseudo_text_group: np.ndarray | None = None, baseline: bool = False,
                   noisy_gt: np.ndarray | None = None) -> list[Arm]:
    """The arms of a retrain over the scored corpus's valid pairs (``(n,)`` each, in feature
    order): ``partition_codes`` (indices into :data:`~ncclean.data.results.PARTITIONS`),
    ``clean_prob`` and, for ``keep``, :func:`cleaned_arm`; with ``baseline`` also ``noisy``
    (every pair) and, with ``noisy_gt`` (``(n,) bool``), ``oracle`` (the truly clean pairs)."""
    from ncclean.errors import BadOptionError

    partition = np.asarray(PARTITIONS, dtype=object)[partition_codes]
    arm = cleaned_arm(partition, clean_prob, keep, pseudo_text_group)
    if len(arm.pairs) < 2:
        raise BadOptionError(f"--keep {keep} selects {len(arm.pairs)} pairs; nothing to train on")
    arms = [arm]
    if baseline:
        everyone = np.arange(len(partition))
        arms.append(Arm("noisy", everyone, np.ones(len(everyone))))
        if noisy_gt is not None:
            arms.append(Arm("oracle", np.flatnonzero(~noisy_gt), np.ones(int((~noisy_gt).sum()))))
    return arms


def pseudo_text_groups(donor_ids: list, pair_ids: list, text_group: np.ndarray,
                       rows: np.ndarray) -> np.ndarray:
    """``(n,) int64``: per valid pair (its input row in ``rows``), the text group of its
    pseudo-caption's donor, -1 for none. ``donor_ids``: the scored file's ``pseudo_caption_id``
    per input row; ``pair_ids``: the corpus's pair ids; ``text_group``: per input row."""
    row_of = {pair_id: row for row, pair_id in enumerate(pair_ids)}
    donor_row = np.array([row_of.get(d, -1) if d is not None else -1 for d in donor_ids])[rows]
    return np.where(donor_row >= 0, text_group[np.maximum(donor_row, 0)], -1)


@dataclass(frozen=True)
class Verdicts:
    """What a reader should know before comparing the arms: ``still_improving`` (arm -> its
    late slope, at least :data:`RISING` rSum per 1,000 steps), ``past_best`` (arm -> its best
    stretch, fallen by at least :data:`FALLING` at the end) and ``small_selection`` (the cleaned
    arm holds under :data:`SMALL` of the valid pairs)."""

    still_improving: dict[str, float]
    past_best: dict[str, dict]
    small_selection: bool


def verdicts(arms: dict[str, dict], n_valid: int | None) -> Verdicts:
    """The :class:`Verdicts` on the results of :func:`run_arms` (``arms``) over ``n_valid``
    valid pairs."""
    rising = {arm: result["late_slope"] for arm, result in arms.items()
              if (result.get("late_slope") or 0) >= RISING}
    past = {arm: result["best"] for arm, result in arms.items()
            if (result.get("best") or {}).get("drop", 0) >= FALLING}
    cleaned = arms.get("cleaned", {}).get("n_pairs")
    small = bool(n_valid and cleaned is not None and cleaned < SMALL * n_valid)
    return Verdicts(rising, past, small)


def saved_matcher_result(saved, path: str, method: str | None, test: Features,
                         device: str = "cpu") -> dict:
    """The ``matcher`` arm: Recall@K of ``saved`` (loaded from ``path``, trained by ``method``)
    on ``test`` as it is, with no training."""
    began = time.perf_counter()
    return {"n_pairs": None, "path": path, "method": method, **evaluate(saved, test, device),
            "seconds": time.perf_counter() - began}


@dataclass(frozen=True)
class RetrainSummary(Summary):
    """What a retrain measured: per arm its training size and Recall@K (strict and by text
    identity), the share of the noisy-to-oracle rSum gap the cleaned arm recovered, and the
    :class:`Verdicts` (``still_improving``, ``past_best``, ``small_selection``). ``test`` is
    ``None`` when the test pairs were held out of ``input``; ``warnings``: sentences about the
    test set (held out of the corpus, or overlapping the training pairs)."""

    input: Path
    test: Path | None
    n_test: int
    steps: int
    schedule: str
    seed: int
    keep: str
    pseudo_captions: bool
    image_encoder: str
    text_encoder: str
    arms: dict[str, dict]
    gap_recovered: float | None
    n_valid: int | None = None  # the scored corpus's valid pairs, which the arms select from
    still_improving: dict[str, float] = field(default_factory=dict)
    past_best: dict[str, dict] = field(default_factory=dict)
    small_selection: bool = False
    warnings: list[str] = field(default_factory=list)
