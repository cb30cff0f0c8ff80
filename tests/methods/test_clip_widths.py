"""``clip``'s average over the CCA's widths: on a corpus ranked cross-fitted, ``clean_prob`` is
the mean of the four widths' fits, in one pass and for pairs a saved fit is applied to."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError
from ncclean.methods.clip_widths import SEED_STEP, WIDTHS
from ncclean.options import ScaleOptions
from ncclean.pipeline.fit import load_fit, sample_positions
from tests.pipeline.corpora import write_shards

COLUMNS = Columns(image_emb="img", text_emb="txt")


def wide_table(n, rng, noisy=0.3, widths=(640, 384)):
    """Image vectors 640 wide and caption vectors 384 wide (so every width differs, and 240
    pairs are ranked cross-fitted) that see one latent through different maps; a share
    ``noisy`` of the captions belong to other images."""
    latent = rng.normal(size=(n, 8))
    image = latent @ rng.normal(size=(8, widths[0])) + 2.0 * rng.normal(size=(n, widths[0]))
    text = latent @ rng.normal(size=(8, widths[1])) + 2.0 * rng.normal(size=(n, widths[1]))
    moved = rng.permutation(n)[:int(noisy * n)]
    text[moved] = text[np.roll(moved, 1)]
    return pa.table({"id": [f"p{i}" for i in range(n)], "caption": [f"c{i}" for i in range(n)],
                     "img": list(image.astype(np.float32)), "txt": list(text.astype(np.float32))})


def scored(source, out, params=None, seed=3, **scale):
    summary = api.score(source, out, method="clip", params=params, columns=COLUMNS, seed=seed,
                        cache_dir=False, scale=ScaleOptions(**scale) if scale else None)
    return summary.output


def clean_prob(path):
    files = sorted(Path(path).glob("*.parquet")) if Path(path).is_dir() else [Path(path)]
    return np.concatenate([np.asarray(pq.read_table(f).column("clean_prob").to_pylist())
                           for f in files])


@pytest.mark.slow  # 27 s here: `make test-all` runs it
def test_a_cross_fitted_corpus_averages_the_four_widths(tmp_path, rng):
    pq.write_table(wide_table(240, rng), tmp_path / "in.parquet")  # 240 entries < 0.25 x 1,024
    averaged = scored(tmp_path / "in.parquet", tmp_path / "auto.parquet")
    report = json.loads(Path(f"{averaged}.json").read_text())["report"]
    assert report["rank"] == "cross-fitted (10 folds)"
    # each width its directions, the widest cut to the 239 that 240 pairs can correlate
    assert report["widths"]["averaged"] == [*WIDTHS[:-1], 239]
    assert report["alignment"]["dims"] == 128  # the columns are 128 directions'
    # cross-fitted, each width draws its own folds and shuffles: the k-th with seed 3 + k steps
    each = [clean_prob(scored(tmp_path / "in.parquet", tmp_path / f"{w}.parquet",
                              {"align_dims": w}, seed=3 + SEED_STEP * k))
            for k, w in enumerate(WIDTHS)]
    assert not np.allclose(each[0], each[-1])
    assert np.allclose(clean_prob(averaged), np.mean(each, axis=0), atol=1e-6)
    shared = scored(tmp_path / "in.parquet", tmp_path / "shared.parquet",
                    {"width_folds": "shared"})
    at_three = [clean_prob(scored(tmp_path / "in.parquet", tmp_path / f"{w}-3.parquet",
                                  {"align_dims": w})) for w in WIDTHS[1:]]
    assert np.allclose(clean_prob(shared), np.mean([each[0], *at_three], axis=0), atol=1e-6)
    in_sample = scored(tmp_path / "in.parquet", tmp_path / "in-sample.parquet",
                       {"rank": "in-sample"})  # fewer entries than the width: still averaged
    assert "widths" in json.loads(Path(f"{in_sample}.json").read_text())["report"]


def test_a_fit_with_a_width_of_entries_keeps_one_width(tmp_path, rng):
    pq.write_table(wide_table(240, rng, widths=(96, 64)), tmp_path / "in.parquet")
    report = json.loads(Path(f"{scored(tmp_path / 'in.parquet', tmp_path / 'out.parquet')}.json")
                        .read_text())["report"]  # 240 entries >= 160: ranked in sample, trusted
    assert "widths" not in report and report["alignment"]["dims"] == 64


def test_four_widths_are_refused_where_they_cannot_be_averaged(tmp_path, rng):
    pq.write_table(wide_table(240, rng), tmp_path / "in.parquet")
    for params in ({"align_widths": "four", "align_dims": 64},
                   {"align_widths": "four", "keep_fraction": 0.5},
                   {"align_widths": "four", "align": "none"}):
        with pytest.raises(BadOptionError):
            scored(tmp_path / "in.parquet", tmp_path / "out.parquet", params)


@pytest.mark.slow  # 20 s here: `make test-all` runs it
def test_a_saved_fit_applies_the_average_of_its_widths(tmp_path, rng):
    write_shards(wide_table(400, rng), tmp_path / "in", 2)
    out = scored(tmp_path / "in", tmp_path / "out", fit_sample=240, save_fit=tmp_path / "fit")
    fit = load_fit(tmp_path / "fit")
    assert fit.meta["averaged_widths"] == [*WIDTHS[:-1], 239]  # a 240-pair sample's most
    primary = WIDTHS.index(128)  # its arrays are the fit's own, kept once
    assert fit.meta["averaged_primary"] == primary
    assert f"widths.{primary}.table.x" in fit.arrays
    assert f"widths.{primary}.align.image_projection" not in fit.arrays
    assert "widths.0.align.image_projection" in fit.arrays
    applied = sample_positions(fit, out) < 0
    assert applied.sum() == 160
    each = [clean_prob(scored(tmp_path / "in", tmp_path / f"out-{w}", {"align_dims": w},
                              seed=3 + SEED_STEP * k, fit_sample=240))
            for k, w in enumerate(WIDTHS)]
    low, high = fit.arrays["table.x"][[0, -1]]  # the sample's own range holds applied pairs
    expected = np.clip(np.mean(each, axis=0), low, high)
    assert np.allclose(clean_prob(out)[applied], expected[applied], atol=1e-6)
