"""Significance: which clean pairs are worth training on, after any method.

Two measures, both ending in ``significance`` (>= 1 means ``clean_significant``):

``mode="update"`` — Self-Drop & Dual-Weight (SDD, Sec. 3.4, Eq. 9-11, after NPC). Every clean
pair gets a memory bank entry: the most similar *confident-clean* pair by image-image and by
text-text similarity (excluding itself and the other captions of its image). For each batch, a
copy of the trained matcher takes one step on the batch's confidence-weighted InfoNCE, and the
memory entries' losses before and after are compared:
``c = 1/2 (l_i2t[before] / l_i2t[after] + l_t2i[before] / l_t2i[after])``. The update is the
whole batch's, so ``c`` is a noisy batch-level signal: it is averaged over ``passes`` shuffled
passes (``benchmarks/RESULTS.md`` measures how many are needed).

``mode="specificity"`` (default, ours) — how much a caption says about its image. Against a
pool of ``K`` confident-clean images, the caption's text-to-image probability of its own image,
``p = softmax(cos / temperature)``, measures what the caption tells: ``log2(K p)`` bits, out of
the ``log2(K)`` needed to single the image out. ``significance = log(K p) / (share * log K)``, so
a caption carrying at least ``share`` (default a quarter) of those bits is significant (>= 1).
Collection names such as "gramastar" fit hundreds of images equally and carry almost none. The
pool holds at most ``bank_size`` pairs, and fewer for corpora so large that every candidate
against it would exceed the stages' search budget (:data:`ncclean.stages.SEARCH_BUDGET`).
Users asked for these correct-but-empty pairs to leave ``clean_significant``; SDD's ratio does
not move them (it marks them significant *more* often than other clean pairs: measured in
``benchmarks/RESULTS.md``). ``score`` leaves a caption the corpus uses at most ``--rare-count``
times significant whatever its specificity: such a caption is no collection name, and its low
specificity is the space not knowing its words (``api._run_stages``; "Training on
``clean_significant``" in the results).

Departures from SDD in ``update`` mode: the copy takes a plain SGD step of ``step_size`` in eval
mode (SDD fine-tunes CLIP with AdamW at 2e-7 in training mode), which keeps the probe
deterministic; memory-entry cross-entropies mask duplicate images and captions like every
in-batch loss here.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch

from ncclean.models.features import Features
from ncclean.progress import Progress, no_progress
from ncclean.stages import reference_cap
from ncclean.train.losses import contrastive_ce, negative_mask
from ncclean.train.scoring import Embeddings, embed

MODES = ("specificity", "update")
_BLOCK = 2048


@dataclass(frozen=True)
class SignificanceConfig:
    """Settings of the significance stage (defaults documented in the module docstring)."""

    mode: str = "specificity"
    bank_threshold: float = 0.9
    bank_size: int = 20_000
    temperature: float = 0.02
    share: float = 0.25
    passes: int = 3
    batch_size: int = 128
    step_size: float = 0.05


def confident_pool(clean_prob: np.ndarray, candidates: np.ndarray, threshold: float,
                   size: int, seed: int) -> np.ndarray:
    """Pairs trusted as references: candidates with ``clean_prob >= threshold`` (at least the top
    10% of candidates when few pass), at most ``size`` of them drawn by seed. Sorted indices."""
    pool = np.flatnonzero(candidates & (clean_prob >= threshold))
    minimum = max(2, int(0.1 * candidates.sum()))
    if len(pool) < minimum:
        ranked = np.flatnonzero(candidates)[np.argsort(-clean_prob[candidates], kind="stable")]
        pool = np.sort(ranked[:minimum])
    if len(pool) > size:
        pool = np.sort(np.random.default_rng([seed, 31]).choice(pool, size, replace=False))
    return pool


def nearest_in_pool(table: np.ndarray, index: np.ndarray, keys: np.ndarray, pool: np.ndarray,
                    image_group: np.ndarray) -> np.ndarray:
    """For every pair ``i`` in ``keys``, the pool pair ``j`` maximising ``v(i) . v(j)`` among
    those showing another image than ``i`` (so neither ``i`` itself nor another caption of its
    picture), with ``v(i) = table[index[i]]``: the matcher's image or caption table and the pairs'
    groups, so nothing is copied per pair. Returns ``(len(keys),) int64`` pair indices (-1 if
    none)."""
    pool_vectors = torch.from_numpy(table[index[pool]].astype(np.float32, copy=False))
    pool_group = torch.from_numpy(image_group[pool])
    out = np.full(len(keys), -1, dtype=np.int64)
    for start in range(0, len(keys), _BLOCK):
        rows = keys[start:start + _BLOCK]
        queries = torch.from_numpy(table[index[rows]].astype(np.float32, copy=False))
        sims = queries @ pool_vectors.T
        same = torch.from_numpy(image_group[rows])[:, None] == pool_group[None, :]
        sims = sims.masked_fill(same, float("-inf"))
        best = sims.max(dim=1)
        found = torch.isfinite(best.values).numpy()
        out[start:start + len(rows)] = np.where(found, pool[best.indices.numpy()], -1)
    return out


def memory_entries(embeddings: Embeddings, features: Features, pool: np.ndarray) \
        -> tuple[np.ndarray, np.ndarray]:
    """Every pair's memory entries among ``pool``: the pair with the most similar image and the
    one with the most similar caption (:func:`nearest_in_pool`)."""
    keys = np.arange(features.n_pairs)
    return (nearest_in_pool(embeddings.images, features.image_group, keys, pool,
                            features.image_group),
            nearest_in_pool(embeddings.texts, features.text_group, keys, pool,
                            features.image_group))


def specificity(embeddings: Embeddings, features: Features, candidates: np.ndarray,
                pool: np.ndarray, temperature: float, share: float = 0.25) -> np.ndarray:
    """``(n,)``: the specificity significance of every candidate (NaN elsewhere). The pair's own
    image is excluded from the pool's by position (one entry per row), not by a mask."""
    pool_groups = np.unique(features.image_group[pool])
    pool_images = torch.from_numpy(embeddings.images[pool_groups]).float()
    k = len(pool_groups) + 1  # the pool's images and the pair's own
    out = np.full(features.n_pairs, np.nan)
    rows = np.flatnonzero(candidates)
    for start in range(0, len(rows), _BLOCK):
        block = rows[start:start + _BLOCK]
        groups = features.image_group[block]
        texts = torch.from_numpy(embeddings.texts[features.text_group[block]]).float()
        own = (texts * torch.from_numpy(embeddings.images[groups]).float()).sum(1)
        others = texts @ pool_images.T
        position = np.minimum(np.searchsorted(pool_groups, groups), len(pool_groups) - 1)
        inside = np.flatnonzero(pool_groups[position] == groups)
        others[torch.from_numpy(inside), torch.from_numpy(position[inside])] = float("-inf")
        logits = torch.cat([own[:, None], others], dim=1) / temperature
        log_p = torch.log_softmax(logits, dim=1)[:, 0]
        out[block] = ((log_p + math.log(k)) / (share * math.log(k))).numpy()
    return out


