"""A scoring run: read the corpus, build its features, fit the method, cut, run the stages, write
the output contract and its sidecar."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ncclean.data.schema import Columns
from ncclean.options import Cut, MatcherOptions, RunOptions, StageOptions, options_record
from ncclean.progress import Progress, no_progress
from ncclean.records import Summary

PathLike = str | os.PathLike


@dataclass(frozen=True)
class ScoreSummary(Summary):
    """What a scoring run did: where the output is, its partition counts, the estimated noise
    rate, how well injected noise was found (when the input has ``noisy_gt``), and how long each
    phase took (seconds)."""

    input: Path
    output: Path
    method: str
    device: str
    n_pairs: int
    n_invalid: int
    partition_counts: dict[str, int]
    noise_rate: float | None
    seconds: dict[str, float]
    detection: dict[str, float] | None = None
    n_pseudo_captions: int = 0


def cache_path(cache_dir: PathLike | bool | None) -> Path | None:
    """``True``: the default cache; ``None`` or ``False``: none; else that folder."""
    from ncclean.data.cache import default_cache_dir

    if cache_dir is True:
        return default_cache_dir()
    return Path(cache_dir) if cache_dir else None


def decoded_size(config) -> int | None:
    """The side images are decoded to for ``config``'s image tower, ``None`` when it reads no
    pixels."""
    return config.image_size if config.image_tower == "pixels" else None


def score_corpus(input: PathLike, output: PathLike, method: str, params: dict | None,
                 columns: Columns, matcher: MatcherOptions, cut: Cut, stages: StageOptions,
                 run: RunOptions, device: str, progress: Progress = no_progress,
                 on_scored=None) -> ScoreSummary:
    """Score every pair of ``input`` with ``method`` and write the output contract to ``output``
    (plus ``<output>.json``); ``device`` is ``run.device`` resolved
    (:func:`ncclean.device.resolve_device`). Checks what it can before any training: the method
    and its ``params``, the encoders, the output path, that two pairs are usable.
    ``on_scored(state)``, when given, sees the run's in-memory state (a dict: ``corpus``,
    ``features``, ``result``, ``clean_prob``, ``parts``, ``stages``, ``cut``, ``config``) before
    the output is written: :mod:`ncclean.pipeline.keep` keeps a fit from it."""
    import numpy as np

    from ncclean.data.corpus import read_corpus
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.data.parquet import check_output_path
    from ncclean.errors import BadOptionError
    from ncclean.methods.base import Context, make_method
    from ncclean.models.features import build_features, complete_config
    from ncclean.models.resolve import matcher_config
    from ncclean.stages.partition import caption_counts, partition
    from ncclean.stages.run import run_stages, significance_mode

    seconds: dict[str, float] = {}
    began = time.perf_counter()
    chosen = make_method(method, params)
    cache = cache_path(run.cache_dir)
    config, initial = matcher_config(
        columns, matcher.image_encoder, matcher.text_encoder, matcher.embed_dim,
        matcher.image_size, matcher.load_matcher, device, matcher.clip())
    max_pixels = run.max_image_pixels or DEFAULT_MAX_PIXELS

    corpus = read_corpus(input, columns, strict=run.strict, image_size=decoded_size(config),
                         max_image_pixels=max_pixels, cache_dir=cache, progress=progress)
    out = check_output_path(output, corpus.source)  # fail now, not after training
    if corpus.valid.sum() < 2:
        raise BadOptionError(f"{input}: only {int(corpus.valid.sum())} usable pairs; scoring "
                             "needs at least 2 (see invalid_reason with ncclean inspect)")
    complete_config(config, corpus)
    features = build_features(corpus, config, cache_dir=cache, device=device,
                              max_pixels=max_pixels, progress=progress)
    if features.n_pairs < 2:
        raise BadOptionError(f"{input}: only {features.n_pairs} usable pairs; scoring needs at "
                             "least 2 (see invalid_reason with ncclean inspect)")
    seconds["read"] = time.perf_counter() - began

    fitted = time.perf_counter()
    result = chosen.fit(features, Context(
        seed=run.seed, device=device, progress=progress, matcher_config=config, initial=initial,
        checkpoint_dir=Path(run.checkpoint_dir) if run.checkpoint_dir else None,
        resume=run.resume))
    seconds["method"] = time.perf_counter() - fitted
    clean_prob = np.asarray(result.clean_prob, dtype=np.float64)
    if clean_prob.shape != (features.n_pairs,):
        raise ValueError(f"method {method!r} returned {clean_prob.shape} scores for "
                         f"{features.n_pairs} pairs")
    resolved = cut.with_estimate(result.noise_rate, method)

    staged = time.perf_counter()
    counts = caption_counts(features.text_group)
    parts = partition(clean_prob, resolved, counts) \
        if result.partition is None else np.asarray(result.partition, dtype=object).copy()
    added = run_stages(result, features, clean_prob, parts, stages,
                       rare=counts <= resolved.rare_count, seed=run.seed, device=device,
                       progress=progress)
    seconds["stages"] = time.perf_counter() - staged
    if on_scored is not None:
        on_scored({"corpus": corpus, "features": features, "result": result,
                   "clean_prob": clean_prob, "parts": parts, "stages": added, "cut": resolved,
                   "config": config})
    sidecar = {
        "command": "score", "input": str(input), "method": method, "params": chosen.params(),
        "seed": run.seed, "device": device,
        "columns": {"image_emb": corpus.columns.image_emb, "text_emb": corpus.columns.text_emb},
        "matcher": {k: v for k, v in config.to_dict().items() if k != "vocab"}
        | {"vocab_size": len(config.vocab) if config.vocab else None,
           "loaded_from": str(matcher.load_matcher) if matcher.load_matcher else None},
        "cut": resolved.record(cut, by_method=result.partition is not None),
        "significance": significance_mode(stages, result),
        "options": options_record(columns=columns, matcher=matcher, cut=cut, stages=stages,
                                  run=run),
    }
    return write_scored(corpus, features, out, result, clean_prob, parts, added, seconds, began,
                        sidecar, run.save_matcher)


def write_scored(corpus, features, out: Path, result, clean_prob, parts, stages, seconds: dict,
                 began: float, sidecar: dict, save_matcher: PathLike | None) -> ScoreSummary:
    """Place the scored pairs back at their input rows, measure detection against ``noisy_gt``
    when the input has it, write the output and its sidecar, save the matcher; the summary."""
    import numpy as np

    from ncclean.data.results import NOISY, PairResults, partition_counts, write_results
    from ncclean.data.schema import NOISY_GT
    from ncclean.models.checkpoint import save_matcher as save_checkpoint
    from ncclean.provenance import versions

    rows = features.rows
    detection = None
    if NOISY_GT in corpus.source.schema.names:  # injected noise: say how well it was found
        from ncclean.evaluate.detection import detection_metrics

        truth = np.array(corpus.source.read_columns([NOISY_GT]).column(0).to_pylist(),
                         dtype=bool)[rows]
        detection = detection_metrics(truth, clean_prob, flagged=parts == NOISY).as_dict()

    writing = time.perf_counter()
    results = PairResults.from_pairs(
        corpus.n_pairs, rows, clean_prob, parts, stages.significance, stages.donor,
        stages.donor_score, result.columns)
    written = write_results(corpus, out, results, sidecar | {
        "estimated_noise_rate": result.noise_rate,
        "detection_vs_noisy_gt": detection,
        "stages": stages.report,
        "report": result.report,
        "seconds": seconds,
        "versions": versions("torch", "numpy", "pyarrow", "scikit-learn"),
    })
    if save_matcher is not None and result.matcher is not None:
        save_checkpoint(save_matcher, result.matcher, {"method": sidecar["method"],
                                                       "seed": sidecar["seed"],
                                                       "trained_on": sidecar["input"]})
    seconds["write"] = time.perf_counter() - writing
    seconds["total"] = time.perf_counter() - began
    donor_row = results.pseudo_caption_row
    return ScoreSummary(
        input=Path(sidecar["input"]), output=written, method=sidecar["method"],
        device=sidecar["device"], n_pairs=corpus.n_pairs, n_invalid=corpus.n_invalid,
        partition_counts=partition_counts(results.partition), noise_rate=result.noise_rate,
        seconds=seconds, detection=detection,
        n_pseudo_captions=0 if donor_row is None else int((donor_row >= 0).sum()))
