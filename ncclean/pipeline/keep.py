"""Keep a fit from the fit of the sample in memory (:func:`fit_from_state`).

The pipeline's fit (:func:`ncclean.pipeline.score.fit_corpus`) gives its in-memory state to
:func:`fit_from_state`, which keeps what :mod:`ncclean.pipeline.apply` needs to score any other
pair the same way: the sample's own results, the signal-to-probability table and what the
method's application keeps to compute the signal (:mod:`ncclean.methods.applied`), the
reference sets of the stages and the caption counts. A fit sampled from a larger corpus
recalibrates its table on held-out pairs (:func:`calibrate`) when the method's application says
so, and, where that application asks for it, puts the sample on the same scale
(:func:`rescale_sample`).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np

from ncclean.data.results import CLEAN, PARTITIONS
from ncclean.data.shards import pair_keys, text_keys, vector_heads, vector_keys
from ncclean.methods.applied import signal_table
from ncclean.pipeline.fit import FORMAT, Fit, put_text, sample_keys
from ncclean.records import as_record

SIGNIFICANCE_BANK = 20_000  # SignificanceConfig's bank_size and bank_threshold, as in one pass
SIGNIFICANCE_THRESHOLD = 0.9


def fit_from_state(state: dict, method, seed: int, significance_mode: str,
                   pseudo_captions: bool, n_corpus: int | None = None,
                   device: str = "cpu") -> Fit:
    """A :class:`Fit` from ``state`` (what ``fit_corpus`` returns), ``method`` the
    fitted method object; ``n_corpus``: the pairs the fit will be applied to, when more than
    the sample (the donors kept are as many as the stage's budget allows for that many)."""
    from ncclean.stages import corpus_queries, reference_cap
    from ncclean.stages.index import reference_limit
    from ncclean.stages.significance import confident_pool

    corpus, features, result = state["corpus"], state["features"], state["result"]
    clean_prob, parts, stages = state["clean_prob"], state["parts"], state["stages"]
    rows = features.rows
    ids = corpus.ids.to_pylist()
    keys = sample_keys(corpus, features)
    order = np.argsort(keys, kind="stable")
    arrays: dict[str, np.ndarray] = {"sample.key": keys[order],
                                     "ids.key": np.unique(pair_keys([ids[r] for r in rows]))}
    arrays["sample.clean_prob"] = np.asarray(clean_prob, dtype=np.float64)[order]
    codes = {name: k for k, name in enumerate(PARTITIONS)}
    arrays["sample.partition"] = np.array([codes[p] for p in parts], dtype=np.uint8)[order]
    n = features.n_pairs
    arrays["sample.significance"] = (np.full(n, np.nan) if stages.significance is None
                                     else np.asarray(stages.significance, np.float64))[order]
    for name, values in result.columns.items():
        arrays[f"column.{name}"] = np.asarray(values)[order]

    donor_rows: list[int] = []  # input rows of every donor the fit refers to
    sample_donor = np.full(n, -1, dtype=np.int64)
    if stages.donor is not None:
        has = stages.donor >= 0
        sample_donor[has] = len(donor_rows) + np.arange(int(has.sum()))
        donor_rows += rows[stages.donor[has]].tolist()
        arrays["sample.donor_score"] = np.asarray(stages.donor_score, np.float32)[order]
    arrays["sample.donor"] = sample_donor[order]

    application = method.application
    if application.needs_matcher and result.matcher is None and (n_corpus or 0) > features.n_pairs:
        from ncclean.methods.applied import no_matcher

        raise no_matcher()  # before any shard is applied
    embeddings = application.sample_embeddings(result, features, device)
    state["fit_embeddings"] = embeddings  # the space applied pairs are searched in
    meta_extra: dict = {}
    candidates = np.isin(parts, list(CLEAN))
    if significance_mode == "specificity" and stages.significance is not None:
        # as one pass: the budget is shared by the clean pairs of the corpus the fit applies to
        clean = int(candidates.sum())
        size = min(SIGNIFICANCE_BANK, reference_cap(corpus_queries(clean, n, n_corpus)))
        pool = confident_pool(clean_prob, candidates, SIGNIFICANCE_THRESHOLD, size, seed)
        groups = np.unique(features.image_group[pool])
        arrays["pool.images"] = embeddings.images[groups].astype(np.float32)
        arrays["pool.image_key"] = vector_keys(features.image_data[groups])
        arrays["pool.image_head"] = np.unique(vector_heads(features.image_data[groups]))
    if pseudo_captions and stages.donor is not None:
        # a caption the sample's suggestions filled (its share, stages.pseudocaption.donor_cap)
        # is a hub of the space: it is not offered to applied pairs
        refs = np.flatnonzero(stages.pool & ~full_donors(stages.donor, features.text_group))
        _, first = np.unique(features.text_group[refs], return_index=True)
        refs = refs[np.sort(first)]
        noisy = int((parts == "noisy").sum())  # the corpus's, when the sample is part of it
        queries = corpus_queries(noisy, n, n_corpus)
        cap = reference_limit(queries)
        if len(refs) > cap:
            refs = np.sort(np.random.default_rng([seed, 67]).choice(refs, cap, replace=False))
        arrays["donors.keys"] = embeddings.texts[features.text_group[refs]].astype(np.float32)
        arrays["donors.text_key"] = text_keys([corpus.captions[r] for r in rows[refs]])
        arrays["donors.entry"] = len(donor_rows) + np.arange(len(refs), dtype=np.int64)
        donor_rows += rows[refs].tolist()
        meta_extra["donor_min_score"] = stages.report["pseudo_captions"]["min_score"]
        meta_extra["donor_queries"] = queries  # the search's size is the corpus's, not a part's
    put_text(arrays, "donor_caption", [corpus.captions[r] for r in donor_rows])
    put_text(arrays, "donor_id", [str(ids[r]) for r in donor_rows])

    pair_caption_key = text_keys([corpus.captions[r] for r in rows])
    caption_key, count = np.unique(pair_caption_key, return_counts=True)
    arrays["captions.key"], arrays["captions.count"] = caption_key, count.astype(np.int64)

    kept = application.keep(method, result, features, embeddings, clean_prob, seed=seed,
                            caption_key=pair_caption_key)
    arrays |= kept.arrays
    meta_extra |= kept.meta
    signal, prob = kept.signal, kept.prob
    arrays["table.x"], arrays["table.y"] = signal_table(signal, prob)
    cut = state["cut"]
    noisy = parts == "noisy"
    meta = {
        "format": FORMAT, "method": method.name, "params": method.params(), "seed": seed,
        "columns": {"caption": corpus.columns.caption, "id": corpus.columns.id,
                    "image_emb": corpus.columns.image_emb, "text_emb": corpus.columns.text_emb},
        "id_type": str(corpus.ids.type),
        "widths": [int(features.image_data.shape[1]), int(features.text_data.shape[1])],
        "matcher": state["config"].to_dict(),
        "cut": as_record(cut),
        "noisy_up_to": float(np.asarray(clean_prob)[noisy].max()) if noisy.any() else None,
        "significance": significance_mode, "pseudo_captions": pseudo_captions,
        "donors": stages.report.get("pseudo_captions", {}).get("pool"),
        "noise_rate": result.noise_rate,
        "noise_interval": result.noise_ci95,
        "columns_out": {name: str(np.asarray(v).dtype) for name, v in result.columns.items()},
        "sample": {"n_pairs": int(n), "content_hash":
                   hashlib.sha256(arrays["sample.key"].tobytes()).hexdigest()},
    } | meta_extra
    return Fit(meta=meta, arrays=arrays, matcher=result.matcher if kept.keeps_matcher else None)


def full_donors(donor: np.ndarray, text_group: np.ndarray) -> np.ndarray:
    """``(n,) bool``: the pairs whose caption the sample's suggestions (``donor``: each pair's
    donor pair, ``-1`` for none) offered as often as the cap allows."""
    from ncclean.stages.pseudocaption import donor_cap

    given = donor[donor >= 0]
    if not len(given):
        return np.zeros(len(text_group), dtype=bool)
    texts, uses = np.unique(text_group[given], return_counts=True)
    return np.isin(text_group, texts[uses >= donor_cap(len(given))])


def calibrate(fit: Fit, corpus, features, device: str = "cpu") -> np.ndarray | None:
    """Refit the fit's table on held-out pairs (``features`` of ``corpus``: pairs beyond the
    fit sample, never trained on), in place, as the method's application does it
    (:meth:`~ncclean.methods.applied.Application.calibrate`); returns their clean
    probabilities when the sample is to be put on their scale (:func:`rescale_sample`), else
    ``None`` (also when there are too few held-out pairs to refit on)."""
    from ncclean.methods.applied import MIN_HELD_OUT
    from ncclean.methods.base import get_method

    application = get_method(fit.meta["method"]).application
    if not application.held_out or features.n_pairs < MIN_HELD_OUT:
        return None
    features = application.prepared(fit.arrays, features)
    embeddings = application.embeddings(fit.arrays, fit.matcher, features, device)
    calibrated = application.calibrate(fit.arrays, fit.meta, features, embeddings)
    fit.arrays["table.x"], fit.arrays["table.y"] = signal_table(calibrated.signal,
                                                                calibrated.prob)
    fit.meta |= calibrated.meta
    fit.meta["calibration"] = fit.meta.get("calibration") or {
        "pairs": int(features.n_pairs), "on": "held-out pairs (the next smallest id hashes)"}
    return calibrated.prob if calibrated.rescale else None


def rescale_sample(fit: Fit, state: dict, held_out: np.ndarray) -> None:
    """Put the fit sample's ``clean_prob`` on the held-out pairs' scale, in place (a fit sampled
    from a larger corpus whose application rescales, after :func:`calibrate` gave ``held_out``,
    the held-out pairs' clean probabilities), then cut, search significance and pseudo-captions
    for the sample as :mod:`ncclean.pipeline.apply` does for any other pair.

    The rule: the sample pair with the ``q``-th quantile of the one pass's clean probability
    gets the ``q``-th quantile of ``held_out``. The sample and the held-out pairs are drawn
    alike from the corpus (by id hash), so their clean probabilities should share one
    distribution; the one pass's posterior ranks the sample (kept: the map is monotone) but its
    scale comes from networks that fitted their own noisy pairs, which an applied pair's does
    not (on clip art at 50%: 31% of the sample cut as noisy against 54% of the applied pairs,
    ``benchmarks/results/scale.md``). The one pass's values stay in ``sample.one_pass_prob``
    and its noise estimate in ``one_pass_noise_rate``; the run's is the held-out mixture's.
    """
    from ncclean.methods.applied import quantile_map
    from ncclean.options import Cut
    from ncclean.pipeline.apply import _cut, _donors, _significance, caption_counts

    corpus, features = state["corpus"], state["features"]
    order = np.argsort(sample_keys(corpus, features), kind="stable")
    sub = features.subset(order)  # the sample in the fit's order (by pair key)
    arrays = fit.arrays
    one_pass = arrays["sample.clean_prob"]
    clean_prob = quantile_map(one_pass, held_out)  # mid-rank: tied pairs stay tied
    if fit.meta["cut"]["noise_rate"] is not None and fit.meta["noisy_up_to"] is not None:
        noisy = arrays["sample.partition"] == PARTITIONS.index("noisy")
        fit.meta["noisy_up_to"] = float(clean_prob[noisy].max()) if noisy.any() else None
    n = sub.n_pairs
    caption_key = text_keys([corpus.captions[features.rows[k]] for k in order])
    counts = caption_counts(fit, caption_key)
    resolved = replace(Cut.from_record(fit.meta["cut"]), queue_clean_above=None).with_recall(
        clean_prob)  # on the new scale (a held-out mixture's estimate has no interval)
    fit.meta["cut"] = as_record(resolved)
    parts = _cut(fit, clean_prob, counts)
    significance = np.full(n, np.nan)
    donor = np.full(n, -1, dtype=np.int64)
    donor_score = np.full(n, np.nan, dtype=np.float32)
    everything = np.arange(n)  # the final matcher's embeddings, as an applied pair's
    space = state["fit_embeddings"]  # the applied pairs' space (fit_from_state)
    _significance(fit, sub, space, parts, significance, everything, counts)
    _donors(fit, sub, space, parts, donor, donor_score, everything, caption_key)
    codes = {name: k for k, name in enumerate(PARTITIONS)}
    arrays["sample.one_pass_prob"] = one_pass
    arrays["sample.clean_prob"] = clean_prob
    arrays["sample.partition"] = np.array([codes[p] for p in parts], dtype=np.uint8)
    arrays["sample.significance"] = significance
    arrays["sample.donor"] = donor
    if "sample.donor_score" in arrays:
        arrays["sample.donor_score"] = donor_score
    fit.meta["one_pass_noise_rate"] = fit.meta["noise_rate"]
    fit.meta["noise_rate"] = fit.meta.get("mixture", {}).get(  # the held-out mixture's
        "noise_rate", float(np.mean(clean_prob < 0.5)))
    fit.meta["noise_interval"] = None
    fit.meta["sample_scale"] = ("held-out: the one pass's clean_prob of the sample mapped "
                                "quantile to quantile onto the held-out pairs' posteriors")
