import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError
from ncclean.evaluate.detection import detection_metrics
from ncclean.methods.base import Context
from ncclean.methods.clip import Clip, cross_fit_folds
from ncclean.methods.clip_posterior import read_posterior, top_fraction
from ncclean.testing import check_method, tiny_features
from tests.helpers import write_parquet


def test_passes_the_conformance_suite_on_precomputed_vectors():
    result = check_method(Clip())
    assert set(result.columns) == {"clip_sim"}
    assert result.report["embeddings"] == "precomputed columns"
    assert result.matcher is None


def test_a_warmed_up_matcher_is_the_similarity_source_without_vectors():
    features, config, _ = tiny_features(n_images=8)
    result = Clip(warmup_epochs=1, batch_size=32).fit(features, Context(seed=0,
                                                                        matcher_config=config))
    assert result.report["embeddings"] == "matcher warmed up for 1 epochs"
    assert result.matcher is not None and result.clean_prob.shape == (features.n_pairs,)


def test_warmed_up_similarity_finds_injected_noise():
    features, config, truth = tiny_features(n_images=60, captions_per_image=3, noise=0.4)
    # one seed's 8 epochs land at 0.74-0.82 (and move with the processor's float kernels): the
    # mean of three is the claim
    auroc = [detection_metrics(truth[features.rows], Clip(warmup_epochs=8, batch_size=32,
                                                          lr=5e-4).fit(
        features, Context(seed=seed, matcher_config=config)).clean_prob).auroc
        for seed in range(3)]
    assert np.mean(auroc) > 0.75, auroc


