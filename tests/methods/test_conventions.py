import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError
from ncclean.methods.align import fit_alignment
from ncclean.methods.conventions import caption_folds, convention_discount, held_out_similarity
from tests.helpers import write_parquet


def test_every_pair_of_a_caption_is_in_one_fold_and_the_folds_are_seeded():
    text_group = np.r_[np.zeros(50, int), np.ones(30, int), np.arange(2, 202)]
    fold = caption_folds(text_group, folds=10, seed=0)
    assert len(set(fold[:50])) == 1 and len(set(fold[50:80])) == 1
    assert set(fold) == set(range(10))
    assert np.array_equal(fold, caption_folds(text_group, folds=10, seed=0))
    assert not np.array_equal(fold, caption_folds(text_group, folds=10, seed=1))


def test_the_held_out_score_comes_from_fits_without_the_caption(rng):
    images = rng.normal(size=(120, 12)).astype(np.float32)
    texts = rng.normal(size=(60, 5)).astype(np.float32)
    image_group = np.arange(120)
    text_group = np.repeat(np.arange(60), 2)
    held = held_out_similarity(images, texts, image_group, text_group, dims=4, ridge=1.0,
                               seed=3, folds=4)
    fold = caption_folds(text_group, folds=4, seed=3)
    rows = np.flatnonzero(fold == 2)
    fit = np.flatnonzero(fold != 2)
    alignment = fit_alignment(images, texts, image_group[fit], text_group[fit], 4, 1.0)
    expected = (alignment.project_images(images[image_group[rows]])
                * alignment.project_texts(texts[text_group[rows]])).sum(1)
    assert np.allclose(held[rows], expected, atol=1e-4)


