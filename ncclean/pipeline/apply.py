"""Apply a fit to one shard: every pair scored with the fitted state, no training.

A pair of the fit sample (the same id, vectors and caption: :func:`~.fit.sample_keys`) is
written as the fit holds it: as the fit's one pass wrote it, except where the method's
application put the sample on the held-out pairs' scale (its ranking kept, then cut and searched
as below: :func:`ncclean.pipeline.keep.rescale_sample`). Any other pair is scored with the
fitted state by the method's application (:mod:`ncclean.methods.applied`): embedded in the
fit's space, its signal computed (the method's columns it can compute filled in, the others
null), and its ``clean_prob`` read from the fit's table of that signal by linear interpolation
(clamped at the ends), so a pair between two of the table's pairs gets a probability between
theirs.

Then the cut (the fit's resolved thresholds; a caption's count is the larger of its count in the
fit sample and in the shard; a noise-rate cut becomes the fit's clean probability threshold), the
significance stage in ``specificity`` mode against the fit's confident pool (``update`` mode
probes training and leaves applied pairs' significance null), and pseudo-captions searched among
the fit's donors with the fit's minimum score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from ncclean.data.results import (
    CLEAN_INSIGNIFICANT,
    CLEAN_SIGNIFICANT,
    NOISY,
    PARTITIONS,
    VAGUE,
    PairResults,
    result_columns,
)
from ncclean.data.shards import find_sorted, pair_keys, text_keys, vector_heads, vector_keys
from ncclean.methods.base import get_method
from ncclean.options import Cut
from ncclean.pipeline.fit import KEYED, Fit, FitError, sample_keys
from ncclean.stages.index import over_budget, rescored
from ncclean.stages.partition import as_written
from ncclean.train.scoring import Embeddings

_BLOCK_BYTES = 40 << 20  # one block's products against the pool, float32


def _block_rows(pool: int) -> int:
    """Rows per block against a pool of ``pool`` entries: products of about 40 MB (512 rows
    against the largest pool, 20,000; 4,096 against 2,551). Alone the block size does not
    matter; on a loaded machine 512 rows took 3.3x as long (benchmarks/results/speed.md). A
    row's result does not depend on its block."""
    return int(min(8192, max(512, _BLOCK_BYTES // (4 * max(pool, 1)))))

TEMPERATURE, SHARE = 0.02, 0.25  # SignificanceConfig's specificity defaults, as in one pass


@dataclass
class Applied:
    """What applying a fit gives, one entry per input row: the contract's columns (Arrow) and
    the partition counts."""

    columns: dict[str, pa.Array]
    n_applied: int


def apply_to_corpus(fit: Fit, corpus, features, device: str = "cpu",
                    shard_captions: tuple[np.ndarray, np.ndarray] | None = None,
                    caption_keys: np.ndarray | None = None) -> Applied:
    """Score every usable pair of ``features`` (of ``corpus``, one shard or a part of one) with
    ``fit``; the contract's columns for every row of the corpus. ``shard_captions``: the
    shard's caption keys and their counts (sorted keys), when ``corpus`` is a part of it;
    ``caption_keys``: the key of every row's caption, when already computed."""
    widths = [int(features.image_data.shape[1]), int(features.text_data.shape[1])]
    if widths != fit.meta["widths"]:
        raise FitError(f"{corpus.source.path}: vectors of widths {widths[0]} and {widths[1]}, "
                       f"but the fit was made on {fit.meta['widths'][0]} and "
                       f"{fit.meta['widths'][1]}")
    n = features.n_pairs
    at, seen = _in_sample(fit, corpus, features)
    new = np.flatnonzero(~seen)
    old, where = np.flatnonzero(seen), at[seen]

    clean_prob = np.zeros(n)
    parts = np.empty(n, dtype=object)
    significance = np.full(n, np.nan)
    donor = np.full(n, -1, dtype=np.int64)
    donor_score = np.full(n, np.nan, dtype=np.float32)
    columns = {name: _empty(n, dtype) for name, dtype in fit.meta["columns_out"].items()}

    clean_prob[old] = fit.arrays["sample.clean_prob"][where]
    parts[old] = np.asarray(PARTITIONS, dtype=object)[fit.arrays["sample.partition"][where]]
    significance[old] = fit.arrays["sample.significance"][where]
    donor[old] = fit.arrays["sample.donor"][where]
    if "sample.donor_score" in fit.arrays:
        donor_score[old] = fit.arrays["sample.donor_score"][where]
    for name in columns:
        columns[name][old] = fit.arrays[f"column.{name}"][where]

    if len(new):
        application = get_method(fit.meta["method"]).application
        sub = application.prepared(fit.arrays, features.subset(new))
        embeddings = application.embeddings(fit.arrays, fit.matcher, sub, device)
        caption_key = text_keys([corpus.captions[r] for r in features.rows]) \
            if caption_keys is None else caption_keys[features.rows]
        signal = application.signal(fit.arrays, fit.meta, sub, embeddings, columns, new,
                                    caption_key[new])
        clean_prob[new] = np.interp(signal, fit.arrays["table.x"], fit.arrays["table.y"])
        counts = caption_counts(fit, caption_key, shard_captions)[new]
        parts[new] = _cut(fit, clean_prob[new], counts)
        _significance(fit, sub, embeddings, parts, significance, new, counts)
        _donors(fit, sub, embeddings, parts, donor, donor_score, new, caption_key[new])

    results = PairResults.from_pairs(corpus.n_pairs, features.rows, clean_prob, parts,
                                     significance, None, donor_score, columns)
    out = result_columns(corpus, results)
    has = np.full(corpus.n_pairs, -1, dtype=np.int64)
    has[features.rows] = np.where(parts == NOISY, donor, -1)
    out["pseudo_caption"], out["pseudo_caption_id"] = _donor_columns(fit, has, corpus.ids.type)
    out["pseudo_caption_score"] = pa.array(
        np.asarray(results.pseudo_caption_score, np.float32),
        mask=(has < 0) | np.isnan(np.asarray(results.pseudo_caption_score, np.float64)))
    return Applied(columns=out, n_applied=len(new))


def _in_sample(fit: Fit, corpus, features) -> tuple[np.ndarray, np.ndarray]:
    """``(at, seen)``, ``(n_pairs,)`` each: which pairs are the fit's sample pairs (the same id,
    vectors and caption: :func:`~ncclean.pipeline.fit.sample_keys`) and where. Only the pairs
    whose id is a sample id are hashed whole (the vectors' hashes cost the most). A fit of an
    older format, which holds its sample by id alone, is not used for this: every pair new."""
    n = features.n_pairs
    at, seen = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    if fit.meta["format"] not in KEYED:
        return at, seen
    ids = corpus.ids.to_pylist()
    maybe = np.flatnonzero(find_sorted(fit.arrays["ids.key"],
                                       pair_keys([ids[r] for r in features.rows]))[1])
    if len(maybe):
        at[maybe], seen[maybe] = find_sorted(fit.arrays["sample.key"],
                                             sample_keys(corpus, features.subset(maybe)))
    return at, seen


def _empty(n: int, dtype: str) -> np.ndarray:
    kind = np.dtype(dtype)
    return np.full(n, np.nan, dtype=kind) if kind.kind == "f" else np.zeros(n, dtype=kind)


def _donor_columns(fit: Fit, entry: np.ndarray, id_type: pa.DataType) -> tuple[pa.Array, pa.Array]:
    captions, ids = fit.text("donor_caption"), fit.text("donor_id")
    text = [captions[e] if e >= 0 else None for e in entry]
    id_text = pa.array([ids[e] if e >= 0 else None for e in entry], pa.string())
    return pa.array(text, pa.string()), id_text.cast(id_type)


def _cut(fit: Fit, clean_prob: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Partition names by the fit's resolved cut (see the module docstring); ``counts``: each
    pair's caption count (:func:`caption_counts`)."""
    cut = fit.meta["cut"]
    out = np.full(len(clean_prob), CLEAN_SIGNIFICANT, dtype=object)
    if cut["noise_rate"] is not None:
        limit = fit.meta["noisy_up_to"]
        if limit is not None:
            out[clean_prob <= limit] = NOISY
        return out
    above, below = Cut.from_record(cut).thresholds()  # with the bands the fit sample set
    clean_above = np.full(len(clean_prob), above)
    noisy_below = np.full(len(clean_prob), below)
    if cut["rare_clean_above"] is not None:
        rare = counts <= cut["rare_count"]
        clean_above[rare] = cut["rare_clean_above"]
        noisy_below[rare] = min(below, cut["rare_clean_above"])
    written = as_written(clean_prob)
    out[written < clean_above] = VAGUE
    out[written < noisy_below] = NOISY
    return out


def caption_counts(fit: Fit, caption_key: np.ndarray,
                   shard: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """``(n,) int64``: each caption's count, the larger of the fit sample's and the shard's
    (``shard``: its sorted caption keys and counts; ``None``: these pairs are the shard)."""
    if shard is None:
        shard = np.unique(caption_key, return_counts=True)
    return np.maximum(_lookup(*shard, caption_key),
                      _lookup(fit.arrays["captions.key"], fit.arrays["captions.count"],
                              caption_key))


def _lookup(keys: np.ndarray, counts: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``counts`` of ``wanted`` in the sorted ``keys``, 0 where absent."""
    if not len(keys):
        return np.zeros(len(wanted), dtype=np.int64)
    at, found = find_sorted(keys, wanted)
    return np.where(found, counts[at], 0)


def _significance(fit: Fit, features, embeddings: Embeddings, parts: np.ndarray,
                  significance: np.ndarray, new: np.ndarray, counts: np.ndarray) -> None:
    """Specificity of the new clean pairs against the fit's pool, in place (rare captions
    exempt, as in one pass)."""
    if "pool.images" not in fit.arrays:
        return
    local = np.flatnonzero(parts[new] == CLEAN_SIGNIFICANT)
    if not len(local):
        return
    groups = np.unique(features.image_group[local])  # only these images are searched
    if "pool.image_head" in fit.arrays:  # and only those that may be a pool image, hashed
        groups = groups[find_sorted(fit.arrays["pool.image_head"],
                                    vector_heads(features.image_data[groups]))[1]]
    image_key = np.zeros(len(features.image_data), dtype=np.uint64)  # no pool image's key
    image_key[groups] = vector_keys(features.image_data[groups])
    values = _exact_specificity(fit, features, embeddings, local, image_key)
    significance[new[local]] = values
    # a caption used at most rare_count times stays significant (as in one pass)
    rare = counts[local] <= fit.meta["cut"]["rare_count"]
    parts[new[local[(values < 1) & ~rare]]] = CLEAN_INSIGNIFICANT


def _exact_specificity(fit: Fit, features, embeddings: Embeddings, local: np.ndarray,
                       image_key: np.ndarray) -> np.ndarray:
    """Specificity of ``local`` against every image of the fit's pool, ``(len(local),)``: as
    one pass (:func:`~ncclean.stages.significance.pool_specificity`), the own image's copies
    in the pool found by key."""
    from ncclean.stages.significance import pool_specificity

    pool_key = fit.arrays["pool.image_key"]
    by_key = np.argsort(pool_key, kind="stable")
    sorted_key = pool_key[by_key]
    return pool_specificity(embeddings, features, local,
                            torch.from_numpy(fit.arrays["pool.images"]),
                            lambda groups: _same_key(image_key[groups], sorted_key, by_key),
                            TEMPERATURE, SHARE, _block_rows(len(pool_key)))


def _same_key(keys: np.ndarray, sorted_key: np.ndarray,
              by_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)``: every ``(i, j)`` with ``keys[i]`` equal to the pool's key ``j``
    (``sorted_key`` the pool's keys sorted by the permutation ``by_key``); found by binary
    search, not a ``len(keys) x pool`` comparison."""
    low = np.searchsorted(sorted_key, keys, "left")
    count = np.searchsorted(sorted_key, keys, "right") - low
    rows = np.repeat(np.arange(len(keys)), count)
    offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return rows, by_key[np.repeat(low, count) + offset]


def _donors(fit: Fit, features, embeddings: Embeddings, parts: np.ndarray, donor: np.ndarray,
            donor_score: np.ndarray, new: np.ndarray, caption_key: np.ndarray) -> None:
    """Pseudo-captions of the new noisy pairs among the fit's donors, in place: each pair's
    best, so that a shard applied in parts writes what it writes whole (the fit left out the
    donors its sample's suggestions had filled: :func:`ncclean.pipeline.keep.fit_from_state`)."""
    if "donors.keys" not in fit.arrays:
        return
    local = np.flatnonzero(parts[new] == NOISY)
    if not len(local) or not len(fit.arrays["donors.keys"]):
        return
    keys = torch.from_numpy(fit.arrays["donors.keys"])
    donor_text = fit.arrays["donors.text_key"]
    own_text = caption_key[local]
    # the fit's donors' index, built once per process, when the corpus's noisy pairs (not this
    # part's) would exceed the search budget, as in one pass over the corpus
    if over_budget(max(len(local), fit.meta.get("donor_queries", 0)), len(keys)):
        from ncclean.stages.index import best_reference, reference_index

        index = reference_index(fit.arrays["donors.keys"])
        if index is not None:
            best, score = best_reference(index, embeddings.images[features.image_group[local]]
                                         .astype(np.float32), own_text, donor_text)
            keep = np.isfinite(score) & (score >= fit.meta["donor_min_score"])
            donor[new[local[keep]]] = fit.arrays["donors.entry"][best[keep]]
            donor_score[new[local[keep]]] = score[keep]
            return
    step = _block_rows(len(keys))
    for start in range(0, len(local), step):
        block = local[start:start + step]
        queries = torch.from_numpy(embeddings.images[features.image_group[block]]).float()
        sims = queries @ keys.T
        same = torch.from_numpy(own_text[start:start + len(block)][:, None] == donor_text[None, :])
        top = sims.masked_fill_(same, float("-inf")).max(dim=1)
        chosen = top.indices.numpy()
        score = rescored(queries.numpy(), fit.arrays["donors.keys"][chosen], top.values.numpy())
        keep = np.isfinite(score) & (score >= fit.meta["donor_min_score"])
        rows = new[block[keep]]
        donor[rows] = fit.arrays["donors.entry"][chosen[keep]]
        donor_score[rows] = score[keep]
