"""``score`` end to end on tiny corpora: the output contract, determinism, bad input."""

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.cli import main
from ncclean.errors import BadOptionError, OutputError
from ncclean.options import StageOptions
from tests.helpers import write_parquet

FAST = {"warmup_epochs": "1", "epochs": "2", "batch_size": "32", "pool_size": "64"}
SMALL_MATCHER = dict(embed_dim=32, image_size=32)


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("score")
    api.synth(folder / "clean.parquet", n_images=30, captions_per_image=3, seed=0)
    api.inject_noise(folder / "clean.parquet", folder / "noisy.parquet", ratio=0.4, seed=0)
    return folder / "noisy.parquet"


def score(noisy, out, **kwargs):
    options = dict(method="gmm", params=FAST, cache_dir=out.parent / "cache",
                   **SMALL_MATCHER) | kwargs
    return api.score(noisy, out, **options)


def test_output_contract_and_summary(noisy, tmp_path):
    summary = score(noisy, tmp_path / "scored.parquet")
    table = pq.read_table(summary.output)
    source = pq.read_table(noisy)
    assert table.num_rows == source.num_rows == summary.n_pairs == 90
    assert table.column_names[:len(source.column_names)] == source.column_names
    assert table.column("id").to_pylist() == source.column("id").to_pylist()
    for name in ("clean_prob", "partition", "significance", "pseudo_caption",
                 "pseudo_caption_id", "pseudo_caption_score", "invalid_reason", "gmm_loss",
                 "gmm_sim", "gmm_label"):
        assert name in table.column_names
    prob = np.array(table.column("clean_prob").to_pylist())
    assert ((prob >= 0) & (prob <= 1)).all()
    sidecar = json.loads((tmp_path / "scored.parquet.json").read_text())
    assert sidecar["method"] == "gmm" and sidecar["seed"] == 0
    assert sidecar["params"]["epochs"] == 2
    assert sidecar["partition_counts"] == summary.partition_counts
    assert sum(summary.partition_counts.values()) == 90
    assert len(sidecar["report"]["mixtures"]) == 2
    assert sidecar["estimated_noise_rate"] == pytest.approx(summary.noise_rate)


def test_stages_fill_significance_and_pseudo_captions(noisy, tmp_path):
    summary = score(noisy, tmp_path / "scored.parquet", clean_above=0.5)
    table = pq.read_table(summary.output).to_pydict()
    part = np.array(table["partition"], dtype=object)
    clean = np.isin(part, ["clean_significant", "clean_insignificant"])
    significance = np.array(table["significance"], dtype=float)
    assert np.isfinite(significance[clean]).all() and np.isnan(significance[~clean]).all()
    counts = Counter(" ".join(c.lower().split()) for c, p in zip(table["caption"], part)
                     if p != "invalid")
    rare = np.array([counts[" ".join(c.lower().split())] <= 2 for c in table["caption"]])
    assert (((significance >= 1) | rare)[clean] == (part[clean] == "clean_significant")).all()
    caption_of = dict(zip(table["id"], table["caption"]))
    suggested = [i for i, c in enumerate(table["pseudo_caption"]) if c is not None]
    assert suggested and all(part[i] == "noisy" for i in suggested)
    assert len(suggested) == summary.n_pseudo_captions
    for i in suggested:
        donor = table["pseudo_caption_id"][i]
        assert part[table["id"].index(donor)] in ("clean_significant", "clean_insignificant")
        assert table["pseudo_caption"][i] == caption_of[donor] != table["caption"][i]
        assert np.isfinite(table["pseudo_caption_score"][i])
    sidecar = json.loads((tmp_path / "scored.parquet.json").read_text())
    assert sidecar["stages"]["pseudo_captions"]["suggested"] == len(suggested)
    assert "stages" in summary.seconds


def test_corpus_donors_are_every_caption_but_the_generic_ones(noisy, tmp_path):
    summary = score(noisy, tmp_path / "scored.parquet", stages=StageOptions(donors="corpus"))
    table = pq.read_table(summary.output).to_pydict()
    part = np.array(table["partition"], dtype=object)
    caption_of = dict(zip(table["id"], table["caption"]))
    donors = [d for d in table["pseudo_caption_id"] if d is not None]
    assert donors and summary.n_pseudo_captions == len(donors)
    rows = [table["id"].index(d) for d in donors]
    assert any(not part[r].startswith("clean") for r in rows)  # noisy rows' captions offered
    for donor, row in zip(donors, rows):
        # no copy judged insignificant, and a repeated caption only where a pair of it is clean
        copies = part[[k for k, c in enumerate(table["caption"]) if c == caption_of[donor]]]
        assert part[row] != "invalid" and "clean_insignificant" not in copies
        assert len(copies) == 1 or any(p.startswith("clean") for p in copies)
    record = json.loads((tmp_path / "scored.parquet.json").read_text())
    assert record["stages"]["pseudo_captions"]["pool"] == "corpus"


