"""A retrain: read a scored corpus and a test set, build the scoring run's matcher configuration,
train the arms (:mod:`ncclean.evaluate.retrain`) and judge them."""

from __future__ import annotations

import os
from pathlib import Path

from ncclean.data.schema import Columns
from ncclean.evaluate.retrain import RetrainConfig, RetrainSummary
from ncclean.progress import Progress, no_progress

PathLike = str | os.PathLike


def retrain_scored(input: PathLike, test: PathLike, *, keep: str, pseudo_captions: bool,
                   baseline: bool, columns: Columns, config: RetrainConfig, seed: int,
                   image_encoder: str, text_encoder: str, matcher: PathLike | None,
                   device: str, cache_dir: PathLike | bool | None,
                   progress: Progress = no_progress) -> RetrainSummary:
    """Train a fresh plain matcher per arm on what the scoring run of ``input`` kept and measure
    Recall@K on ``test``; ``device`` is resolved. The matcher's architecture and encoders are
    the scoring run's (its sidecar), with the towers ``image_encoder`` / ``text_encoder`` other
    than ``auto`` replaced; ``matcher``: a saved matcher evaluated untrained as one more arm."""
    from ncclean.data.corpus import read_corpus
    from ncclean.data.scored import open_scored
    from ncclean.errors import BadOptionError, SchemaError
    from ncclean.evaluate.retrain import (
        gap_recovered,
        pseudo_text_groups,
        run_arms,
        saved_matcher_result,
        selection_arms,
        verdicts,
    )
    from ncclean.models.features import build_features, complete_config
    from ncclean.models.matcher import MatcherConfig
    from ncclean.models.resolve import override_towers, require_columns, scoring_columns
    from ncclean.pipeline.score import cache_path, decoded_size

    cache = cache_path(cache_dir)
    scored = open_scored(input)
    if pseudo_captions and "pseudo_caption_id" not in scored.source.schema.names:
        raise SchemaError(f"{input} has no pseudo_caption_id column; score it with "
                          "pseudo-captions on")
    if keep == "significant" and scored.sidecar.get("significance") == "off":
        raise BadOptionError(f"{input} was scored with --significance off, so every clean pair "
                             "is clean_significant; score it with the significance stage on, or "
                             "use --keep clean")
    settings = scored.sidecar.get("matcher", {})
    matcher_config = override_towers(
        MatcherConfig.from_dict({k: v for k, v in settings.items() if k != "vocab"}),
        image_encoder, text_encoder)
    columns = scoring_columns(matcher_config, columns, scored.sidecar)
    require_columns(matcher_config, columns)
    saved = None
    if matcher is not None:  # before hours of training, not after
        from ncclean.models.checkpoint import load_matcher

        saved = load_matcher(matcher, device)
        require_columns(saved.config, columns)

    size = decoded_size(matcher_config)
    corpus = read_corpus(input, columns, image_size=size, cache_dir=cache, progress=progress)
    held_out = read_corpus(test, columns, image_size=size, cache_dir=cache, progress=progress)
    if held_out.valid.sum() < 2:
        raise BadOptionError(f"{test}: fewer than 2 usable test pairs")
    complete_config(matcher_config, corpus)
    features = build_features(corpus, matcher_config, cache_dir=cache, device=device,
                              progress=progress)
    test_features = build_features(held_out, matcher_config, cache_dir=cache, device=device,
                                   progress=progress)

    rows = features.rows
    pseudo = None
    if pseudo_captions:
        donors = scored.source.read_columns(["pseudo_caption_id"]).column(0).to_pylist()
        pseudo = pseudo_text_groups(donors, corpus.ids.to_pylist(), corpus.text_group, rows)
    arms = selection_arms(scored.partition[rows], scored.clean_prob[rows], keep,
                          pseudo_text_group=pseudo, baseline=baseline,
                          noisy_gt=None if scored.noisy_gt is None else scored.noisy_gt[rows])
    results = run_arms(features, test_features, arms, matcher_config, config, seed, device,
                       progress)
    if saved is not None:
        from ncclean.models.checkpoint import read_meta

        own, saved_test = saved.config, test_features  # features for its vocabulary and size
        if own.to_dict() != matcher_config.to_dict():
            if decoded_size(own) not in (None, decoded_size(matcher_config)):
                held_out = read_corpus(test, columns, image_size=decoded_size(own),
                                       cache_dir=cache, progress=progress)
            saved_test = build_features(held_out, own, cache_dir=cache, device=device,
                                        progress=progress)
        results["matcher"] = saved_matcher_result(saved, str(matcher),
                                                  read_meta(matcher).get("method"), saved_test,
                                                  device)
        results["matcher"]["gap_recovered"] = gap_recovered(results, "matcher")
    judged = verdicts(results, features.n_pairs)
    return RetrainSummary(
        input=Path(input), test=Path(test), n_test=test_features.n_pairs, steps=config.steps,
        schedule=config.schedule, seed=seed, keep=keep, pseudo_captions=pseudo_captions,
        image_encoder=matcher_config.image_tower, text_encoder=matcher_config.text_tower,
        arms=results, gap_recovered=gap_recovered(results, arms[0].name),
        n_valid=features.n_pairs, still_improving=judged.still_improving,
        past_best=judged.past_best, small_selection=judged.small_selection)