def _bank_losses(matcher, features: Features, entries: np.ndarray, device: str,
                 temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Image-to-text and text-to-image cross-entropies of memory entries ``entries`` (pair
    indices) against each other, ``(B,)`` each."""
    batch = features.batch(entries, device)
    sims = matcher.encode_images(*batch.images) @ matcher.encode_texts(*batch.texts).T
    return contrastive_ce(sims, negative_mask(batch.image_group, batch.text_group), temperature)


class Probe:
    """SDD's siamese model (Eq. 9-10): a copy of a matcher that, for one batch, measures the
    memory entries' losses, takes one plain SGD step of ``step_size`` on the batch's weighted
    InfoNCE in eval mode, and measures them again. ``ratio`` returns ``c`` per pair of the batch.
    ``neighbours``: each pair's memory entries by image and by text (pair indices)."""

    def __init__(self, matcher, features: Features, neighbours: tuple[np.ndarray, np.ndarray],
                 temperature: float, step_size: float, device: str = "cpu"):
        self.model = copy.deepcopy(matcher).to(device).eval()
        self.features, self.device = features, device
        self.image_entry, self.text_entry = neighbours
        self.temperature, self.step_size = temperature, step_size

    def _bank(self, pairs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 9 for the batch's memory entries under the probe:
        ``l_i2t = CE_i2t(image entry) + CE_i2t(text entry)``, ``l_t2i`` likewise."""
        by_image, by_text = (
            _bank_losses(self.model, self.features, entries[pairs], self.device,
                         self.temperature) for entries in (self.image_entry, self.text_entry))
        return by_image[0] + by_text[0], by_image[1] + by_text[1]

    def ratio(self, state: dict[str, torch.Tensor], pairs: np.ndarray,
              weights: torch.Tensor) -> torch.Tensor:
        """``c`` of Eq. 10 for ``pairs`` after a step from the weights ``state``; ``weights``
        ``(B,)`` are the per-pair loss weights of the step (SDD's ``w_con``)."""
        probe = self.model
        probe.load_state_dict(state)
        with torch.no_grad():
            i2t_before, t2i_before = self._bank(pairs)
        batch = self.features.batch(pairs, self.device)
        # cuDNN's GRU has no backward in eval mode; the native kernels (slower) have one
        with torch.backends.cudnn.flags(enabled=False):
            sims = probe.encode_images(*batch.images) @ probe.encode_texts(*batch.texts).T
            i2t, t2i = contrastive_ce(sims, negative_mask(batch.image_group, batch.text_group),
                                      self.temperature)
            loss = (weights * (i2t + t2i) / 2).mean()
            probe.zero_grad(set_to_none=True)
            loss.backward()
        with torch.no_grad():
            for parameter in probe.parameters():
                if parameter.grad is not None:
                    parameter.add_(parameter.grad, alpha=-self.step_size)
            i2t_after, t2i_after = self._bank(pairs)
        return 0.5 * (i2t_before / i2t_after.clamp(min=1e-12) +
                      t2i_before / t2i_after.clamp(min=1e-12))


def update_ratio(matcher, features: Features, clean_prob: np.ndarray, candidates: np.ndarray,
                 neighbours: tuple[np.ndarray, np.ndarray], config: SignificanceConfig,
                 seed: int, device: str = "cpu",
                 progress: Progress = no_progress) -> tuple[np.ndarray, np.ndarray]:
    """SDD's ratio ``c`` per candidate, averaged over ``config.passes`` shuffled passes.

    Returns ``(mean_c, per_pass)`` with ``mean_c`` ``(n,)`` (NaN off the candidates) and
    ``per_pass`` ``(passes, n)``."""
    image_entry, text_entry = neighbours
    rows = np.flatnonzero(candidates & (image_entry >= 0) & (text_entry >= 0))
    weights = torch.as_tensor(clean_prob, dtype=torch.float32)
    probe = Probe(matcher, features, neighbours, config.temperature, config.step_size, device)
    base_state = {k: v.clone() for k, v in probe.model.state_dict().items()}
    per_pass = np.full((config.passes, features.n_pairs), np.nan)
    steps = math.ceil(len(rows) / config.batch_size) * config.passes
    done = 0
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        for k in range(config.passes):
            order = np.random.default_rng([seed, 53, k]).permutation(rows)
            for start in range(0, len(order), config.batch_size):
                pairs = order[start:start + config.batch_size]
                ratio = probe.ratio(base_state, pairs, weights[pairs].to(device))
                per_pass[k, pairs] = ratio.detach().cpu().numpy()
                done += 1
                progress("significance", done, steps)
    finally:
        torch.random.set_rng_state(generator_state)
    mean = per_pass[0].copy()
    if config.passes > 1:
        seen = np.isfinite(per_pass).any(axis=0)
        mean[seen] = np.nanmean(per_pass[:, seen], axis=0)
    return mean, per_pass


def significance(matcher, features: Features, clean_prob: np.ndarray, candidates: np.ndarray,
                 config: SignificanceConfig = SignificanceConfig(), *, seed: int = 0,
                 device: str = "cpu", embeddings: Embeddings | None = None,
                 progress: Progress = no_progress) -> tuple[np.ndarray, dict]:
    """Significance of every candidate pair (``candidates``: ``(n,) bool``, usually the pairs
    partitioned clean), ``(n,) float64`` with NaN elsewhere, and a report for the sidecar."""
    if config.mode not in MODES:
        raise ValueError(f"significance mode must be one of {MODES}, got {config.mode!r}")
    out = np.full(features.n_pairs, np.nan)
    if candidates.sum() == 0:
        return out, {"mode": config.mode, "pool": 0}
    if embeddings is None:
        embeddings = embed(matcher, features, device)
    size = config.bank_size
    if config.mode == "specificity":  # every candidate against the whole pool
        size = min(size, reference_cap(int(candidates.sum())))
    pool = confident_pool(clean_prob, candidates, config.bank_threshold, size, seed)
    report: dict = {"mode": config.mode, "pool": int(len(pool))}
    if config.mode == "specificity":
        return specificity(embeddings, features, candidates, pool, config.temperature,
                           config.share), report

    neighbours = memory_entries(embeddings, features, pool)
    mean, per_pass = update_ratio(matcher, features, clean_prob, candidates, neighbours, config,
                                  seed, device, progress)
    if config.passes > 1:  # how stable is the c >= 1 label across passes?
        labels = per_pass[:, candidates] >= 1
        report["label_agreement_with_mean"] = [
            float(np.mean(labels[k] == (mean[candidates] >= 1))) for k in range(config.passes)]
    return mean, report