def test_specificity_leaves_rare_captions_significant(noisy, tmp_path, monkeypatch):
    import ncclean.stages.significance as module

    def nothing_specific(matcher, features, clean_prob, clean, config, **kwargs):
        return np.full(features.n_pairs, 0.5), {}  # every clean caption says too little

    monkeypatch.setattr(module, "significance", nothing_specific)
    table = pq.read_table(noisy).to_pydict()
    for i in range(0, len(table["caption"]), 4):  # a collection name on a quarter of the pairs
        table["caption"][i] = "Part of the Flat Icon Collection"
    write_parquet(tmp_path / "named.parquet", table)
    for count, name in ((2, "two"), (1, "one")):
        summary = score(tmp_path / "named.parquet", tmp_path / f"{name}.parquet",
                        clean_above=0.5, rare_count=count)
        table = pq.read_table(summary.output).to_pydict()
        part = np.array(table["partition"], dtype=object)
        counts = Counter(c for c, p in zip(table["caption"], part) if p != "invalid")
        rare = np.array([counts[c] <= count for c in table["caption"]])
        clean = np.isin(part, ["clean_significant", "clean_insignificant"])
        assert (clean & rare).any() and (clean & ~rare).any()
        assert (part[clean & rare] == "clean_significant").all()
        assert (part[clean & ~rare] == "clean_insignificant").all()


def test_stages_can_be_turned_off(noisy, tmp_path):
    summary = score(noisy, tmp_path / "off.parquet", significance="off", pseudo_captions=False)
    table = pq.read_table(summary.output).to_pydict()
    assert "clean_insignificant" not in table["partition"]
    assert all(v is None for v in table["significance"] + table["pseudo_caption"])
    assert summary.n_pseudo_captions == 0
    with pytest.raises(BadOptionError, match="significance"):
        score(noisy, tmp_path / "bad.parquet", significance="vibes")


def test_same_seed_byte_identical_output(noisy, tmp_path):
    score(noisy, tmp_path / "a.parquet", seed=5)
    score(noisy, tmp_path / "b.parquet", seed=5)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_invalid_rows_are_kept_and_marked(tmp_path):
    api.synth(tmp_path / "s.parquet", n_images=12, captions_per_image=3, seed=1)
    table = pq.read_table(tmp_path / "s.parquet").to_pydict()
    table["caption"][4] = "   "
    table["image"][6] = b"not a png"  # the first row of image 2; rows 7 and 8 keep its picture
    write_parquet(tmp_path / "bad.parquet", table)
    summary = score(tmp_path / "bad.parquet", tmp_path / "out.parquet")
    out = pq.read_table(summary.output).to_pylist()
    assert len(out) == 36 and summary.n_invalid == 2  # row 4, and row 6 alone (its own bytes)
    assert out[4]["partition"] == "invalid" and out[4]["invalid_reason"] == "empty caption"
    assert out[6]["clean_prob"] is None and out[6]["gmm_loss"] is None
    assert out[6]["invalid_reason"].startswith("undecodable image")
    assert out[7]["invalid_reason"] is None and out[7]["clean_prob"] is not None
    assert summary.partition_counts["invalid"] == 2


def test_noise_rate_cut(noisy, tmp_path):
    summary = score(noisy, tmp_path / "r.parquet", noise_rate=0.25)
    assert summary.partition_counts["noisy"] == round(0.25 * 90)
    auto = score(noisy, tmp_path / "auto.parquet", noise_rate="auto")
    assert auto.partition_counts["noisy"] == round(auto.noise_rate * 90)


def test_save_and_load_matcher(noisy, tmp_path):
    score(noisy, tmp_path / "a.parquet", save_matcher=tmp_path / "m.safetensors")
    assert (tmp_path / "m.safetensors.json").exists()
    loaded = score(noisy, tmp_path / "b.parquet", load_matcher=tmp_path / "m.safetensors",
                   params={**FAST, "epochs": "1"})
    sidecar = json.loads((tmp_path / "b.parquet.json").read_text())
    assert sidecar["matcher"]["loaded_from"].endswith("m.safetensors")
    assert sidecar["report"]["warmup_epochs"] == 0  # a loaded matcher needs no warm-up
    assert loaded.n_pairs == 90


def test_precomputed_embedding_columns(tmp_path, rng):
    n = 60
    image = rng.normal(size=(n, 8)).astype(np.float32)
    text = image + 0.1 * rng.normal(size=(n, 8)).astype(np.float32)
    text[:20] = rng.normal(size=(20, 8))  # the first 20 pairs are mismatched
    write_parquet(tmp_path / "emb.parquet", {"caption": [f"c{i}" for i in range(n)],
                                             "img": list(image), "txt": list(text)})
    from ncclean.data.schema import Columns

    summary = score(tmp_path / "emb.parquet", tmp_path / "o.parquet",
                    columns=Columns(image_emb="img", text_emb="txt"))
    prob = np.array(pq.read_table(summary.output).column("clean_prob").to_pylist())
    assert prob[:20].mean() < prob[20:].mean()


