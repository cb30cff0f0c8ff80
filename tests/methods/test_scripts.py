"""Caption vectors centred per writing system before clip's CCA: the shift, where the rule makes
it, and the same shift for a pair fitted and a pair applied."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.data.schema import Columns
from ncclean.data.scripts import NAMES
from ncclean.methods.scripts import MIN_PAIRS, ScriptCentring, fit_centring
from ncclean.models.features import Features
from ncclean.options import ScaleOptions
from ncclean.pipeline.fit import load_fit
from tests.helpers import write_parquet
from tests.methods.test_neighbours import as_new_pairs, assert_applied_as_fitted

COLUMNS = Columns(image_emb="img", text_emb="txt")
LATIN, CYRILLIC, OTHER = NAMES.index("latin"), NAMES.index("cyrillic"), NAMES.index("other")


def features(rng, scripts, pairs_per_text=None):
    """Features of one pair per caption entry (or ``pairs_per_text[t]`` pairs of entry ``t``),
    each entry of writing system ``scripts[t]``."""
    scripts = np.asarray(scripts, np.int8)
    text_group = np.repeat(np.arange(len(scripts)), pairs_per_text or 1)
    n = len(text_group)
    return Features(rows=np.arange(n), image_group=np.arange(n), text_group=text_group,
                    image_data=rng.normal(size=(n, 6)).astype(np.float32),
                    text_data=(rng.normal(size=(len(scripts), 4)) + 3 * scripts[:, None])
                    .astype(np.float32), text_script=scripts)


def test_each_centred_system_gets_the_corpus_mean_of_its_pairs(rng):
    scripts = [LATIN] * 50 + [CYRILLIC] * 40 + [OTHER] * 35
    counts = list(rng.integers(1, 4, size=len(scripts)))
    fitted = features(rng, scripts, counts)
    centring = fit_centring(fitted)
    assert [NAMES[c] for c in centring.codes] == ["latin", "cyrillic"]
    assert centring.pairs == (sum(counts[:50]), sum(counts[50:90]))
    moved = centring.apply(fitted)
    by_pair = moved.text_data[moved.text_group]
    script = fitted.text_script[fitted.text_group]
    mean = fitted.text_data[fitted.text_group].astype(np.float64).mean(0)
    for code in (LATIN, CYRILLIC):
        np.testing.assert_allclose(by_pair[script == code].mean(0), mean, atol=1e-5)
    np.testing.assert_array_equal(moved.text_data[90:], fitted.text_data[90:])  # other: as is
    assert fitted.text_data.mean() != moved.text_data.mean()  # a copy: the input is left alone


@pytest.mark.parametrize("scripts", [
    [LATIN] * 100,  # one system
    [LATIN] * 100 + [CYRILLIC] * (MIN_PAIRS - 1),  # the second too small
    [LATIN] * 100 + [OTHER] * 100,  # no letters is no language
])
def test_a_corpus_with_fewer_than_two_systems_of_size_is_left_as_it_is(rng, scripts):
    assert fit_centring(features(rng, scripts)) is None


def two_languages(path, rng, n=400, noisy=120, offset=6.0):
    """``wide_corpus``'s pairs with the second half's captions in Cyrillic and their vectors
    moved along one direction, as a multilingual encoder places a language."""
    from tests.methods.test_clip import wide_corpus

    wide_corpus(path, rng, n=n, noisy=noisy)
    table = pq.read_table(path)
    text = np.stack(table["txt"].to_numpy(zero_copy_only=False)).astype(np.float64)
    second = np.arange(n) >= n // 2
    text[second] += offset * np.linalg.norm(text, axis=1).mean() * rng.normal(size=80) / 9
    captions = [f"{'подпись' if s else 'caption'} {i}" for i, s in enumerate(second)]
    write_parquet(path, {"id": [f"p{i}" for i in range(n)], "caption": captions,
                         "img": table["img"].to_pylist(), "txt": list(text.astype(np.float32))})


def test_clip_centres_a_corpus_in_two_scripts_and_a_saved_fit_applies_the_same_shift(
        tmp_path, rng):
    two_languages(tmp_path / "in.parquet", rng)
    run = dict(method="clip", columns=COLUMNS, seed=1, cache_dir=False)
    api.score(tmp_path / "in.parquet", tmp_path / "fitted.parquet",
              scale=ScaleOptions(save_fit=tmp_path / "fit"), **run)
    fit = load_fit(tmp_path / "fit")
    assert fit.meta["scripts"]["centred"] == {"latin": 200, "cyrillic": 200}
    assert ScriptCentring.from_arrays(fit.arrays).describe() == fit.meta["scripts"]
    api.score(as_new_pairs(tmp_path / "in.parquet", tmp_path / "new.parquet"),
              tmp_path / "applied.parquet", scale=ScaleOptions(fit=tmp_path / "fit"), **run)
    for column in ("clip_sim", "clip_neighbours"):
        assert_applied_as_fitted(tmp_path / "fitted.parquet", tmp_path / "applied.parquet",
                                 column)


def test_centring_ranks_a_corpus_of_two_languages_better(tmp_path, rng):
    from ncclean.evaluate.detection import detection_metrics

    two_languages(tmp_path / "in.parquet", rng)
    truth = np.arange(400) < 120
    auroc = {}
    for centre in ("auto", "none"):
        summary = api.score(tmp_path / "in.parquet", tmp_path / f"{centre}.parquet",
                            method="clip", columns=COLUMNS, cache_dir=False,
                            params={"centre_scripts": centre})
        prob = pq.read_table(summary.output).column("clean_prob").to_numpy()
        auroc[centre] = detection_metrics(truth, prob).auroc
        report = json.loads(Path(f"{summary.output}.json").read_text())["report"]
        assert ("scripts" in report) is (centre == "auto")
    assert auroc["auto"] > auroc["none"] + 0.02, auroc


def test_a_corpus_in_one_script_scores_as_without_centring(tmp_path, rng):
    from tests.methods.test_clip import wide_corpus

    wide_corpus(tmp_path / "in.parquet", rng, n=300, noisy=90)
    for centre in ("auto", "none"):
        api.score(tmp_path / "in.parquet", tmp_path / f"{centre}.parquet", method="clip",
                  columns=COLUMNS, cache_dir=False, params={"centre_scripts": centre})
    assert "scripts" not in json.loads(Path(f"{tmp_path / 'auto.parquet'}.json").read_text())[
        "report"]
    assert pq.read_table(tmp_path / "auto.parquet").equals(pq.read_table(tmp_path / "none.parquet"))


def test_a_corpus_in_two_scripts_scored_shard_by_shard_is_centred_as_its_sample(tmp_path, rng):
    from ncclean.evaluate.detection import detection_metrics
    from tests.pipeline.corpora import write_shards

    two_languages(tmp_path / "in.parquet", rng)
    write_shards(pq.read_table(tmp_path / "in.parquet"), tmp_path / "in", 3)
    truth = np.arange(400) < 120
    auroc, records = {}, {}
    for centre in ("auto", "none"):
        api.score(tmp_path / "in", tmp_path / centre, method="clip", columns=COLUMNS, seed=1,
                  cache_dir=False, params={"centre_scripts": centre},
                  scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / f"fit-{centre}"))
        table = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / centre).glob(
            "*.parquet")))
        assert table["id"].to_pylist() == [f"p{i}" for i in range(400)]
        auroc[centre] = detection_metrics(truth, table["clean_prob"].to_numpy()).auroc
        records[centre] = json.loads((tmp_path / centre / "ncclean.json").read_text())["fit"]
    assert "scripts" not in records["none"]
    assert set(records["auto"]["scripts"]["centred"]) == {"latin", "cyrillic"}
    assert auroc["auto"] > auroc["none"] + 0.02, auroc
    # the sample's pairs, fitted, and the same pairs scored anew by the fit agree
    api.score(as_new_pairs(tmp_path / "in.parquet", tmp_path / "new.parquet"),
              tmp_path / "applied.parquet", method="clip", columns=COLUMNS, seed=1,
              cache_dir=False, scale=ScaleOptions(fit=tmp_path / "fit-auto"))
    pq.write_table(pa.concat_tables(pq.read_table(p) for p in sorted(
        (tmp_path / "auto").glob("*.parquet"))), tmp_path / "sharded.parquet")
    assert_applied_as_fitted(tmp_path / "sharded.parquet", tmp_path / "applied.parquet",
                             "clip_sim")
