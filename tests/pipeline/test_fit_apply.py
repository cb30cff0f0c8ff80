"""Fit once, apply anywhere: below the fit sample the output is one pass's, byte for byte; the
sampled fit does not depend on shard order; applied pairs are scored for real."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean.api import score
from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError
from ncclean.options import ScaleOptions
from ncclean.pipeline.fit import load_fit, sample_positions
from tests.pipeline.corpora import vector_table, write_shards

COLUMNS = Columns(image_emb="img", text_emb="txt")
PARAMS = {"clip": None, "gmm": {"epochs": "2", "warmup_epochs": "1"}}


def run(input, output, method="clip", **scale):
    return score(input, output, method, PARAMS[method], columns=COLUMNS, seed=1,
                 cache_dir=False, scale=ScaleOptions(**scale) if scale else None)


def rows_and_columns(path):
    """The table a scored file holds, without the run record in its metadata (a fitted run's
    record says it was fitted, and is written beside the output shards)."""
    table = pq.read_table(path)
    kept = {k: v for k, v in (table.schema.metadata or {}).items() if k != b"ncclean"}
    return table.replace_schema_metadata(kept or None)


@pytest.mark.parametrize("method", ["clip", "gmm"])
def test_fit_and_apply_below_the_sample_are_one_pass(method, tmp_path):
    pq.write_table(vector_table(240), tmp_path / "in.parquet")
    run(tmp_path / "in.parquet", tmp_path / "one.parquet", method)
    run(tmp_path / "in.parquet", tmp_path / "fitted.parquet", method, save_fit=tmp_path / "fit",
        fit_sample=1000)
    run(tmp_path / "in.parquet", tmp_path / "applied.parquet", method, fit=tmp_path / "fit")
    one = rows_and_columns(tmp_path / "one.parquet")
    assert rows_and_columns(tmp_path / "fitted.parquet").equals(one)
    assert rows_and_columns(tmp_path / "applied.parquet").equals(one)
    meta = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert meta["method"] == method and meta["sample"]["n_pairs"] == 240
    assert len(meta["sample"]["content_hash"]) == 64


def test_sampled_fit_does_not_depend_on_shard_order(tmp_path):
    table = vector_table(400)
    write_shards(table, tmp_path / "three", 3)
    five = write_shards(table, tmp_path / "five", 5)
    for k, path in enumerate(sorted(five.iterdir())):  # names now sort in reverse row order
        path.rename(five / f"{chr(ord('z') - k)}.parquet")
    hashes = []
    for name in ("three", "five"):
        run(tmp_path / name, tmp_path / f"out-{name}", fit_sample=150,
            save_fit=tmp_path / f"fit-{name}")
        hashes.append(load_fit(tmp_path / f"fit-{name}").hash)
    assert hashes[0] == hashes[1]
    outputs = {}
    for name in ("three", "five"):
        parts = [pq.read_table(p) for p in sorted((tmp_path / f"out-{name}").glob("*.parquet"))]
        outputs[name] = pa.concat_tables(parts).sort_by("id")
    assert outputs["three"].equals(outputs["five"])
    assert outputs["three"].num_rows == 400


def test_applied_pairs_are_scored_by_their_own_vectors(tmp_path):
    table = vector_table(600, noise=0.4, seed=3)
    write_shards(table, tmp_path / "in", 4)
    run(tmp_path / "in", tmp_path / "out", fit_sample=200, save_fit=tmp_path / "fit")
    fit = load_fit(tmp_path / "fit")
    out = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("*.parquet"))])
    assert out.column("id").to_pylist() == table.column("id").to_pylist()  # every row, in order
    applied = ~(sample_positions(fit, tmp_path / "out") >= 0)
    assert applied.sum() == 400
    prob = np.asarray(out.column("clean_prob").to_pylist())[applied]
    noisy = np.asarray(out.column("noisy_gt").to_pylist())[applied]
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(~noisy, prob) > 0.9
    parts = np.asarray(out.column("partition").to_pylist())[applied]
    assert (parts[noisy] == "noisy").mean() > 0.8


#: Each method's smallest settings that still train (every method has a fit on a sample).
TINY = {"clip": {}, "gmm": {"epochs": 2, "warmup_epochs": 1, "pool_size": 64},
        "pc2": {"epochs": 2, "warmup_epochs": 1, "pool_size": 64},
        "crcl": {"freeze_epochs": 1, "pieces": "2,2", "pool_size": 64, "score_passes": 1},
        "sdd": {"epochs": 2, "warmup_epochs": 1},
        "disncl": {"epochs": 2, "warmup_epochs": 1, "pool_size": 64, "keep_passes": 1},
        "bicro": {"epochs": 2, "warmup_epochs": 1, "pool_size": 64}}


@pytest.mark.parametrize("method", sorted(TINY))
def test_every_method_fits_on_a_sample_and_applies(method, tmp_path):
    from ncclean.api import method_names

    if method not in method_names():
        pytest.skip(f"{method} is not installed")
    write_shards(vector_table(240, seed=2), tmp_path / "in", 2)
    summary = score(tmp_path / "in", tmp_path / "out", method, TINY[method], columns=COLUMNS,
                    seed=1, cache_dir=False,
                    scale=ScaleOptions(fit_sample=120, save_fit=tmp_path / "fit"))
    table = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / "out").glob("*.parquet")))
    fit = load_fit(tmp_path / "fit")
    new = {i for shard in sorted((tmp_path / "in").glob("*.parquet"))
           for i, at in zip(pq.read_table(shard)["id"].to_pylist(), sample_positions(fit, shard),
                            strict=True) if at < 0}
    ids = table["id"].to_pylist()
    assert summary.n_pairs == 240 and sorted(ids) == sorted(f"p{k}" for k in range(240))
    applied = np.array([i in new for i in ids])
    prob = table["clean_prob"].to_numpy()
    assert 60 < applied.sum() < 180 and np.isfinite(prob).all() and (prob >= 0).all() \
        and (prob <= 1).all()
    assert len(np.unique(prob[applied])) > 10  # scored from their content, not one constant
    again = score(tmp_path / "in", tmp_path / "again", columns=COLUMNS, seed=1, cache_dir=False,
                  scale=ScaleOptions(fit=tmp_path / "fit"))
    assert again.partition_counts == summary.partition_counts


def test_a_fit_on_a_sample_needs_vectors(tmp_path):
    # more pairs than the sample: a fit to apply to the others (every pair fitted needs none)
    pq.write_table(vector_table(160), tmp_path / "in.parquet")
    with pytest.raises(BadOptionError, match="precomputed vectors with --image-emb-col"):
        score(tmp_path / "in.parquet", tmp_path / "o.parquet", "clip",
              scale=ScaleOptions(fit_sample=100))
    with pytest.raises(BadOptionError, match="does not combine"):
        ScaleOptions(fit=tmp_path / "f", fit_sample=10)


def test_a_fit_refuses_vectors_of_other_widths(tmp_path):
    pq.write_table(vector_table(80, d=16), tmp_path / "a.parquet")
    pq.write_table(vector_table(80, d=8), tmp_path / "b.parquet")
    run(tmp_path / "a.parquet", tmp_path / "a-out.parquet", save_fit=tmp_path / "fit")
    from ncclean.pipeline.fit import FitError

    with pytest.raises(FitError, match="widths 8 and 8, but the fit was made on 16 and 16"):
        run(tmp_path / "b.parquet", tmp_path / "b-out.parquet", fit=tmp_path / "fit")
    with pytest.raises(FitError, match="no fit there"):
        run(tmp_path / "b.parquet", tmp_path / "b-out.parquet", fit=tmp_path / "nothing")


def test_shards_below_the_sample_are_one_pass_split_by_shard(tmp_path):
    write_shards(vector_table(300, seed=4), tmp_path / "in", 3)
    run(tmp_path / "in", tmp_path / "one.parquet")  # today's one pass: one file for the folder
    run(tmp_path / "in", tmp_path / "out", fit_sample=300)
    one = pq.read_table(tmp_path / "one.parquet")
    parts = [pq.read_table(p) for p in sorted((tmp_path / "out").glob("*.parquet"))]
    assert [p.num_rows for p in parts] == [100, 100, 100]
    assert pa.concat_tables(parts).replace_schema_metadata(None).equals(
        one.replace_schema_metadata(None))


def test_gmm_calibrates_its_mixture_on_held_out_pairs(tmp_path):
    write_shards(vector_table(400, noise=0.4, seed=6), tmp_path / "in", 2)
    run(tmp_path / "in", tmp_path / "out", "gmm", fit_sample=200, save_fit=tmp_path / "fit")
    calibration = load_fit(tmp_path / "fit").meta["calibration"]
    assert calibration["pairs"] == 200 and calibration["on"].startswith("held-out")
    run(tmp_path / "in", tmp_path / "all", "gmm", save_fit=tmp_path / "fit-all")
    assert load_fit(tmp_path / "fit-all").meta["calibration"]["on"].startswith("the fit sample")


def test_gmm_puts_its_sample_on_the_held_out_scale(tmp_path):
    write_shards(vector_table(400, noise=0.4, seed=6), tmp_path / "in", 2)
    run(tmp_path / "in", tmp_path / "out", "gmm", fit_sample=200, save_fit=tmp_path / "fit")
    fit = load_fit(tmp_path / "fit")
    one_pass, prob = fit.arrays["sample.one_pass_prob"], fit.arrays["sample.clean_prob"]
    assert not np.array_equal(one_pass, prob)
    assert (np.diff(prob[np.argsort(one_pass, kind="stable")]) >= 0).all()  # its ranking kept
    assert fit.meta["sample_scale"].startswith("held-out")
    assert fit.meta["noise_rate"] == fit.meta["mixture"]["noise_rate"]
    from ncclean.data.results import PARTITIONS
    from ncclean.options import Cut
    from ncclean.stages.partition import recall_threshold

    parts = np.asarray(PARTITIONS, dtype=object)[fit.arrays["sample.partition"]]
    # the cut of the new clean_prob: its recall bands resolved again on the held-out scale
    assert fit.meta["cut"]["recall_noisy_below"] == recall_threshold(prob, 0.5)
    _, noisy_below = Cut.from_record(fit.meta["cut"]).thresholds()
    assert ((parts == "noisy") == (prob < noisy_below)).all()
    out = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("*.parquet"))])
    positions = sample_positions(fit, tmp_path / "out")
    fitted = positions >= 0
    written = np.asarray(out.column("clean_prob").to_pylist())
    at = positions[fitted]
    assert np.allclose(written[fitted], prob[at], atol=1e-6)  # written as float32
    # the held-out pairs are the applied half here: both halves on one scale, cut alike
    assert abs(written[fitted].mean() - written[~fitted].mean()) < 0.02
    noisy_share = [(np.asarray(out.column("partition").to_pylist())[half] == "noisy").mean()
                   for half in (fitted, ~fitted)]
    assert abs(noisy_share[0] - noisy_share[1]) < 0.05


def test_applied_pairs_of_a_discounted_caption_lose_what_the_sample_lost(tmp_path):
    rng = np.random.default_rng(5)
    n, k = 900, 60
    latent = rng.normal(size=(n, 8))
    image = latent @ rng.normal(size=(8, 48)) + rng.normal(size=(n, 48))
    text = latent @ rng.normal(size=(8, 24)) + rng.normal(size=(n, 24))
    image[::15] += 3.0 * rng.normal(size=48)  # a collection: one look, one caption for all
    text[::15] = 3.0 * rng.normal(size=24)
    collection = np.arange(n) % 15 == 0
    table = pa.table({"id": [f"p{i}" for i in range(n)],
                      "caption": ["collection" if c else f"c{i}" for i, c in enumerate(collection)],
                      "img": list(image.astype(np.float32)), "txt": list(text.astype(np.float32))})
    assert collection.sum() == k
    write_shards(table, tmp_path / "in", 3)
    run(tmp_path / "in", tmp_path / "out", fit_sample=450, save_fit=tmp_path / "fit")
    fit = load_fit(tmp_path / "fit")
    assert fit.meta["signal"] == "clip_sim - clip_convention + clip_neighbours"
    out = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("*.parquet"))])
    applied = ~(sample_positions(fit, tmp_path / "out") >= 0)
    discount = np.asarray(out.column("clip_convention").to_pylist())
    assert applied[collection].any() and (~applied[collection]).any()
    assert np.allclose(discount[collection], discount[collection & ~applied][0])
    assert discount[collection][0] > 0 and np.all(discount[applied & ~collection] == 0)
    prob = np.asarray(out.column("clean_prob").to_pylist())
    assert prob[applied & collection].mean() < 0.8 < prob[applied & ~collection].mean()


@pytest.mark.parametrize("by_estimate", [False, True])
def test_applied_pairs_are_cut_where_the_sample_set_the_recall_bands(by_estimate, tmp_path):
    from dataclasses import replace

    from ncclean.options import DEFAULT_CUT, Cut

    # captions only loosely like their images: little noise expected, spread over many pairs
    rng = np.random.default_rng(8)
    image = rng.normal(size=(600, 16)).astype(np.float32)
    text = (image + 3.0 * rng.normal(size=image.shape)).astype(np.float32)
    text[:18] = rng.normal(size=(18, 16))
    table = pa.table({"id": [f"p{k}" for k in range(600)],
                      "caption": [f"caption {k}" for k in range(600)],
                      "img": pa.array(list(image), pa.list_(pa.float32())),
                      "txt": pa.array(list(text), pa.list_(pa.float32()))})
    write_shards(table, tmp_path / "in", 3)
    # the thresholds flag more than this sample's noise estimate can be: by default the queue is
    # cut back to its interval's lower end, by the thresholds the bands widen it; applied pairs
    # follow either
    score(tmp_path / "in", tmp_path / "out", "clip", PARAMS["clip"], columns=COLUMNS, seed=1,
          cache_dir=False, cut=replace(DEFAULT_CUT, queue_by_estimate=by_estimate),
          scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / "fit"))
    cut = Cut.from_record(load_fit(tmp_path / "fit").meta["cut"])
    clean_above, noisy_below = cut.thresholds()
    if by_estimate:
        assert cut.queue_clean_above is not None and clean_above < 0.8
    else:
        assert clean_above > 0.8 and noisy_below > 0.5  # both bands reach past the thresholds
    out = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("*.parquet"))])
    prob = np.asarray(out.column("clean_prob").to_pylist(), dtype=np.float64)
    parts = np.asarray(out.column("partition").to_pylist(), dtype=object)
    flagged = np.isin(parts, ["vague", "noisy"])
    # float32 on disk: pairs within rounding of a threshold may fall either side
    clear = np.abs(prob - clean_above) > 1e-6
    assert (flagged[clear] == (prob < clean_above)[clear]).all()
    clear = np.abs(prob - noisy_below) > 1e-6
    assert ((parts == "noisy")[clear] == (prob < noisy_below)[clear]).all()


def test_a_fit_of_the_first_format_applies_without_bands_and_others_are_refused(tmp_path):
    from ncclean.errors import FitError

    pq.write_table(vector_table(240), tmp_path / "in.parquet")
    run(tmp_path / "in.parquet", tmp_path / "one.parquet", save_fit=tmp_path / "fit",
        fit_sample=1000)
    path = tmp_path / "fit" / "fit.json"
    meta = json.loads(path.read_text())
    assert meta["format"] == "ncclean-fit/4" and "recall_clean_above" in meta["cut"]
    meta["format"] = "ncclean-fit/1"  # written before the bands: no band keys in its cut
    meta["cut"] = {k: v for k, v in meta["cut"].items() if "recall" not in k}
    path.write_text(json.dumps(meta))
    assert load_fit(tmp_path / "fit").meta["cut"].get("review_recall") is None
    run(tmp_path / "in.parquet", tmp_path / "applied.parquet", fit=tmp_path / "fit")
    path.write_text(json.dumps(meta | {"format": "ncclean-fit/9"}))
    with pytest.raises(FitError, match="expected 'ncclean-fit/1' or"):
        load_fit(tmp_path / "fit")


def test_a_fit_of_the_second_format_without_this_formats_arrays_applies_by_content(tmp_path):
    from safetensors.numpy import load_file, save_file

    pq.write_table(vector_table(240), tmp_path / "in.parquet")
    run(tmp_path / "in.parquet", tmp_path / "one.parquet", save_fit=tmp_path / "fit",
        fit_sample=1000)
    path, arrays_path = tmp_path / "fit" / "fit.json", tmp_path / "fit" / "fit.safetensors"
    meta = json.loads(path.read_text())
    older = {k: v for k, v in meta.items() if k not in ("arrays", "matcher_file")}
    path.write_text(json.dumps(older | {"format": "ncclean-fit/2"}))  # as /2 wrote it: no
    save_file({k: v for k, v in load_file(str(arrays_path)).items() if k != "ids.key"},
              str(arrays_path))  # id keys, no list of its arrays
    assert load_fit(tmp_path / "fit").meta["format"] == "ncclean-fit/2"
    summary = run(tmp_path / "in.parquet", tmp_path / "applied.parquet", fit=tmp_path / "fit")
    assert summary.n_pairs == 240


def test_a_fit_keeps_its_donor_pool_and_refuses_another(tmp_path):
    from ncclean.errors import FitError
    from ncclean.options import StageOptions

    pq.write_table(vector_table(400), tmp_path / "in.parquet")
    corpus = StageOptions(donors="corpus")
    score(tmp_path / "in.parquet", tmp_path / "out", "clip", columns=COLUMNS, seed=1,
          cache_dir=False, stages=corpus,
          scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / "fit"))
    meta = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert meta["donors"] == "corpus"
    with pytest.raises(FitError, match="--donors clean"):
        score(tmp_path / "in.parquet", tmp_path / "again", "clip", columns=COLUMNS, seed=1,
              cache_dir=False, stages=StageOptions(donors="clean"), given=frozenset({"donors"}),
              scale=ScaleOptions(fit=tmp_path / "fit"))
    score(tmp_path / "in.parquet", tmp_path / "applied", "clip", columns=COLUMNS, seed=1,
          cache_dir=False, scale=ScaleOptions(fit=tmp_path / "fit"))  # left out: the fit's


def test_a_sample_pair_and_its_applied_copy_get_the_same_significance(monkeypatch, tmp_path):
    """The sample's stages share the search budget with the whole corpus, as the application
    does: with a budget small enough to cap the pool, a sample pair's significance is what the
    fit gives the same pair applied under another id."""
    import ncclean.stages

    monkeypatch.setattr(ncclean.stages, "SEARCH_BUDGET", 5000)
    monkeypatch.setattr(ncclean.stages, "MIN_REFERENCES", 4)
    write_shards(vector_table(800, seed=3), tmp_path / "in", 2)
    run(tmp_path / "in", tmp_path / "out", fit_sample=200, save_fit=tmp_path / "fit")
    out = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("*.parquet"))])
    sample = out.filter(pa.array(sample_positions(load_fit(tmp_path / "fit"), tmp_path / "out")
                                 >= 0))
    copies = sample.select(["id", "caption", "img", "txt"]).set_column(
        0, "id", pa.array([f"{i}-copy" for i in sample.column("id").to_pylist()]))
    pq.write_table(copies, tmp_path / "copies.parquet")
    run(tmp_path / "copies.parquet", tmp_path / "applied.parquet", fit=tmp_path / "fit")
    fitted = np.array(sample.column("significance").to_pylist(), dtype=float)
    applied = np.array(pq.read_table(tmp_path / "applied.parquet").column("significance")
                       .to_pylist(), dtype=float)
    both = np.isfinite(fitted) & np.isfinite(applied)
    assert both.sum() > 100
    np.testing.assert_allclose(fitted[both], applied[both], rtol=0, atol=1e-6)


def test_the_application_reads_the_decoded_copies_and_writes_the_same(monkeypatch, tmp_path):
    """The fit sample's pass keeps the shards decoded (data/held.py); applying from those
    copies writes what decoding the shards again writes, byte for byte."""
    import ncclean.data.held

    write_shards(vector_table(600, seed=5), tmp_path / "in", 3)
    read = []
    monkeypatch.setattr(ncclean.data.held, "read_decoded",
                        lambda *args, real=ncclean.data.held.read_decoded:
                        read.append(args) or real(*args))
    run(tmp_path / "in", tmp_path / "with", fit_sample=200)
    copies_read = len(read)
    assert copies_read >= 3  # every shard's part, from its copy
    monkeypatch.setattr(ncclean.data.held, "copies_for", lambda *args: None)
    run(tmp_path / "in", tmp_path / "without", fit_sample=200)
    assert len(read) == copies_read
    for name in ("part-000", "part-001", "part-002"):
        assert (tmp_path / "with" / f"{name}.parquet").read_bytes() == \
            (tmp_path / "without" / f"{name}.parquet").read_bytes()
