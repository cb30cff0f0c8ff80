"""The neighbours' agreement clip adds to its CCA cosine: its reading checked against a brute-force
one, where the rule adds it, and the same term for a pair fitted and a pair applied."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.data.schema import Columns
from ncclean.methods.neighbours import SAME, fit_neighbours, neighbour_count, neighbour_sides
from ncclean.options import ScaleOptions
from ncclean.pipeline.fit import load_fit
from tests.methods.test_clip import wide_corpus

COLUMNS = Columns(image_emb="img", text_emb="txt")


def brute_force(images, texts, image_group, text_group, pairs_i, pairs_t, k, refs=None):
    """``a`` and ``b`` of the pairings ``(pairs_i[m], pairs_t[m])`` of raw ``images`` / ``texts``
    rows, read the slow way, the neighbours among the fitted entries ``refs`` (raw tables and
    groups of the fitted pairs; the pairings' own by default)."""
    ref_images, ref_texts, ref_ig, ref_tg = refs or (images, texts, image_group, text_group)
    image_mean, text_mean = ref_images[ref_ig].mean(0), ref_texts[ref_tg].mean(0)

    def unit(v, mean):
        v = v - mean
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    x, y = unit(images, image_mean), unit(texts, text_mean)
    rx, ry = unit(ref_images, image_mean), unit(ref_texts, text_mean)
    text_images = {t: rx[ref_ig[ref_tg == t]].mean(0) for t in np.unique(ref_tg)}
    image_texts = {i: ry[ref_tg[ref_ig == i]].mean(0) for i in np.unique(ref_ig)}

    def nearest(query, table, kept):
        sims = {e: float(table[e] @ query) for e in kept}
        return [e for e in sorted(sims, key=sims.get, reverse=True) if sims[e] < SAME][:k]

    a = [x[i] @ np.mean([text_images[e] for e in nearest(y[t], ry, text_images)], axis=0)
         for i, t in zip(pairs_i, pairs_t)]
    b = [y[t] @ np.mean([image_texts[e] for e in nearest(x[i], rx, image_texts)], axis=0)
         for i, t in zip(pairs_i, pairs_t)]
    return np.array(a), np.array(b)


def assert_reads_as_brute_force(fitted, images, texts, image_group, text_group, rng, k):
    """``fitted``'s agreement of 40 random pairings of the entries is the brute-force one."""
    pairs_i = rng.integers(0, len(images), size=40)
    pairs_t = rng.integers(0, len(texts), size=40)
    a, b, _ = fitted.agreement(pairs_i, pairs_t)
    want_a, want_b = brute_force(images, texts, image_group, text_group, pairs_i, pairs_t, k)
    np.testing.assert_allclose(a, want_a, atol=1e-5)
    np.testing.assert_allclose(b, want_b, atol=1e-5)


@pytest.fixture
def entries(rng):
    images = rng.normal(size=(30, 12)).astype(np.float32)
    texts = rng.normal(size=(25, 7)).astype(np.float32)
    # every entry in a pair, and captions and images repeat
    image_group = np.concatenate([np.arange(30), rng.integers(0, 30, size=30)])
    text_group = np.concatenate([np.arange(25), rng.integers(0, 25, size=35)])
    return images, texts, image_group, text_group


def test_the_agreement_is_the_brute_force_reading_for_any_pairing(entries, rng):
    images, texts, image_group, text_group = entries
    fitted = fit_neighbours(images, texts, image_group, text_group, rng.normal(size=60), k=4)
    assert_reads_as_brute_force(fitted, images, texts, image_group, text_group, rng, k=4)


def test_new_pairs_find_their_neighbours_among_the_fitted_ones(entries, rng):
    images, texts, image_group, text_group = entries
    fitted = fit_neighbours(images, texts, image_group, text_group, rng.normal(size=60), k=3)
    new_images = np.concatenate([rng.normal(size=(5, 12)), images[:2]]).astype(np.float32)
    new_texts = np.concatenate([rng.normal(size=(5, 7)), texts[:2]]).astype(np.float32)
    new_ig, new_tg = np.arange(7), np.arange(7)
    a, b = brute_force(new_images, new_texts, new_ig, new_tg, new_ig, new_tg, 3,
                       refs=(images, texts, image_group, text_group))
    term = fitted.hood.score_new(new_images, new_texts, new_ig, new_tg)
    np.testing.assert_allclose(term, fitted.hood.term(a, b), atol=1e-5)


def test_its_spread_is_the_weight_times_the_cosines(entries, rng):
    images, texts, image_group, text_group = entries
    cosine = rng.normal(scale=0.2, size=60)
    fitted = fit_neighbours(images, texts, image_group, text_group, cosine, k=4, weight=0.5)
    a, b, _ = fitted.agreement(image_group, text_group)
    assert fitted.hood.weights[0] * np.std(a) == pytest.approx(0.25 * np.std(cosine))
    assert fitted.hood.weights[1] * np.std(b) == pytest.approx(0.25 * np.std(cosine))
    alone = fit_neighbours(images, texts, image_group, text_group, cosine, k=4, weight=0.5,
                           sides=(True, False))
    assert alone.hood.weights == (fitted.hood.weights[0], 0.0, 0.0)


def test_the_rule_adds_it_to_small_fits_and_leaves_b_out_where_captions_are_conventions():
    assert neighbour_count(None, 8_000, conventions=False) == 7
    assert neighbour_count(None, 8_000, conventions=True) == 5
    assert neighbour_count(None, 30_000, conventions=False) == 0
    assert neighbour_count(5, 60_000, conventions=True) == 5
    assert neighbour_sides("auto", conventions=False) == (True, True)
    assert neighbour_sides("auto", conventions=True) == (True, False)
    assert neighbour_sides("both", conventions=True) == (True, True)
    assert neighbour_sides("a", conventions=False) == (True, False)


def test_clip_weighs_both_sides_in_a_corpus_of_names_and_a_alone_in_one_of_conventions(
        tmp_path, rng):
    wide_corpus(tmp_path / "names.parquet", rng, n=400, noisy=120)
    wide_corpus(tmp_path / "labels.parquet", rng, n=400, noisy=120, labelled=120)
    for name, params, b_counts in (("names", {}, True), ("labels", {}, False),
                                   ("labels", {"neighbour_sides": "both"}, True)):
        summary = api.score(tmp_path / f"{name}.parquet", tmp_path / "out.parquet",
                            method="clip", columns=COLUMNS, cache_dir=False, params=params,
                            overwrite=True)
        report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
        weight_a, weight_b = report["neighbours"]["weights"]
        assert weight_a > 0 and (weight_b > 0) is b_counts
        assert report["neighbours"]["sides"] == ("a and b" if b_counts else "a")
        assert report["neighbours"]["k"] == (5 if name == "labels" else 7)
        assert "clip_neighbours" in pq.read_schema(summary.output).names


def test_the_weights_are_read_from_shuffled_pairs_where_the_corpus_has_a_null(tmp_path, rng):
    wide_corpus(tmp_path / "names.parquet", rng, n=400, noisy=120)
    wide_corpus(tmp_path / "tiny.parquet", rng)  # under 5 folds of 50 pairs: no null
    for name, params, weighed in (("names", {}, "against shuffled pairs"),
                                  ("names", {"neighbour_weight": 0.5}, "by the cosines' spread"),
                                  ("tiny", {}, "by the cosines' spread")):
        summary = api.score(tmp_path / f"{name}.parquet", tmp_path / "out.parquet",
                            method="clip", columns=COLUMNS, cache_dir=False, params=params,
                            overwrite=True)
        report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
        assert report["neighbours"]["weighed"] == weighed
        assert min(report["neighbours"]["weights"]) >= 0 < sum(report["neighbours"]["weights"])


def with_ids(path):
    table = pq.read_table(path)
    pq.write_table(table.append_column("id", [[f"p{k}" for k in range(table.num_rows)]]), path)
    return path


def as_new_pairs(path, out):
    """``path``'s pairs under new ids, so that a fit made on them scores every one as new (a
    fitted pair applied again under its own id takes the fit's own result)."""
    table = pq.read_table(path)
    ids = [[f"new{k}" for k in range(table.num_rows)]]
    pq.write_table(table.set_column(table.column_names.index("id"), "id", ids), out)
    return out


def assert_applied_as_fitted(fitted, applied, column):
    """A new pair's ``column`` is the fitted pair's: the cosine to float precision; the
    neighbours' term for all but a few pairs, whose nearest entries change order when the saved
    fit's float16 tables round a near tie."""
    fitted = pq.read_table(fitted).column(column).to_numpy()
    applied = pq.read_table(applied).column(column).to_numpy()
    assert np.isfinite(applied).all() and np.std(fitted) > 0
    gap = np.abs(applied - fitted) / np.std(fitted)
    if column == "clip_sim":
        assert gap.max() < 1e-4, gap.max()
    else:
        assert np.mean(gap < 0.01) >= 0.98 and gap.max() < 0.25, (np.mean(gap < 0.01), gap.max())


@pytest.mark.parametrize("labelled", [0, 120])  # a corpus of names; one of conventions: a alone
def test_a_fitted_pair_applied_again_gets_the_term_its_fit_gave_it(tmp_path, rng, labelled):
    wide_corpus(tmp_path / "in.parquet", rng, n=400, noisy=120, labelled=labelled)
    with_ids(tmp_path / "in.parquet")
    run = dict(method="clip", columns=COLUMNS, seed=1, cache_dir=False)
    api.score(tmp_path / "in.parquet", tmp_path / "fitted.parquet",
              scale=ScaleOptions(save_fit=tmp_path / "fit"), **run)
    api.score(as_new_pairs(tmp_path / "in.parquet", tmp_path / "new.parquet"),
              tmp_path / "applied.parquet", scale=ScaleOptions(fit=tmp_path / "fit"), **run)
    # a small corpus of conventions ranks its own pairs cross-fitted: only the term compares
    for column in ("clip_neighbours",) if labelled else ("clip_sim", "clip_neighbours"):
        assert_applied_as_fitted(tmp_path / "fitted.parquet", tmp_path / "applied.parquet",
                                 column)
    _, weight_a, weight_b, _ = load_fit(tmp_path / "fit").arrays["neighbours.shape"]
    assert weight_a > 0 and bool(weight_b == 0) == bool(labelled)


def test_shards_beyond_the_sample_get_the_term_from_the_fitted_pairs(tmp_path, rng):
    from tests.pipeline.corpora import write_shards

    wide_corpus(tmp_path / "emb.parquet", rng)
    write_shards(pq.read_table(with_ids(tmp_path / "emb.parquet")), tmp_path / "in", 3)
    api.score(tmp_path / "in", tmp_path / "out", method="clip", columns=COLUMNS, seed=1,
              cache_dir=False, scale=ScaleOptions(fit_sample=150))
    parts = [pq.read_table(p) for p in sorted((tmp_path / "out").glob("*.parquet"))]
    term = np.concatenate([p.column("clip_neighbours").to_numpy() for p in parts])
    assert len(term) == 240 and np.isfinite(term).all()


def test_entries_in_no_pair_are_no_ones_neighbours(rng):
    images = rng.normal(size=(30, 12)).astype(np.float32)
    texts = rng.normal(size=(25, 7)).astype(np.float32)
    image_group = np.concatenate([np.arange(20), rng.integers(0, 20, size=20)])
    text_group = np.concatenate([np.arange(15), rng.integers(0, 15, size=25)])
    fitted = fit_neighbours(images, texts, image_group, text_group, rng.normal(size=40), k=4)
    assert_reads_as_brute_force(fitted, images, texts, image_group, text_group, rng, k=4)


def test_a_saved_neighbourhood_scores_its_own_pairs_as_the_fit_did(rng):
    from ncclean.methods.neighbours import Neighbourhood

    n = 400  # wide, unevenly spread float16 vectors in clusters, as real neighbours are
    centres = rng.normal(size=(40, 16))
    latent = centres[rng.integers(0, 40, size=n)] + 0.3 * rng.normal(size=(n, 16))

    def side(width):
        spread = latent @ rng.normal(size=(16, width)) * np.linspace(0.1, 3, width)
        return (spread + 0.5 * rng.normal(size=(n, width))).astype(np.float16)

    images, texts = side(1280), side(384)
    groups = np.arange(n)
    fitted = fit_neighbours(images, texts, groups, groups, rng.normal(size=n))
    loaded = Neighbourhood.from_arrays(fitted.hood.arrays())
    term = fitted.score(groups, groups)
    np.testing.assert_allclose(loaded.score_new(images, texts, groups, groups), term,
                               atol=0.01 * np.std(term))


def controlled(rng, real, shuffled):
    """A fit whose ``a`` of a pair is its caption entry's value and ``b`` its image entry's, its
    own pairs' ``a`` and ``b`` read from them, and its null: ``real`` and ``shuffled`` are
    ``(n, 3)`` draws of (cosine, a, b), or ``(n, 4)`` with a prior's cosine ``p``, its image
    entry's value. The entries are interleaved (real pairs' images odd,
    shuffled pairs' even; captions the other way) and permuted, and the null's rows are in an
    order of their own, so that a reading that mixes up pairs, rows and entries reads the wrong
    values."""
    from ncclean.methods.neighbours import FittedNeighbours, Neighbourhood
    from ncclean.methods.null_rate import NullEstimate

    n = len(real)
    image_group, text_group = 2 * rng.permutation(n) + 1, 2 * rng.permutation(n)
    null_images, null_texts = 2 * rng.permutation(n), 2 * rng.permutation(n) + 1
    a, b = np.zeros(2 * n, np.float32), np.zeros(2 * n, np.float32)
    a[text_group], b[image_group] = real[:, 1], real[:, 2]
    a[null_texts], b[null_images] = shuffled[:, 1], shuffled[:, 2]
    ones, empty = np.ones((2 * n, 1), np.float32), np.zeros((1, 1), np.float32)
    hood = Neighbourhood(empty[0], empty[0], empty, empty, empty, empty, k=1)
    fitted = FittedNeighbours(hood, ones, ones, a[:, None], b[:, None])
    if real.shape[1] == 4:  # a prior's cosine too, its image entry's value
        p = np.zeros((2 * n, 1), np.float32)
        p[image_group, 0], p[null_images, 0] = real[:, 3], shuffled[:, 3]
        fitted = replace(fitted, prior_images=p, prior_texts=ones, sides=(True, True, True))
    fitted = replace(fitted, pairs=fitted.agreement(image_group, text_group))
    rows = rng.permutation(n)
    null = NullEstimate(0.5, n, n, 1, scores=real[rows, 0], null=shuffled[:, 0], rows=rows,
                        null_images=null_images, null_texts=null_texts)
    return fitted, null


def draw(rng, n, gap, correlation=0.0, scale=(1.0, 1.0, 1.0)):
    """``(n, 3)``: (cosine, a, b) at means ``gap``, unit spread times ``scale``, ``a`` and ``b``
    correlated."""
    z = rng.normal(size=(n, 3))
    z[:, 2] = correlation * z[:, 1] + np.sqrt(1 - correlation ** 2) * z[:, 2]
    return (z * scale + gap).astype(np.float32)


BOTH = (True, True, False)


@pytest.mark.parametrize("real_gap, correlation, scale, want, sides", [
    ((1, 0, 2), 0.0, (1, 1, 2), (0.0, 0.5), BOTH),  # b parts as the cosine, at twice its scale
    ((1, 1, 1), 0.5, (1, 1, 1), (2 / 3, 2 / 3), BOTH),  # correlated sides share their weight
    ((1, -0.5, 1), 0.5, (1, 1, 1), (0.0, 1.0), BOTH),  # a weighed below zero: b solved alone
    ((1, 1, 2), 0.5, (1, 1, 1), (1.0, 0.0), (True, False, False)),  # b left out: a solved alone
])
def test_the_weights_read_from_shuffled_pairs_are_the_discriminants(
        rng, real_gap, correlation, scale, want, sides):
    from ncclean.methods.neighbours import read_weights

    n = 40_000
    real = draw(rng, n, real_gap, correlation, scale)
    shuffled = draw(rng, n, (0, 0, 0), correlation, scale)
    fitted, null = controlled(rng, real, shuffled)
    weights = read_weights(replace(fitted, sides=sides), null).hood.weights
    np.testing.assert_allclose(weights[:2], want, atol=0.04)
    assert weights[2] == 0


def test_nothing_is_read_from_a_null_that_cannot_say(rng):
    from ncclean.methods.neighbours import read_weights

    n = 2_000
    # a cosine that does not part real pairs from shuffled ones
    fitted, null = controlled(rng, draw(rng, n, (-0.5, 1, 1)), draw(rng, n, (0, 0, 0)))
    assert read_weights(fitted, null) is None
    assert read_weights(fitted, None) is None
    real = draw(rng, n, (1, 1, 1))
    real[0, 1] = np.nan
    fitted, null = controlled(rng, real, draw(rng, n, (0, 0, 0)))
    assert read_weights(fitted, null) is None
    # a side that hardly varies gets no weight, however well its tiny gap parts the two
    real, shuffled = draw(rng, n, (1, 1e-8, 1)), draw(rng, n, (0, 0, 0))
    real[:, 1] = 1e-8 + 1e-9 * real[:, 1]
    shuffled[:, 1] = 1e-9 * shuffled[:, 1]
    fitted, null = controlled(rng, real, shuffled)
    weights = read_weights(fitted, null).hood.weights
    assert weights[0] == 0 and weights[1] == pytest.approx(1, abs=0.15)