def test_refuses_bad_requests_before_training(noisy, tmp_path):
    with pytest.raises(OutputError):
        score(noisy, noisy)
    with pytest.raises(BadOptionError, match="no CUDA device"):
        score(noisy, tmp_path / "x.parquet", device="cuda")
    with pytest.raises(BadOptionError, match="needs --image-emb-col"):
        score(noisy, tmp_path / "x.parquet", image_encoder="column")
    with pytest.raises(BadOptionError, match="--noise-rate"):
        score(noisy, tmp_path / "x.parquet", noise_rate="most")
    # the keywords' types: ncclean's error naming the keyword, not Python's
    with pytest.raises(BadOptionError, match="params must be a dict"):
        score(noisy, tmp_path / "x.parquet", method="gmm", params="epochs=1")
    with pytest.raises(BadOptionError, match=r"clean_above=\) must be a number"):
        score(noisy, tmp_path / "x.parquet", clean_above="0.5")
    with pytest.raises(BadOptionError, match="--seed must be a number"):
        score(noisy, tmp_path / "x.parquet", seed="a")


def test_cli_score_json_and_errors(noisy, tmp_path, capsys):
    args = ["score", str(noisy), "-o", str(tmp_path / "cli.parquet"), "--json", "--image-size",
            "32", "--embed-dim", "32", "--cache-dir", str(tmp_path / "cache")]
    for key, value in FAST.items():
        args += ["-p", f"{key}={value}"]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["n_rows"] == 90 and printed["method"] == "gmm"
    record = json.loads((tmp_path / "cli.parquet.json").read_text())
    shared = set(printed) & set(record)  # --json names each fact the record holds as it does
    assert {"n_rows", "estimated_noise_rate", "estimated_noise_ci95", "detection_vs_noisy_gt",
            "seconds"} <= shared
    assert {key: printed[key] for key in shared} == {key: record[key] for key in shared}
    assert {"n_pairs", "noise_rate", "noise_interval", "detection"}.isdisjoint(printed)
    assert main(["score", str(noisy), "-o", str(tmp_path / "y.parquet"), "--method", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'nope'; valid methods: " in err and "gmm" in err
    assert len(err.splitlines()) == 1
    assert main(["score", str(noisy), "-o", str(tmp_path / "y.parquet"), "-p", "epochs"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["score", str(noisy), "-o", str(tmp_path / "y.parquet"), "--rare-clean-above",
                 "0.1", "--noise-rate", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--rare-clean-above" in err and len(err.splitlines()) == 1


def test_rare_clean_above_reaches_the_partition_and_the_sidecar(noisy, tmp_path):
    plain = score(noisy, tmp_path / "plain.parquet", pseudo_captions=False)
    # every caption counts as rare, and every pair is clean from 0: no pair is vague or noisy
    loose = score(noisy, tmp_path / "loose.parquet", pseudo_captions=False,
                  rare_clean_above=0.0, rare_count=10**6)
    assert plain.partition_counts["noisy"] > 0
    assert loose.partition_counts["noisy"] == loose.partition_counts["vague"] == 0
    cut = json.loads((tmp_path / "loose.parquet.json").read_text())["cut"]
    assert cut["rare_clean_above"] == 0.0 and cut["rare_count"] == 10**6
    assert json.loads((tmp_path / "plain.parquet.json").read_text())["cut"][
        "rare_clean_above"] is None


def test_rare_count_reaches_the_stages_and_the_sidecar_under_an_auto_noise_rate(
        noisy, tmp_path, monkeypatch, capsys):
    import ncclean.stages.significance as module

    def nothing_specific(matcher, features, clean_prob, clean, config, **kwargs):
        return np.full(features.n_pairs, 0.5), {}  # every clean caption says too little

    monkeypatch.setattr(module, "significance", nothing_specific)
    table = pq.read_table(noisy).to_pydict()
    for i in range(0, len(table["caption"]), 4):  # a collection name on 23 of the 90 pairs
        table["caption"][i] = "Part of the Flat Icon Collection"
    write_parquet(tmp_path / "named.parquet", table)
    parts = {}
    for count in (2, 50):
        out = tmp_path / f"rare{count}.parquet"
        args = ["score", str(tmp_path / "named.parquet"), "-o", str(out), "--noise-rate", "auto",
                "--rare-count", str(count), "--image-size", "32", "--embed-dim", "32",
                "--cache-dir", str(tmp_path / "cache"), "--json"]
        for key, value in FAST.items():
            args += ["-p", f"{key}={value}"]
        assert main(args) == 0, capsys.readouterr().err
        cut = json.loads(out.with_name(out.name + ".json").read_text())["cut"]
        assert cut["rare_count"] == count and cut["noise_rate_source"] == "auto"
        assert cut["noise_rate"] == pytest.approx(
            json.loads(capsys.readouterr().out)["estimated_noise_rate"])
        parts[count] = pq.read_table(out).column("partition").to_pylist()
    # the same scores and cut; only what counts as a rare caption differs
    assert [p == "noisy" for p in parts[2]] == [p == "noisy" for p in parts[50]]
    assert "clean_insignificant" in parts[2]  # the collection name is not rare at 2
    assert "clean_insignificant" not in parts[50]  # every caption is rare at 50


def test_options_check_themselves_and_loose_keywords_fold_into_them():
    from ncclean.options import (
        DEFAULT_CUT,
        Cut,
        MatcherOptions,
        RunOptions,
        StageOptions,
        fold_keywords,
    )

    for make in (lambda: Cut(noise_rate="most"), lambda: Cut(noise_rate=1.5),
                 lambda: Cut(noise_rate="auto", rare_clean_above=0.1),
                 lambda: Cut(rare_count=0), lambda: MatcherOptions(finetune="some"),
                 lambda: MatcherOptions(embed_dim=1), lambda: StageOptions(significance="vibes"),
                 lambda: StageOptions(significance_passes=0), lambda: RunOptions(seed=-1),
                 lambda: RunOptions(max_image_pixels=0)):
        with pytest.raises(BadOptionError):
            make()
    auto = Cut(noise_rate="auto", rare_count=50)
    assert auto.with_estimate(0.25) == Cut(noise_rate=0.25, rare_count=50)
    with pytest.raises(BadOptionError, match="would be ignored"):
        Cut(clean_above=0.7, noise_rate="auto")
    with pytest.raises(BadOptionError, match="gives no estimate"):
        auto.with_estimate(None, "nope")
    groups = fold_keywords({"cut": DEFAULT_CUT, "run": RunOptions()},
                           {"rare_count": 7, "seed": 3})
    assert groups["cut"] == replace(DEFAULT_CUT, rare_count=7) and groups["run"].seed == 3
    with pytest.raises(TypeError, match="epochz"):
        fold_keywords({"run": RunOptions()}, {"epochz": 3})


def test_sidecar_records_every_option_group_whole(noisy, tmp_path):
    from dataclasses import fields

    from ncclean.data.schema import Columns
    from ncclean.options import GROUPS

    score(noisy, tmp_path / "s.parquet", significance="off", seed=2)
    sidecar = json.loads((tmp_path / "s.parquet.json").read_text())
    recorded = sidecar["options"]
    assert set(recorded) == {"columns", "scale", *GROUPS}
    for name, kind in [("columns", Columns), *GROUPS.items()]:
        assert list(recorded[name]) == [f.name for f in fields(kind)]
    assert recorded["run"]["seed"] == 2 and recorded["stages"]["significance"] == "off"
    assert recorded["matcher"]["embed_dim"] == 32 and recorded["cut"]["clean_above"] == 0.8


def test_cli_option_objects_and_loose_keywords_write_the_same_bytes(noisy, tmp_path):
    from ncclean.options import DEFAULT_CUT, MatcherOptions, RunOptions, StageOptions

    cache = tmp_path / "cache"
    args = ["score", str(noisy), "-o", str(tmp_path / "cli.parquet"), "--method", "gmm",
            "--seed", "4",
            "--image-size", "32", "--embed-dim", "32", "--clean-above", "0.6",
            "--significance-passes", "2", "--cache-dir", str(cache), "--json"]
    for key, value in FAST.items():
        args += ["-p", f"{key}={value}"]
    assert main(args) == 0
    api.score(noisy, tmp_path / "objects.parquet", "gmm", FAST,
              matcher=MatcherOptions(clip_model="ViT-B-32", embed_dim=32, image_size=32),
              cut=DEFAULT_CUT.with_options(clean_above=0.6),  # as typed: no queue by estimate
              stages=StageOptions(significance_passes=2),
              run=RunOptions(seed=4, cache_dir=cache))
    api.score(noisy, tmp_path / "loose.parquet", method="gmm", params=FAST, seed=4,
              clip_model="ViT-B-32", embed_dim=32, image_size=32, clean_above=0.6,
              significance_passes=2, cache_dir=cache)
    written = {name: (tmp_path / f"{name}.parquet").read_bytes()
               for name in ("cli", "objects", "loose")}
    assert written["cli"] == written["objects"] == written["loose"]
    options = [json.loads((tmp_path / f"{name}.parquet.json").read_text())["options"]
               for name in ("cli", "objects", "loose")]
    assert options[0] == options[1] == options[2]
