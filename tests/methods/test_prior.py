"""The prior space clip reads a corpus in beside its own CCA: its file, its weight read against
shuffled pairs, and a corpus of the default towers' widths scored, saved and applied with it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.api import Columns, ScaleOptions
from ncclean.methods import prior as prior_space
from ncclean.methods.align import Alignment, fit_alignment
from ncclean.methods.neighbours import read_weights
from ncclean.pipeline.fit import load_fit
from tests.methods.test_neighbours import assert_applied_as_fitted, controlled, draw

COLUMNS = Columns(image_emb="img", text_emb="txt")


def test_a_prior_file_keeps_its_projections_whatever_their_memory_order(tmp_path, rng):
    # a fit's projections may be column-major: the file must hold them as they read, not as
    # they lie in memory
    image_projection = np.asfortranarray(rng.normal(size=(12, 4)).astype(np.float32))
    text_projection = np.asfortranarray(rng.normal(size=(6, 4)).astype(np.float32))
    prior = Alignment(rng.normal(size=12).astype(np.float32), rng.normal(size=6).astype(
        np.float32), image_projection, text_projection, np.ones(4), 0.1)
    prior_space.save_prior(prior, tmp_path / "p.safetensors", {"fitted_on": "test"})
    loaded = prior_space.load_prior(tmp_path / "p.safetensors")
    for name in ("image_projection", "text_projection"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(prior, name).astype(
            np.float16).astype(np.float32))
    np.testing.assert_array_equal(loaded.image_mean, prior.image_mean)


def test_the_prior_cosine_is_weighed_as_the_discriminant_says(rng):
    n = 40_000
    real, shuffled = draw(rng, n, (1, 0, 0)), draw(rng, n, (0, 0, 0))
    # p parts real pairs (mean 0.5) from shuffled ones (0) at half the cosine's gap
    real = np.column_stack([real, rng.normal(0.5, 1.0, size=n)]).astype(np.float32)
    shuffled = np.column_stack([shuffled, rng.normal(0.0, 1.0, size=n)]).astype(np.float32)
    fitted, null = controlled(rng, real, shuffled)
    np.testing.assert_allclose(read_weights(fitted, null).hood.weights, (0.0, 0.0, 0.5),
                               atol=0.04)
    # the same prior, not among the sides weighed, gets none
    assert read_weights(replace(fitted, sides=(True, True, False)), null).hood.weights[2] == 0


def towers_corpus(rng, maps, n, noisy):
    """``n`` pairs of vectors as wide as the default towers' (1,280 and 384) that see a latent
    through ``maps``; the first ``noisy`` captions belong to other images."""
    latent = rng.normal(size=(n, 16))
    image = latent @ maps[0] + 14.0 * rng.normal(size=(n, prior_space.IMAGE_WIDTH))
    text = latent @ maps[1] + 14.0 * rng.normal(size=(n, prior_space.TEXT_WIDTH))
    text[:noisy] = text[n - noisy:][::-1]
    return image.astype(np.float32), text.astype(np.float32)


@pytest.fixture
def shipped(tmp_path, rng, monkeypatch):
    """A prior fitted on 4,000 other pairs of the same towers (on the latent's 16 directions,
    where they correlate), in place of the shipped one."""
    maps = (rng.normal(size=(16, prior_space.IMAGE_WIDTH)),
            rng.normal(size=(16, prior_space.TEXT_WIDTH)))
    image, text = towers_corpus(rng, maps, 4000, 0)
    rows = np.arange(4000)
    from ncclean.methods.unit import unit_rows

    prior = fit_alignment(unit_rows(image), unit_rows(text), rows, rows, dims=16,
                          ridge=prior_space.RIDGE)
    prior_space.save_prior(prior, tmp_path / "prior.safetensors", {})
    monkeypatch.setattr(prior_space, "BUNDLED", tmp_path / "prior.safetensors")
    return maps


def write_corpus(path, image, text):
    from tests.methods.test_clip import write_parquet

    write_parquet(path, {"id": [f"p{k}" for k in range(len(image))],
                         "caption": [f"c{k}" for k in range(len(image))],
                         "img": list(image), "txt": list(text)})
    return path


def test_a_small_corpus_of_the_towers_widths_is_read_in_the_prior_too(tmp_path, rng, shipped):
    image, text = towers_corpus(rng, shipped, 300, 90)
    corpus = write_corpus(tmp_path / "in.parquet", image, text)
    truth = np.arange(300) < 90
    runs = {}
    for arm, params in (("on", {}), ("off", {"prior": "off"})):
        summary = api.score(corpus, tmp_path / f"{arm}.parquet", method="clip", params=params,
                            columns=COLUMNS, seed=0, cache_dir=False)
        report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
        clean = pq.read_table(summary.output).column("clean_prob").to_numpy()
        runs[arm] = (report["neighbours"], auroc(truth, clean))
    assert runs["on"][0]["prior"] > 0 and "p" in runs["on"][0]["sides"]
    assert "prior" not in runs["off"][0]
    assert runs["on"][1] > runs["off"][1] + 0.1, runs  # 0.80 -> 0.98
    # a saved fit carries the prior: new pairs get the term their fit gave them
    api.score(corpus, tmp_path / "saved.parquet", method="clip", columns=COLUMNS, seed=0,
              cache_dir=False, scale=ScaleOptions(save_fit=tmp_path / "fit-on"))
    saved = load_fit(tmp_path / "fit-on")
    *_, weight_p = saved.arrays["neighbours.shape"]
    assert weight_p == pytest.approx(runs["on"][0]["prior"], abs=1e-4)
    # the fitted pairs and the prior are held once, not once per averaged width
    assert len(saved.meta["averaged_widths"]) == 4
    for table in ("neighbours.images", "neighbours.text_images",
                  "neighbours.prior.image_projection"):
        assert sum(table in name for name in saved.arrays) <= 1, table
    new = write_corpus(tmp_path / "new.parquet", image, text)
    pq.write_table(pq.read_table(new).set_column(0, "id", [[f"n{k}" for k in range(300)]]), new)
    api.score(new, tmp_path / "applied.parquet", method="clip", columns=COLUMNS, seed=0,
              cache_dir=False, scale=ScaleOptions(fit=tmp_path / "fit-on"))
    assert_applied_as_fitted(tmp_path / "saved.parquet", tmp_path / "applied.parquet",
                             "clip_neighbours")


def test_vectors_of_other_widths_are_never_read_in_the_prior(tmp_path, rng, shipped):
    assert prior_space.bundled_prior("auto", 1280, 384) is not None
    assert prior_space.bundled_prior("off", 1280, 384) is None
    assert prior_space.bundled_prior("auto", 1280, 512) is None
    assert prior_space.bundled_prior("auto", 768, 384) is None


def test_a_missing_prior_file_is_said_not_scored_without(tmp_path, monkeypatch):
    from ncclean.errors import NcCleanError

    monkeypatch.setattr(prior_space, "BUNDLED", tmp_path / "gone.safetensors")
    with pytest.raises(NcCleanError, match="prior space is missing.*-p prior=off"):
        prior_space.bundled_prior("auto", 1280, 384)
    assert prior_space.bundled_prior("off", 1280, 384) is None


def test_the_shipped_prior_is_the_default_towers(tmp_path):
    prior = prior_space.load_prior(prior_space.BUNDLED)
    assert prior.image_projection.shape == (prior_space.IMAGE_WIDTH, prior_space.DIMS)
    assert prior.text_projection.shape == (prior_space.TEXT_WIDTH, prior_space.DIMS)
    assert np.isfinite(prior.image_projection).all() and np.isfinite(prior.text_projection).all()


def auroc(truth, clean_prob):
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(truth, 1 - clean_prob)


def test_a_neighbourhood_saved_before_the_prior_loads_without_one(rng):
    from ncclean.methods.neighbours import Neighbourhood, fit_neighbours

    images, texts = rng.normal(size=(40, 6)), rng.normal(size=(40, 5))
    groups = np.arange(40)
    hood = fit_neighbours(images, texts, groups, groups, rng.normal(size=40), k=3).hood
    arrays = hood.arrays()
    arrays["neighbours.shape"] = arrays["neighbours.shape"][:3]  # k, w_a, w_b
    loaded = Neighbourhood.from_arrays(arrays)
    assert loaded.weights == (*hood.weights[:2], 0.0) and loaded.prior is None
    np.testing.assert_array_equal(
        loaded.score_new(images, texts, groups, groups),
        Neighbourhood.from_arrays(hood.arrays()).score_new(images, texts, groups, groups))


def test_a_prior_that_parts_the_pairs_better_than_the_cosine_leads_it(rng):
    """Where, with ``p``, the discriminant would weigh the cosine at zero or below (a prior
    correlated with it that parts the pairs better: a corpus of the prior's own pictures), the
    cosine keeps a floor and ``p`` leads; a prior that parts nothing is left out instead."""
    from ncclean.methods.neighbours import COSINE_FLOOR

    n = 40_000

    def sample(gap):
        z = rng.normal(size=(n, 4))
        z[:, 3] = 0.6 * z[:, 0] + 0.8 * z[:, 3]  # p correlated with the cosine
        return (z + gap).astype(np.float32)

    fitted, null = controlled(rng, sample((0.3, 0.2, 0.0, 1.0)), sample((0, 0, 0, 0)))
    weights = read_weights(fitted, null).hood.weights
    assert weights[2] == pytest.approx(1 / COSINE_FLOOR) and 0 < weights[0] < weights[2]
    # a prior that only echoes the cosine, against it: left out, the corpus read alone
    fitted, null = controlled(rng, sample((0.3, 0.2, 0.0, -0.5)), sample((0, 0, 0, 0)))
    weights = read_weights(fitted, null).hood.weights
    assert weights[2] == 0 and weights[0] == pytest.approx(0.2 / 0.3, abs=0.1)


def test_every_shipped_prior_file_is_package_data():
    """A wheel carries only what ``pyproject.toml`` names as package data, and a default run
    without the prior file stops: every file beside the shipped prior must match a pattern."""
    import fnmatch
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11

    root = Path(prior_space.__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["ncclean"]
    shipped = [path.relative_to(root / "ncclean").as_posix()
               for path in prior_space.BUNDLED.parent.iterdir() if path.is_file()]
    assert prior_space.BUNDLED.name in {Path(p).name for p in shipped}
    assert all(any(fnmatch.fnmatch(p, pattern) for pattern in patterns) for p in shipped), shipped
