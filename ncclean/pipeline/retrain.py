"""A retrain: read a scored corpus and a test set, build the scoring run's matcher configuration,
train the arms (:mod:`ncclean.evaluate.retrain`) and judge them.

The test set is a file of its own (``test``; its columns may be named apart, ``test_columns``) or,
without one, a deterministic sample of the scored corpus held out of every arm (:func:`held_out`),
with a warning that says what recall on it can and cannot show. Test pairs that are also training
pairs (the same id, or the same image and caption) are counted in a warning.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from ncclean.data.schema import Columns
from ncclean.evaluate.retrain import RetrainConfig, RetrainSummary
from ncclean.progress import Progress, no_progress

PathLike = str | os.PathLike

HELD_OUT_SHARE = 0.1
"""Without a test file: the share of the valid pairs with a unique caption held out as test."""
HELD_OUT_WARNING = (
    "no --test: recall is measured on {n} pairs held out of {input} (of its {unique} valid "
    "pairs with a unique caption, those whose id hashes into the lowest {share:.0%}) and kept "
    "out of every arm. It can compare the arms on this corpus; it cannot show how a matcher "
    "does on clean data or on new images: the held-out pairs carry the corpus's own noise (a "
    "mismatched pair counts as a miss for a matcher that is right) and their images may be "
    "trained on under other captions. Give --test with clean held-out pairs for that.")
TINY_TEST = 100
"""Fewer test pairs than this (held out or given) is a tiny test set, and a warning."""
TINY_TEST_WARNING = (
    "the test set is tiny: {n} pairs, so each recall moves in steps of {step:.1f} points or "
    "more and smaller differences between arms are noise; give --test with more pairs")


def held_out(ids: list, text_group: np.ndarray, share: float = HELD_OUT_SHARE) -> np.ndarray:
    """``(n,) bool``: the pairs held out as test when there is no test file: those whose caption
    occurs once among the ``n`` pairs (``text_group``, ``(n,) int64``) and whose id hashes into
    the lowest ``share`` (blake2b of the id's text), the same pairs on every run."""
    counts = np.bincount(text_group) if len(text_group) else np.zeros(0, dtype=np.int64)
    unique = counts[text_group] == 1
    cut = int(share * 2**32)
    hashed = np.array([int.from_bytes(hashlib.blake2b(str(i).encode(), digest_size=4).digest(),
                                      "big") < cut for i in ids], dtype=bool)
    return unique & hashed


def overlap(train, test) -> tuple[int, int]:
    """How many valid pairs of the ``test`` corpus are also in ``train``
    (:class:`ncclean.data.corpus.Corpus`): by id (when both have an id column), and by the same
    image and caption (image content, or its embedding, with the caption text)."""
    def keys(corpus) -> set:
        out = set()
        for row in np.flatnonzero(corpus.valid):
            if corpus.image_digests is not None:
                image = corpus.image_digests[corpus.image_group[row]]
            elif corpus.image_emb is not None:
                image = np.asarray(corpus.image_emb[row]).tobytes()
            else:
                image = int(corpus.image_group[row])
            out.add((image, corpus.captions[row]))
        return out

    same_ids = 0
    if train.columns.id is not None and test.columns.id is not None:
        train_ids = set(train.ids.filter(pa_mask(train.valid)).to_pylist())
        same_ids = sum(i in train_ids for i in test.ids.filter(pa_mask(test.valid)).to_pylist())
    return same_ids, len(keys(train) & keys(test))


def pa_mask(mask: np.ndarray):
    import pyarrow as pa

    return pa.array(np.asarray(mask, dtype=bool))


def pa_mask_rows(rows: np.ndarray):
    import pyarrow as pa

    return pa.array(np.asarray(rows, dtype=np.int64))


def retrain_config(keep: str | None, steps: int, eval_every: int | None, schedule: str
                   ) -> RetrainConfig:
    """The arms' training settings, checked (:class:`~ncclean.errors.BadOptionError`);
    ``eval_every`` ``None``: every ``steps // 16``."""
    from ncclean.errors import BadOptionError
    from ncclean.evaluate.retrain import KEEPS, SCHEDULES

    if keep is not None and keep not in KEEPS:
        raise BadOptionError(f"--keep must be one of {', '.join(KEEPS)}, got {keep!r}")
    if steps < 1:
        raise BadOptionError(f"--steps must be at least 1, got {steps}")
    if eval_every is None:
        eval_every = max(1, steps // 16)
    if eval_every < 0:
        raise BadOptionError(f"--eval-every must be 0 (off) or a number of steps, got {eval_every}")
    if schedule not in SCHEDULES:
        raise BadOptionError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    return RetrainConfig(steps=steps, eval_every=eval_every, schedule=schedule)


def _read(path: PathLike, what: str, columns: Columns, **kwargs):
    """``read_corpus`` with the file named in a column error (scored file or test file)."""
    from ncclean.data.corpus import read_corpus
    from ncclean.errors import SchemaError

    try:
        return read_corpus(path, columns, **kwargs)
    except SchemaError as error:
        said = str(error)
        if what == "test file":  # point at the test file's own options
            for name in ("caption-col", "image-col", "image-emb-col", "text-emb-col"):
                said = said.replace(f" --{name}", f" --test-{name}")
        raise SchemaError(said if said.startswith(str(path)) else f"{what} {path}: {said}") \
            from None


def retrain_scored(input: PathLike, test: PathLike | None, *, keep: str | None,
                   pseudo_captions: bool,
                   baseline: bool, columns: Columns, config: RetrainConfig, seed: int,
                   image_encoder: str, text_encoder: str, matcher: PathLike | None,
                   device: str, cache_dir: PathLike | bool | None,
                   progress: Progress = no_progress,
                   test_columns: dict[str, str | None] | None = None) -> RetrainSummary:
    """Train a fresh plain matcher per arm on what the scoring run of ``input`` kept and measure
    Recall@K on ``test``; ``device`` is resolved. The matcher's architecture and encoders are
    the scoring run's (its sidecar), with the towers ``image_encoder`` / ``text_encoder`` other
    than ``auto`` replaced (with no record of them, an ``auto`` tower whose embedding column is
    named in ``columns`` reads that column, as in ``score``); ``matcher``: a saved matcher
    evaluated untrained as one more arm.
    ``test_columns``: fields of :class:`Columns` (``caption``, ``image``, ``image_emb``,
    ``text_emb``...) named apart for the test file, the others as the scored file's. ``test``
    ``None``: a sample of ``input`` is held out (:func:`held_out`)."""
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
    scored.require_corpus("retrain")  # it trains on the scored file's captions and images
    if keep is None:
        from ncclean.options import preset_keep

        keep = preset_keep(scored.sidecar)
    if pseudo_captions and "pseudo_caption_id" not in scored.source.schema.names:
        raise SchemaError(f"{input} has no pseudo_caption_id column; score it with "
                          "pseudo-captions on")
    if keep == "significant" and scored.sidecar.get("significance") == "off":
        raise BadOptionError(f"{input} was scored with --significance off, so every clean pair "
                             "is clean_significant; score it with the significance stage on, or "
                             "use --keep clean")
    settings = scored.sidecar.get("matcher")
    if settings is None:  # no record of the towers (a sharded run's folder, a hand-made file):
        # as score's auto, a named embedding column is its side's tower
        from ncclean.models.resolve import column_tower

        image_encoder = column_tower(image_encoder, columns.image_emb)
        text_encoder = column_tower(text_encoder, columns.text_emb)
        settings = {}
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
    corpus = _read(input, "scored file", columns, image_size=size, cache_dir=cache,
                   progress=progress)
    warnings: list[str] = []
    test_cols = replace(columns, **{k: v for k, v in (test_columns or {}).items()
                                    if v is not None})
    held = None
    if test is not None:
        test_corpus = _read(test, "test file", test_cols, image_size=size, cache_dir=cache,
                            progress=progress)
        if test_corpus.valid.sum() < 2:
            raise BadOptionError(f"test file {test}: fewer than 2 usable test pairs")
        same_ids, same_pairs = overlap(corpus, test_corpus)
        if same_ids or same_pairs:
            warnings.append(
                f"the test file {test} overlaps the training pairs: {same_ids} test pairs have "
                f"ids of {input} and {same_pairs} its image and caption; recall on pairs seen "
                "in training says little (use held-out pairs)")
    complete_config(matcher_config, corpus)
    features = build_features(corpus, matcher_config, cache_dir=cache, device=device,
                              progress=progress)
    if test is None:
        held = held_out(corpus.ids.take(pa_mask_rows(features.rows)).to_pylist(),
                        features.text_group)
        n_held = int(held.sum())
        if n_held < 2:
            raise BadOptionError(f"{input}: too few pairs to hold out as a test set "
                                 f"({n_held}); give --test")
        unique = int((np.bincount(features.text_group)[features.text_group] == 1).sum())
        warnings.append(HELD_OUT_WARNING.format(n=n_held, input=input, unique=unique,
                                                share=HELD_OUT_SHARE))
        test_features = features.subset(held)
        features = features.subset(~held)
    else:
        test_features = build_features(test_corpus, matcher_config, cache_dir=cache,
                                       device=device, progress=progress)
    if test_features.n_pairs < TINY_TEST:
        warnings.append(TINY_TEST_WARNING.format(n=test_features.n_pairs,
                                                 step=100 / test_features.n_pairs))

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
            source, source_cols = (input, columns) if test is None else (test, test_cols)
            source_corpus = corpus if test is None else test_corpus
            if decoded_size(own) not in (None, decoded_size(matcher_config)):
                source_corpus = _read(source, "test file", source_cols,
                                      image_size=decoded_size(own), cache_dir=cache,
                                      progress=progress)
            saved_test = build_features(source_corpus, own, cache_dir=cache, device=device,
                                        progress=progress)
            if held is not None:  # the same held-out pairs
                saved_test = saved_test.subset(np.isin(saved_test.rows, test_features.rows))
        results["matcher"] = saved_matcher_result(saved, str(matcher),
                                                  read_meta(matcher).get("method"), saved_test,
                                                  device)
        results["matcher"]["gap_recovered"] = gap_recovered(results, "matcher")
    judged = verdicts(results, features.n_pairs)
    return RetrainSummary(
        input=Path(input), test=None if test is None else Path(test),
        n_test=test_features.n_pairs, warnings=warnings, steps=config.steps,
        schedule=config.schedule, seed=seed, keep=keep, pseudo_captions=pseudo_captions,
        image_encoder=matcher_config.image_tower, text_encoder=matcher_config.text_tower,
        arms=results, gap_recovered=gap_recovered(results, arms[0].name),
        n_valid=features.n_pairs, still_improving=judged.still_improving,
        past_best=judged.past_best, small_selection=judged.small_selection)
