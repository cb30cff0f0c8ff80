"""Significance: which clean pairs are worth training on, after any method.

Two measures, both ending in ``significance`` (>= 1 means ``clean_significant``):

``mode="update"`` — Self-Drop & Dual-Weight (SDD, Sec. 3.4, Eq. 9-11, after NPC). Every clean
pair gets a memory bank entry: the most similar *confident-clean* pair by image-image and by
text-text similarity (excluding itself and the other captions of its image). For each batch, a
copy of the trained matcher takes one step on the batch's confidence-weighted InfoNCE, and the
memory entries' losses before and after are compared:
``c = 1/2 (l_i2t[before] / l_i2t[after] + l_t2i[before] / l_t2i[after])``. The update is the
whole batch's, so ``c`` is a noisy batch-level signal: it is averaged over ``passes`` shuffled
passes (``benchmarks/results/stages.md`` measures how many are needed).

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
``benchmarks/results/stages.md``). ``score`` leaves a caption the corpus uses at most
``--rare-count`` times significant whatever its specificity: such a caption is no collection
name, and its low specificity is the space not knowing its words (``api._run_stages``;
``benchmarks/results/retrain.md``).

The ``update`` mode's probe and memory bank are :mod:`ncclean.train.probe` (shared with the
``sdd`` method); its departures from SDD are listed there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ncclean.data.shards import find_sorted
from ncclean.models.features import Features
from ncclean.models.linear import linear
from ncclean.progress import Progress, no_progress
from ncclean.seeds import derive_rng
from ncclean.stages import corpus_queries, reference_cap
from ncclean.train.probe import Probe, confident_pool, memory_entries, nearest_in_pool
from ncclean.train.scoring import Embeddings, embed

__all__ = ["MODES", "SignificanceConfig", "confident_pool", "memory_entries", "nearest_in_pool",
           "significance", "specificity", "update_ratio"]

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


def specificity(embeddings: Embeddings, features: Features, candidates: np.ndarray,
                pool: np.ndarray, temperature: float, share: float = 0.25) -> np.ndarray:
    """``(n,)``: the specificity significance of every candidate (NaN elsewhere). The pair's own
    image is excluded from the pool's by position (one entry per row), not by a mask."""
    pool_groups = np.unique(features.image_group[pool])
    pool_images = torch.from_numpy(embeddings.images[pool_groups]).float()

    def copies(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        position, found = find_sorted(pool_groups, groups)
        inside = np.flatnonzero(found)
        return inside, position[inside]

    out = np.full(features.n_pairs, np.nan)
    rows = np.flatnonzero(candidates)
    out[rows] = pool_specificity(embeddings, features, rows, pool_images, copies, temperature,
                                 share)
    return out


def pool_specificity(embeddings: Embeddings, features: Features, rows: np.ndarray,
                     pool: torch.Tensor, copies, temperature: float, share: float,
                     block: int = _BLOCK) -> np.ndarray:
    """``(len(rows),)``: the specificity significance of the pairs ``rows`` against the images
    ``pool`` (``(m, d)`` float32), ``block`` pairs at a time; ``copies(groups)``, for a block's
    image groups, gives the ``(rows, cols)`` entries whose own image is in the pool, left out
    (the stage finds them by group, a fit's application by the vectors' keys)."""
    k = len(pool) + 1  # the pool's images and the pair's own
    pool_norm = largest_norm(pool)
    out = np.empty(len(rows))
    for start in range(0, len(rows), block):
        chunk = rows[start:start + block]
        groups = features.image_group[chunk]
        texts = torch.from_numpy(embeddings.texts[features.text_group[chunk]]).float()
        own = (texts * torch.from_numpy(embeddings.images[groups]).float()).sum(1)
        log_p = own_log_softmax(own, texts, pool, temperature, *copies(groups), pool_norm)
        out[start:start + len(chunk)] = ((log_p + math.log(k)) / (share * math.log(k))).numpy()
    return out


EXP_SAFE = 75.0
"""The largest logit whose ``exp`` is summed without a running maximum: float32 holds values up
to 3.4e38, so 20,000 terms (the largest pool) of ``exp(75)`` each (7e36 in all) still fit."""


def own_log_softmax(own: torch.Tensor, texts: torch.Tensor, pool: torch.Tensor,
                    temperature: float, rows: np.ndarray, cols: np.ndarray,
                    pool_norm: float | None = None) -> torch.Tensor:
    """``(b,)``: the log-softmax of each row's own similarity ``own`` (``(b,)``) among itself and
    the similarities of ``texts`` (``(b, d)``) to ``pool`` (``(m, d)``), the entries
    ``(rows, cols)`` (the own image's copies in the pool) left out; logits are similarities
    over ``temperature``. When every logit is within :data:`EXP_SAFE` (unit vectors at the
    default temperature, 0.02: at most 50), the sum of exponentials is taken in one pass over
    the products instead of log-sum-exp's four (0.45x the time of a 512 x 1,024 block's product
    and log-sum-exp, measured on two threads). ``pool_norm``: the pool's largest norm, when the
    caller computed it once for many blocks (:func:`largest_norm`)."""
    own = own / temperature
    if pool_norm is None:
        pool_norm = largest_norm(pool)
    bound = largest_norm(texts) * pool_norm / temperature if len(texts) and len(pool) else 0.0
    others = linear(texts, pool)
    where = (torch.from_numpy(rows), torch.from_numpy(cols))
    if bound <= EXP_SAFE:
        others.div_(temperature).exp_()
        others[where] = 0.0
        return own - torch.logaddexp(own, others.sum(1).log_())
    others[where] = float("-inf")
    return own - torch.logaddexp(own, torch.logsumexp(others.div_(temperature), 1))


def largest_norm(vectors: torch.Tensor) -> float:
    """The largest row norm of ``(n, d)`` vectors, 0 for none."""
    return float(vectors.norm(dim=1).max()) if len(vectors) else 0.0


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
            order = derive_rng(seed, "significance-pass", k).permutation(rows)
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
                 corpus_pairs: int | None = None,
                 progress: Progress = no_progress) -> tuple[np.ndarray, dict]:
    """Significance of every candidate pair (``candidates``: ``(n,) bool``, usually the pairs
    partitioned clean), ``(n,) float64`` with NaN elsewhere, and a report for the sidecar.
    ``corpus_pairs``: the corpus the pairs are a fit sample of, whose candidates share the
    search budget (:func:`ncclean.stages.corpus_queries`)."""
    if config.mode not in MODES:
        raise ValueError(f"significance mode must be one of {MODES}, got {config.mode!r}")
    out = np.full(features.n_pairs, np.nan)
    if candidates.sum() == 0:
        return out, {"mode": config.mode, "pool": 0}
    if embeddings is None:
        embeddings = embed(matcher, features, device)
    size = config.bank_size
    if config.mode == "specificity":  # every candidate against the whole pool
        size = min(size, reference_cap(corpus_queries(int(candidates.sum()), features.n_pairs,
                                                      corpus_pairs)))
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
