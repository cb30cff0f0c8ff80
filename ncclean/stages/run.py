"""The stages after any method, in order: significance splits the clean partition, then noisy
pairs get pseudo-captions. Both need the method's matcher or embeddings; without them they are
skipped (and the sidecar says so)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ncclean.data.results import CLEAN_INSIGNIFICANT, CLEAN_SIGNIFICANT, NOISY
from ncclean.options import StageOptions
from ncclean.progress import Progress, no_progress


@dataclass
class StageResults:
    """What the stages add, per pair of the features: ``significance`` (``(n,) float`` or
    ``None``), each noisy pair's pseudo-caption ``donor`` (``(n,) int64`` pair index, -1 for
    none) with its ``donor_score``, and ``report`` for the sidecar's ``stages``."""

    significance: np.ndarray | None = None
    donor: np.ndarray | None = None
    donor_score: np.ndarray | None = None
    pool: np.ndarray | None = None  # (n,) bool: the pairs whose captions were donors
    report: dict = field(default_factory=dict)


def significance_mode(options: StageOptions, result) -> str:
    """The significance mode of a run: the option, else the method's choice (``result``'s
    ``significance``), else ``specificity``."""
    if options.significance is not None:
        return options.significance
    return result.significance or "specificity"


def run_stages(result, features, clean_prob: np.ndarray, parts: np.ndarray,
               options: StageOptions, rare: np.ndarray, *, seed: int = 0, device: str = "cpu",
               corpus_pairs: int | None = None, progress: Progress = no_progress
               ) -> StageResults:
    """Run the stages on a method's ``result`` over ``features``: ``clean_prob`` and ``parts``
    (``(n,)`` partition names, moved from clean_significant to clean_insignificant in place) per
    pair. ``rare`` (``(n,) bool``): pairs whose caption is rare (the cut's ``rare_count``), which
    specificity leaves significant. ``corpus_pairs``: the corpus ``features`` are a fit sample
    of, whose pairs share the stages' search budget (:func:`ncclean.stages.corpus_queries`)."""
    from ncclean.stages.pseudocaption import donor_pool, matcher_space, pseudo_captions
    from ncclean.stages.significance import SignificanceConfig, significance
    from ncclean.train.scoring import embed as embed_pairs
    from ncclean.train.scoring import kept_dtype

    stages = StageResults()
    embeddings = result.embeddings
    if embeddings is None and result.matcher is not None:
        embeddings = embed_pairs(result.matcher, features, device, dtype=kept_dtype(features))
    if embeddings is None:
        stages.report["skipped"] = "the method returned neither a matcher nor embeddings"
        return stages
    mode = significance_mode(options, result)
    clean = parts == CLEAN_SIGNIFICANT
    if mode != "off" and (mode == "specificity" or result.matcher is not None):
        values, report = significance(
            result.matcher, features, clean_prob, clean,
            SignificanceConfig(mode=mode, passes=options.significance_passes), seed=seed,
            device=device, embeddings=embeddings, corpus_pairs=corpus_pairs, progress=progress)
        # Specificity cannot tell a caption that says nothing from one the space has not
        # learned; a caption used on at most rare_count images is no collection name, so it
        # stays significant (benchmarks/results/retrain.md).
        exempt = rare if mode == "specificity" else np.zeros(len(parts), dtype=bool)
        parts[clean & (values < 1) & ~exempt] = CLEAN_INSIGNIFICANT
        stages.significance = values
        stages.report["significance"] = report
    if options.pseudo_captions:
        space = result.donor_space or matcher_space(embeddings, features)
        pool = donor_pool(options.donors, parts, features.text_group)
        donor, donor_score, report = pseudo_captions(space, features, parts == NOISY, pool,
                                                     seed=seed, corpus_pairs=corpus_pairs)
        report["pool"] = options.donors
        stages.donor, stages.donor_score, stages.pool = donor, donor_score, pool
        stages.report["pseudo_captions"] = report
    return stages
