"""SDD's siamese probe (Liu et al., arXiv 2412.06172, Sec. 3.4, Eq. 7-11, after NPC) and the
memory bank it measures: used by the ``sdd`` method while it trains and by the significance
stage's ``update`` mode after any method.

Each pair's memory entries (Eq. 8) are the confident-clean pair with the most similar image and
the one with the most similar caption, excluding the pair's own image and its other captions.
For a batch, a copy of the matcher measures the entries' losses (Eq. 9), takes one step on the
batch's weighted InfoNCE, measures them again, and ``c`` (Eq. 10) compares the two.

Departures from the paper: the copy takes a plain SGD step of ``step_size`` in eval mode, on
half the InfoNCE of Eq. 2 (the authors' scale; SDD fine-tunes CLIP with AdamW at 2e-7 in
training mode), which keeps the probe deterministic; memory-entry cross-entropies mask duplicate
images and captions like every in-batch loss here. ``c`` combines the losses by direction as
Eq. 9-10 print it (the authors' code combines them by memory entry).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from ncclean.models.features import Features
from ncclean.models.linear import linear
from ncclean.seeds import derive_rng
from ncclean.train.losses import contrastive_ce
from ncclean.train.scoring import Embeddings

_BLOCK = 2048


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
        pool = np.sort(derive_rng(seed, "reference-pool").choice(pool, size, replace=False))
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
        sims = linear(queries, pool_vectors)
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


def bank_losses(matcher, features: Features, entries: np.ndarray, device: str,
                 temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Image-to-text and text-to-image cross-entropies of memory entries ``entries`` (pair
    indices) against each other, ``(B,)`` each."""
    batch = features.batch(entries, device)
    mask = batch.negatives
    return contrastive_ce(matcher.batch_similarity(batch), mask, temperature)


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
            bank_losses(self.model, self.features, entries[pairs], self.device,
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
            mask = batch.negatives
            i2t, t2i = contrastive_ce(probe.batch_similarity(batch), mask, self.temperature)
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