def test_a_fold_whose_fit_would_see_one_image_gets_no_held_out_score(rng):
    images = rng.normal(size=(80, 12)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    texts = rng.normal(size=(80, 5)).astype(np.float32)
    text_group = np.arange(80)
    fold = caption_folds(text_group, folds=4, seed=0)
    image_group = np.where(fold == 0, np.arange(80), 0)  # only fold 0 shows other images
    held = held_out_similarity(images, texts, image_group, text_group, dims=4, ridge=1.0,
                               folds=4)
    assert np.isnan(held[fold == 0]).all()  # its fit would see image 0 alone
    assert np.isfinite(held[fold != 0]).all()


def test_a_repeated_captions_gain_is_discounted_by_its_support():
    # two single captions gaining 0.1 and 0.3 (the 0.75 quantile: 0.25), a caption of 3 pairs
    # gaining 0.45 on average and one of 2 gaining less than a single caption typically does
    similarity = np.array([0.5, 0.5, 0.9, 0.9, 0.9, 0.4, 0.4])
    held_out = np.array([0.4, 0.2, 0.5, 0.4, 0.45, 0.3, 0.3])
    text_group = np.array([0, 1, 2, 2, 2, 3, 3])
    discount = convention_discount(similarity, held_out, text_group, quantile=0.75, kappa=3.0)
    assert discount[:2] == pytest.approx([0.0, 0.75 * 0.05])  # above the typical single gain
    assert discount[2:5] == pytest.approx([0.5 * (0.45 - 0.25)] * 3)  # 3 / (3 + 3)
    assert discount[5:] == pytest.approx([0.0, 0.0])
    unscored = convention_discount(similarity, np.full(7, np.nan), text_group)
    assert np.all(unscored == 0)


def convention_corpus(path, rng, n=800, k=40):
    """Images and captions that see one latent through different maps; the first ``k`` images
    share a look (a collection's style) and one caption that describes none of them."""
    latent = rng.normal(size=(n, 8))
    images = latent @ rng.normal(size=(8, 64)) + rng.normal(size=(n, 64))
    texts = latent @ rng.normal(size=(8, 32)) + rng.normal(size=(n, 32))
    images[:k] += 3.0 * rng.normal(size=64)
    texts[:k] = 3.0 * rng.normal(size=32)
    captions = ["collection"] * k + [f"c{i}" for i in range(k, n)]
    write_parquet(path, {"caption": captions, "img": list(images.astype(np.float32)),
                         "txt": list(texts.astype(np.float32))})
    return np.arange(n) < k


def test_a_collections_caption_no_longer_scores_as_a_description(tmp_path, rng):
    convention = convention_corpus(tmp_path / "emb.parquet", rng)  # 5% of the pairs share it
    prob, tables = {}, {}
    for mode in ("auto", "trust"):
        summary = api.score(tmp_path / "emb.parquet", tmp_path / f"{mode}.parquet",
                            method="clip", columns=Columns(image_emb="img", text_emb="txt"),
                            cache_dir=False, params={"conventions": mode})
        tables[mode] = pq.read_table(summary.output).to_pydict()
        prob[mode] = np.array(tables[mode]["clean_prob"])
    # trusted, the fit learnt the collection's caption as its pictures' description
    assert prob["trust"][convention].mean() > 0.95
    assert prob["auto"][convention].mean() < 0.8 < prob["auto"][~convention].mean()
    assert "clip_convention" not in tables["trust"]
    discount = np.array(tables["auto"]["clip_convention"])
    assert discount[convention].min() > 0 and np.allclose(discount[convention],
                                                          discount[convention][0])
    report = json.loads(Path(tmp_path / "auto.parquet.json").read_text())["report"]
    assert report["conventions"]["discounted_captions"] >= 1


def test_discounting_needs_a_space_fitted_on_the_corpus(tmp_path, rng):
    n = 200
    image = rng.normal(size=(n, 16)).astype(np.float32)
    write_parquet(tmp_path / "emb.parquet", {"caption": [f"c{i}" for i in range(n)],
                                             "img": list(image), "txt": list(image)})
    with pytest.raises(BadOptionError, match="conventions=discount needs a CCA"):
        api.score(tmp_path / "emb.parquet", tmp_path / "o.parquet", method="clip",
                  columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                  params={"conventions": "discount"})


def test_discounting_is_refused_before_a_matcher_is_warmed_up(tmp_path, monkeypatch):
    import ncclean.methods.clip as clip_module
    from tests.helpers import retrain_corpus

    corpus = retrain_corpus(tmp_path)

    def never(*args, **kwargs):
        raise AssertionError("trained before refusing")

    monkeypatch.setattr(clip_module, "warmed_matcher", never)
    with pytest.raises(BadOptionError, match="conventions=discount needs a CCA"):
        api.score(corpus / "noisy.parquet", tmp_path / "o.parquet", method="clip",
                  image_encoder="pixels", text_encoder="tokens", cache_dir=False,
                  params={"conventions": "discount"})


def test_repeated_discounts_a_collections_caption_and_leaves_single_captions_as_fitted(
        tmp_path, rng):
    convention = convention_corpus(tmp_path / "emb.parquet", rng)
    tables = {}
    for mode in ("discount", "repeated", "trust"):
        summary = api.score(tmp_path / "emb.parquet", tmp_path / f"{mode}.parquet",
                            method="clip", columns=Columns(image_emb="img", text_emb="txt"),
                            cache_dir=False, params={"conventions": mode, "rank": "in-sample"})
        tables[mode] = pq.read_table(summary.output).to_pydict()
    discount = {mode: np.array(tables[mode]["clip_convention"]) for mode in ("discount",
                                                                            "repeated")}
    assert np.allclose(discount["repeated"][convention], discount["discount"][convention])
    assert discount["discount"][~convention].max() > 0  # a single caption's memorisation
    assert np.all(discount["repeated"][~convention] == 0)
    prob = {mode: np.array(tables[mode]["clean_prob"]) for mode in tables}
    assert prob["repeated"][convention].mean() < 0.8 < prob["trust"][convention].mean()
    assert np.allclose(tables["repeated"]["clip_sim"], tables["trust"]["clip_sim"], atol=1e-6)


def test_auto_trusts_a_corpus_whose_captions_name_their_pictures_one_by_one(tmp_path, rng):
    convention = convention_corpus(tmp_path / "emb.parquet", rng, k=20)  # 2.5% share one
    summary = api.score(tmp_path / "emb.parquet", tmp_path / "auto.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    table = pq.read_table(summary.output).to_pydict()
    assert "clip_convention" not in table
    assert np.array(table["clean_prob"])[convention].mean() > 0.95  # as trusted
    report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
    assert report["conventions"]["convention_share"] == pytest.approx(0.025)