def test_precomputed_columns_need_no_training(tmp_path, rng):
    n = 200
    image = rng.normal(size=(n, 16)).astype(np.float32)
    text = image + 0.3 * rng.normal(size=(n, 16)).astype(np.float32)
    text[:50] = rng.normal(size=(50, 16))  # the first 50 pairs are mismatched
    write_parquet(tmp_path / "emb.parquet", {"caption": [f"c{i}" for i in range(n)],
                                             "img": list(image), "txt": list(text)})
    summary = api.score(tmp_path / "emb.parquet", tmp_path / "o.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    table = pq.read_table(summary.output).to_pydict()
    sim = np.array(table["clip_sim"])
    expected = np.sum(image * text, 1) / np.linalg.norm(image, axis=1) / \
        np.linalg.norm(text, axis=1)
    assert np.allclose(sim, expected, atol=1e-5)
    prob = np.array(table["clean_prob"])
    truth = np.arange(n) < 50
    assert detection_metrics(truth, prob).auroc == detection_metrics(truth, sim).auroc > 0.95
    assert np.median(prob[:50]) < 0.1 and np.median(prob[50:]) > 0.9
    assert summary.seconds["method"] < 5
    mixture = api.score(tmp_path / "emb.parquet", tmp_path / "m.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                        params={"posterior": "mixture"})
    prob = np.array(pq.read_table(mixture.output).column("clean_prob").to_pylist())
    assert prob[:50].max() < 0.5 < prob[50:].min()


def test_keep_fraction_is_datacomps_top_fraction_rule():
    assert top_fraction(np.array([0.1, 0.9, 0.5, 0.7]), 0.5).tolist() == [0, 1, 0, 1]
    assert top_fraction(np.array([0.3, 0.3, 0.3]), 1 / 3).tolist() == [1, 0, 0]
    features, config, _ = tiny_features(n_images=8)
    with pytest.raises(BadOptionError):
        Clip(keep_fraction=1.5).fit(features, Context(matcher_config=config))


def test_without_a_null_the_posterior_is_the_top_fraction_or_a_mixture():
    similarity = np.r_[np.random.default_rng(0).normal(0.6, 0.05, 80),
                       np.random.default_rng(1).normal(0.1, 0.05, 20)]
    kept = read_posterior(similarity, None, 0.7, "auto", seed=0)
    assert kept.clean_prob.sum() == 70 and kept.noise_rate == pytest.approx(0.3)
    assert kept.interval is None and kept.report == {}
    mixed = read_posterior(similarity, None, None, "auto", seed=0)
    assert mixed.report["posterior"] == "two-component mixture" and mixed.interval is None
    assert mixed.noise_rate == pytest.approx(0.2, abs=0.03)
    assert mixed.clean_prob[:80].mean() > 0.9 > 0.1 > mixed.clean_prob[80:].mean()


def two_encoder_corpus(path, rng, n=300, noisy=90):
    """Image vectors 24 wide and caption vectors 10 wide that see one latent through different
    maps; the first ``noisy`` captions belong to other images."""
    latent = rng.normal(size=(n, 6))
    image = latent @ rng.normal(size=(6, 24)) + 0.3 * rng.normal(size=(n, 24))
    text = latent @ rng.normal(size=(6, 10)) + 0.3 * rng.normal(size=(n, 10))
    text[:noisy] = text[n - noisy:][::-1]
    write_parquet(path, {"caption": [f"c{i}" for i in range(n)],
                         "img": list(image.astype(np.float32)),
                         "txt": list(text.astype(np.float32))})
    return np.arange(n) < noisy


def test_vectors_from_two_encoders_are_aligned_on_the_corpus(tmp_path, rng):
    truth = two_encoder_corpus(tmp_path / "emb.parquet", rng)
    summary = api.score(tmp_path / "emb.parquet", tmp_path / "o.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                        params={"align_dims": 6})
    table = pq.read_table(summary.output).to_pydict()
    assert detection_metrics(truth, np.array(table["clean_prob"])).auroc > 0.95
    report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
    assert report["alignment"]["dims"] == 6
    assert "aligned by a ridge CCA" in report["embeddings"]


def test_raw_cosine_of_two_widths_is_refused_with_a_way_out(tmp_path, rng):
    two_encoder_corpus(tmp_path / "emb.parquet", rng)
    with pytest.raises(BadOptionError, match=r"different widths \(24 and 10\).*align=cca"):
        api.score(tmp_path / "emb.parquet", tmp_path / "o.parquet", method="clip",
                  columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                  params={"align": "none"})
    assert not (tmp_path / "o.parquet").exists()


def test_alignment_settings_are_checked():
    features, config, _ = tiny_features(n_images=8)
    with pytest.raises(BadOptionError, match="parameter .align. of .clip.: .pca. is not one of"):
        Clip(align="pca").fit(features, Context(matcher_config=config))
    with pytest.raises(BadOptionError, match="already share one space"):
        Clip(align="cca").fit(features, Context(matcher_config=config))


def test_the_noise_rate_comes_from_shuffled_pairs_cross_fitted_when_aligned(tmp_path, rng):
    truth = two_encoder_corpus(tmp_path / "emb.parquet", rng, n=600, noisy=180)
    summary = api.score(tmp_path / "emb.parquet", tmp_path / "o.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                        params={"align_dims": 6}, noise_rate="auto")
    sidecar = json.loads(Path(f"{summary.output}.json").read_text())
    null = sidecar["report"]["null"]
    assert null["folds"] == 5 and null["pairs"] == 600
    assert sidecar["estimated_noise_rate"] == null["noise_rate"] == sidecar["cut"]["noise_rate"]
    assert null["noise_rate"] == pytest.approx(truth.mean(), abs=0.06)
    noisy = np.array(pq.read_table(summary.output).column("partition").to_pylist()) == "noisy"
    assert noisy.mean() == pytest.approx(null["noise_rate"], abs=1 / 600)


def test_a_fixed_space_needs_no_folds_and_a_warmed_matcher_gets_no_null(tmp_path, rng):
    n = 400
    image = rng.normal(size=(n, 16)).astype(np.float32)
    text = image + 0.3 * rng.normal(size=(n, 16)).astype(np.float32)
    text[:100] = text[100:200][::-1]
    write_parquet(tmp_path / "emb.parquet", {"caption": [f"c{i}" for i in range(n)],
                                             "img": list(image), "txt": list(text)})
    summary = api.score(tmp_path / "emb.parquet", tmp_path / "o.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    null = json.loads(Path(f"{summary.output}.json").read_text())["report"]["null"]
    assert null["folds"] == 1 and null["noise_rate"] == pytest.approx(0.25, abs=0.05)
    features, config, _ = tiny_features(n_images=20)
    warmed = Clip(warmup_epochs=1, batch_size=32).fit(features, Context(matcher_config=config))
    assert "null" not in warmed.report
    assert warmed.noise_rate == warmed.report["mixture"]["noise_rate"]


def test_a_clean_corpus_is_called_clean(tmp_path, rng):
    two_encoder_corpus(tmp_path / "emb.parquet", rng, n=600, noisy=0)
    summary = api.score(tmp_path / "emb.parquet", tmp_path / "o.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                        params={"align_dims": 6})
    partition = pq.read_table(summary.output).column("partition").to_pylist()
    assert partition.count("noisy") / 600 < 0.05 and summary.noise_rate < 0.05
    report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
    assert "false discovery rate" in report["posterior"] and "mixture" not in report
    with pytest.raises(BadOptionError, match="parameter .posterior. of .clip."):
        api.score(tmp_path / "emb.parquet", tmp_path / "x.parquet", method="clip",
                  columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                  params={"posterior": "gmm"})


def wide_corpus(path, rng, n=240, noisy=72, labelled=0, widths=(160, 80)):
    """Vectors wider than the corpus can fit in sample (160 and 80 wide for 240 pairs) that see a
    latent through different maps; the first ``noisy`` captions belong to other images, the last
    ``labelled`` pairs carry one caption (a collection's label)."""
    latent = rng.normal(size=(n, 8))
    image = latent @ rng.normal(size=(8, widths[0])) + 2.0 * rng.normal(size=(n, widths[0]))
    text = latent @ rng.normal(size=(8, widths[1])) + 2.0 * rng.normal(size=(n, widths[1]))
    text[:noisy] = text[n - noisy:][::-1]
    captions = [f"c{i}" for i in range(n)]
    if labelled:
        captions[-labelled:] = ["a collection's label"] * labelled
        text[-labelled:] = text[-labelled]
    write_parquet(path, {"caption": captions, "img": list(image.astype(np.float32)),
                         "txt": list(text.astype(np.float32))})
    return np.arange(n) < noisy


def test_under_ten_folds_of_twenty_pairs_a_corpus_is_read_on_fewer_folds(tmp_path, rng):
    """150 pairs: seven folds of 21, not the mixture on in-sample cosines that ten folds of 15
    left it (clip art's 150-200 pairs: AUROC 0.67-0.72 that way, 0.84-0.86 on fewer folds)."""
    # 150 entries, under a quarter of the summed width: ranked cross-fitted
    truth = wide_corpus(tmp_path / "emb.parquet", rng, n=150, noisy=45, widths=(480, 240))
    summary = api.score(tmp_path / "emb.parquet", tmp_path / "out.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
    assert report["rank"] == "cross-fitted (7 folds)"
    assert report["null"]["folds"] == 7 and report["null"]["pairs"] == 150
    assert summary.noise_interval is not None
    table = pq.read_table(summary.output).to_pydict()
    assert detection_metrics(truth, np.array(table["clean_prob"])).auroc > 0.85
    assert [cross_fit_folds(n) for n in (30, 40, 99, 100, 199, 200, 10_000)] == \
        [2, 2, 4, 5, 9, 10, 10]


def test_a_small_corpus_of_conventions_is_ranked_by_fits_that_did_not_see_each_pair(
        tmp_path, rng):
    truth = wide_corpus(tmp_path / "emb.parquet", rng, labelled=30)  # 12.5% of the pairs
    auroc, reports = {}, {}
    for rank in ("auto", "in-sample"):
        summary = api.score(tmp_path / "emb.parquet", tmp_path / f"{rank}.parquet", method="clip",
                            columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                            params={"rank": rank})
        table = pq.read_table(summary.output).to_pydict()
        auroc[rank] = detection_metrics(truth, np.array(table["clean_prob"])).auroc
        reports[rank] = json.loads(Path(f"{summary.output}.json").read_text())["report"]
    assert reports["auto"]["rank"] == "cross-fitted (10 folds)"
    assert reports["auto"]["null"]["folds"] == 10 and reports["auto"]["null"]["pairs"] == 240
    assert "rank" not in reports["in-sample"]
    # On clip art the cross-fitted rank is the better one below ~5,000 pairs (measured in
    # benchmarks/results/default-pipeline.md); here too, and both find the noise.
    assert auroc["auto"] > max(0.9, auroc["in-sample"]) and auroc["in-sample"] > 0.85, auroc


def test_read_only_vectors_are_normed_without_a_warning():
    import warnings

    from ncclean.methods.unit import row_norms

    rows = np.ones((3, 4), dtype=np.float16)
    rows.flags.writeable = False  # as vectors read back from the cache are
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.allclose(row_norms(rows), 2.0)


def test_a_small_corpus_of_names_is_ranked_in_sample(tmp_path, rng):
    wide_corpus(tmp_path / "emb.parquet", rng)  # every caption its own
    summary = api.score(tmp_path / "emb.parquet", tmp_path / "o.parquet", method="clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
    assert "rank" not in report and report["alignment"]["ridge"] == 30.0
    assert report["conventions"]["convention_share"] == 0.0
