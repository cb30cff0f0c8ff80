"""``retrain``: arm selection, the step budget, and the command end to end on a tiny corpus."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from ncclean import api
from ncclean.cli import main
from ncclean.errors import BadOptionError, SchemaError
from ncclean.evaluate.retrain import (
    Plain,
    RetrainConfig,
    best_stretch,
    cleaned_arm,
    evaluate,
    gap_recovered,
    late_slope,
    verdicts,
)
from ncclean.models.features import Features
from ncclean.testing import tiny_features, vector_features
from tests.helpers import retrain_corpus

FAST = {"warmup_epochs": "1", "epochs": "2", "batch_size": "32", "pool_size": "64"}


def test_cleaned_arm_selections():
    partition = np.array(["clean_significant", "clean_insignificant", "vague", "noisy",
                          "noisy"], dtype=object)
    prob = np.array([0.9, 0.85, 0.6, 0.2, 0.1])
    assert cleaned_arm(partition, prob, "clean").pairs.tolist() == [0, 1]
    assert cleaned_arm(partition, prob, "significant").pairs.tolist() == [0]
    assert cleaned_arm(partition, prob, "clean+vague").pairs.tolist() == [0, 1, 2]
    weighted = cleaned_arm(partition, prob, "weighted")
    assert weighted.pairs.tolist() == [0, 1, 2, 3, 4] and np.allclose(weighted.weights, prob)
    pseudo = cleaned_arm(partition, prob, "clean", np.array([-1, -1, -1, 7, -1]))
    assert pseudo.pairs.tolist() == [0, 1, 3] and pseudo.text_group.tolist() == [-1, -1, 7]
    with pytest.raises(ValueError):
        cleaned_arm(partition, prob, "everything")


def test_every_arm_gets_exactly_the_step_budget():
    features, _, _ = tiny_features(n_images=10)  # 30 pairs
    objective = Plain(features, np.ones(30), RetrainConfig(steps=7, batch_size=8), "cpu")
    rng = np.random.default_rng(0)
    counts = [len(list(objective.steps(epoch, rng))) for epoch in range(3)]
    assert counts == [4, 3, 0]


def test_late_slope_reads_the_second_half_of_a_curve():
    rising = [{"step": s, "rsum": 10 + s / 100} for s in range(100, 1700, 100)]
    assert late_slope(rising) == pytest.approx(10.0)  # 10 rSum per 1,000 steps
    flat = [{"step": s, "rsum": 5 * s / 100 if s <= 800 else 40.0} for s in range(100, 1700, 100)]
    assert late_slope(flat) == pytest.approx(0.0, abs=1e-9)
    assert late_slope(rising[:2]) is None and late_slope([]) is None


def test_best_stretch_finds_a_peak_that_single_readings_would_invent():
    peaked = [{"step": s, "rsum": 50.0 - abs(s - 500) / 50} for s in range(100, 1700, 100)]
    best = best_stretch(peaked)
    # readings 48, 50, 48 at steps 400-600; 32, 30, 28 at the end
    assert best["step"] == 600 and best["rsum"] == pytest.approx(146 / 3)
    assert best["drop"] == pytest.approx(146 / 3 - 30.0)
    # one high reading in a flat, jittery curve is not a peak
    flat = [{"step": s, "rsum": 40.0 + (6.0 if s == 700 else (-1) ** (s // 100))}
            for s in range(100, 1700, 100)]
    assert best_stretch(flat)["drop"] < 3.0
    assert best_stretch(peaked[:5]) is None


def test_gap_recovered():
    arms = {"cleaned": {"strict": {"rsum": 150.0}}, "noisy": {"strict": {"rsum": 100.0}},
            "oracle": {"strict": {"rsum": 200.0}}}
    assert gap_recovered(arms, "cleaned") == pytest.approx(0.5)
    assert gap_recovered({"cleaned": arms["cleaned"]}, "cleaned") is None


class Identity(torch.nn.Module):
    """A matcher whose embeddings are its input vectors, so the similarities are known."""

    embed_dim = 2

    def encode_images(self, x):
        return x.float()

    def encode_texts(self, x):
        return x.float()


def test_recall_averages_over_the_test_images_and_captions_alone():
    # A table of 6 images shared with training (as a held-out split's is); the 3 test pairs use
    # images 0 and 1, and image 1 has two captions.
    images = np.zeros((6, 2), dtype=np.float32)
    images[0], images[1] = [1, 0], [0, 1]
    texts = np.array([[0.6, 0.9], [-0.5, -0.1], [0.5, 0.4]], dtype=np.float32)
    test = Features(rows=np.arange(3), image_group=np.array([0, 1, 1]),
                    text_group=np.arange(3), image_data=images, text_data=texts)
    strict = evaluate(Identity(), test)["strict"]
    # image 0 ranks its caption 0 (0.6) first; image 1's best caption (2, 0.4) follows 0 (0.9)
    assert [strict[f"i2t_r{k}"] for k in (1, 5, 10)] == [50.0, 100.0, 100.0]
    # caption 0 finds image 1 first, caption 1 image 1 (-0.1 over -0.5), caption 2 image 0 first
    assert [strict[f"t2i_r{k}"] for k in (1, 5, 10)] == pytest.approx([100 / 3, 100, 100])


def test_every_recall_on_a_held_out_split_is_a_multiple_of_one_query():
    from ncclean.models.matcher import build_matcher

    features, config, _ = vector_features(n_images=60, captions_per_image=2)
    test = features.subset(np.arange(0, 120, 17))  # 8 pairs of 8 images, the table of 60 shared
    n_images, n_texts = len(np.unique(test.image_group)), test.n_pairs
    assert n_images == n_texts == 8
    for metrics in evaluate(build_matcher(config, seed=0), test).values():
        for key, value in metrics.items():
            queries = n_images if key.startswith("i2t") else n_texts
            if key != "rsum":
                assert value * queries / 100 == pytest.approx(round(value * queries / 100)), key


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    folder = retrain_corpus(tmp_path_factory.mktemp("retrain"))
    api.score(folder / "noisy.parquet", folder / "scored.parquet", params=FAST, embed_dim=32,
              image_size=32, cache_dir=folder / "cache", clean_above=0.5,
              save_matcher=folder / "matcher.safetensors")
    return folder / "scored.parquet", folder / "test.parquet"


def test_baseline_arms_and_reproducibility(scored):
    path, test = scored
    first = api.retrain(path, test, baseline=True, pseudo_captions=True, steps=12,
                        cache_dir=path.parent / "cache")
    assert list(first.arms) == ["cleaned", "noisy", "oracle"]
    assert first.n_test == 24
    assert first.arms["noisy"]["n_pairs"] == 90 and first.arms["oracle"]["n_pairs"] < 90
    assert len(first.arms["noisy"]["curve"]) == 12  # every 12 // 16 -> 1 step, 1 batch per epoch
    assert "late_slope" in first.arms["oracle"]
    for result in first.arms.values():
        assert 0 <= result["strict"]["rsum"] <= 600
        assert result["by_text"]["rsum"] >= result["strict"]["rsum"]
    again = api.retrain(path, test, baseline=True, pseudo_captions=True, steps=12,
                        cache_dir=path.parent / "cache")
    assert {k: v["strict"] for k, v in again.arms.items()} == \
        {k: v["strict"] for k, v in first.arms.items()}
    assert first.gap_recovered == again.gap_recovered
    # a test file of 24 pairs is tiny too
    assert any(w.startswith("the test set is tiny: 24 pairs, so each recall moves in steps of "
                            "4.2 points") for w in first.warnings)


def test_without_test_the_held_out_split_is_scored_on_its_own_pairs_and_called_tiny(scored):
    path, _ = scored
    summary = api.retrain(path, steps=4, eval_every=0, cache_dir=path.parent / "cache")
    n = summary.n_test
    assert 2 <= n < 100 and summary.arms["cleaned"]["n_pairs"] <= 90 - n
    assert summary.warnings[0].startswith(f"no --test: recall is measured on {n} pairs")
    assert summary.warnings[1].startswith(f"the test set is tiny: {n} pairs")
    for k in (1, 5, 10):  # held-out captions are unique: one query per test pair each way
        for direction in ("i2t", "t2i"):
            value = summary.arms["cleaned"]["strict"][f"{direction}_r{k}"]
            assert value * n / 100 == pytest.approx(round(value * n / 100))


def test_learning_curve_leaves_the_final_numbers_unchanged(scored, capsys):
    path, test = scored
    cache = path.parent / "cache"
    plain = api.retrain(path, test, steps=9, eval_every=0, cache_dir=cache)
    curved = api.retrain(path, test, steps=9, eval_every=4, cache_dir=cache)
    assert curved.arms["cleaned"]["strict"] == plain.arms["cleaned"]["strict"]
    assert "curve" not in plain.arms["cleaned"]
    curve = curved.arms["cleaned"]["curve"]
    per_epoch = -(-curved.arms["cleaned"]["n_pairs"] // 128)  # one batch per epoch here
    assert per_epoch == 1 and [point["step"] for point in curve] == [4, 8, 9]
    assert curve[-1]["rsum"] == curved.arms["cleaned"]["strict"]["rsum"]
    early = api.retrain(path, test, steps=4, eval_every=0, cache_dir=cache)
    assert curve[0]["rsum"] == early.arms["cleaned"]["strict"]["rsum"]
    assert main(["retrain", str(path), "--test", str(test), "--steps", "3", "--eval-every",
                 "2", "--cache-dir", str(cache)]) == 0
    assert "strict rSum by step: 2:" in capsys.readouterr().out
    with pytest.raises(BadOptionError):
        api.retrain(path, test, eval_every=-1)


def test_cosine_schedule_is_its_own_reproducible_run(scored):
    path, test = scored
    cache = path.parent / "cache"
    constant = api.retrain(path, test, steps=6, cache_dir=cache)
    cosine = api.retrain(path, test, steps=6, schedule="cosine", cache_dir=cache)
    again = api.retrain(path, test, steps=6, schedule="cosine", cache_dir=cache)
    assert cosine.schedule == "cosine" and constant.schedule == "constant"
    assert cosine.arms["cleaned"]["strict"] == again.arms["cleaned"]["strict"]
    assert cosine.arms["cleaned"]["strict"] != constant.arms["cleaned"]["strict"]
    with pytest.raises(BadOptionError):
        api.retrain(path, test, schedule="linear", cache_dir=cache)


def test_verdicts_name_the_arms_still_improving_past_their_best_or_too_small():
    metrics = {k: 10.0 for k in ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10",
                                 "rsum")}
    arm = {"n_pairs": 5, "strict": metrics, "by_text": metrics, "curve": [], "late_slope": 1.0,
           "best": {"step": 400, "rsum": 12.0, "drop": 2.0}}

    def judged(slope, drop=2.0, n_valid=None):
        return verdicts({"cleaned": arm | {"best": arm["best"] | {"drop": drop}},
                         "noisy": arm | {"late_slope": slope}}, n_valid)

    assert judged(12.5).still_improving == {"noisy": 12.5}
    assert judged(2.0).still_improving == {} == judged(None).still_improving
    assert judged(2.0, drop=6.5).past_best == {"cleaned": {"step": 400, "rsum": 12.0,
                                                           "drop": 6.5}}
    assert judged(2.0).past_best == {}
    assert judged(2.0, n_valid=60).small_selection  # 5 of 60 pairs, under 10%
    assert not judged(2.0, n_valid=50).small_selection and not judged(2.0).small_selection


def test_rendering_warns_when_an_arm_is_still_improving_or_past_its_best():
    from io import StringIO

    from rich.console import Console

    from ncclean.api import RetrainSummary
    from ncclean.cli.render import render_retrain

    metrics = {k: 10.0 for k in ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10",
                                 "rsum")}
    arm = {"n_pairs": 5, "strict": metrics, "by_text": metrics, "curve": [], "late_slope": 1.0,
           "best": {"step": 400, "rsum": 12.0, "drop": 2.0}}

    def printed(slope, drop=2.0, n_valid=None):
        buffer = StringIO()
        arms = {"cleaned": arm | {"best": arm["best"] | {"drop": drop}},
                "noisy": arm | {"late_slope": slope}}
        judged = verdicts(arms, n_valid)
        summary = RetrainSummary(
            input=Path("in.parquet"), test=Path("test.parquet"), n_test=3, steps=10,
            schedule="constant", seed=0, keep="clean", pseudo_captions=False,
            image_encoder="pixels", text_encoder="tokens", gap_recovered=None,
            arms=arms, n_valid=n_valid, still_improving=judged.still_improving,
            past_best=judged.past_best, small_selection=judged.small_selection)
        render_retrain(Console(file=buffer, width=200), summary)
        return buffer.getvalue()

    assert "still improving" in printed(12.5) and "noisy +12.5" in printed(12.5)
    assert "still improving" not in printed(2.0) and "still improving" not in printed(None)
    assert "past its best" in printed(2.0, drop=6.5)
    assert "cleaned 12.0 near step 400, 6.5 lower" in printed(2.0, drop=6.5)
    assert "past its best" not in printed(2.0)
    assert "a small selection (5 of 60 valid pairs, 8.3%)" in printed(2.0, n_valid=60)
    assert "small selection" not in printed(2.0, n_valid=50)
    assert "small selection" not in printed(2.0)


def test_cli_retrain_json_and_errors(scored, capsys):
    path, test = scored
    assert main(["retrain", str(path), "--test", str(test), "--steps", "5", "--keep",
                 "weighted", "--cache-dir", str(path.parent / "cache"), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["keep"] == "weighted" and list(payload["arms"]) == ["cleaned"]
    assert payload["schedule"] == "constant"
    assert {"still_improving", "past_best", "small_selection"} <= set(payload)  # the verdicts
    assert main(["retrain", str(path), "--test", str(test), "--keep", "most"]) == 2
    assert main(["retrain", str(path), "--test", str(test), "--image-encoder", "clip"]) == 2
    assert "needs CLIP weights" in capsys.readouterr().err
    assert main(["retrain", str(path.parent / "noisy.parquet"), "--test", str(test)]) == 2
    with pytest.raises(SchemaError, match="not a scored file"):
        api.retrain(path.parent / "noisy.parquet", test)
    with pytest.raises(BadOptionError):
        api.retrain(path, test, steps=0)


def test_keep_significant_trains_on_clean_significant_alone(scored, tmp_path, capsys):
    path, test = scored
    table = pq.read_table(path)
    partition = table.column("partition").to_pylist()
    # demote half the significant pairs, so that the two selections differ
    demoted = [i for i, p in enumerate(partition) if p == "clean_significant"][::2]
    for i in demoted:
        partition[i] = "clean_insignificant"
    edited = tmp_path / "edited.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("partition"), "partition",
                                    pa.array(partition, pa.string())), edited)
    sidecar = json.loads(Path(f"{path}.json").read_text())
    Path(f"{edited}.json").write_text(json.dumps(sidecar))
    summary = api.retrain(edited, test, keep="significant", steps=2,
                          cache_dir=path.parent / "cache")
    assert summary.arms["cleaned"]["n_pairs"] == partition.count("clean_significant")
    assert demoted and partition.count("clean_significant") > 0
    # a file scored without the significance stage has no insignificant pairs to leave out
    off = tmp_path / "off.parquet"
    record = sidecar | {"significance": "off"}
    pq.write_table(table.replace_schema_metadata({"ncclean": json.dumps(record)}), off)
    Path(f"{off}.json").write_text(json.dumps(record))
    assert main(["retrain", str(off), "--test", str(test), "--keep", "significant"]) == 2
    assert "--significance off" in capsys.readouterr().err


def test_pseudo_captions_replace_only_the_noisy_pairs_captions(monkeypatch):
    import ncclean.evaluate.retrain as module

    features, config, _ = tiny_features(n_images=6, captions_per_image=2)
    n = features.n_pairs
    partition = np.array(["clean_significant"] * (n - 2) + ["noisy"] * 2, dtype=object)
    donors = np.full(n, -1)
    donors[-2:] = features.text_group[0]
    arm = cleaned_arm(partition, np.ones(n), "clean", donors)
    seen = {}

    class Spy(module.Plain):
        def __init__(self, subset, *args, **kwargs):
            seen["text_group"] = subset.text_group.copy()
            super().__init__(subset, *args, **kwargs)

    monkeypatch.setattr(module, "Plain", Spy)
    module.train_arm(features, arm, config, module.RetrainConfig(steps=1), seed=0)
    expected = features.text_group.copy()
    expected[-2:] = features.text_group[0]
    assert seen["text_group"].tolist() == expected.tolist()


def test_encoders_default_to_the_scoring_runs_and_can_be_replaced(scored, monkeypatch):
    import ncclean.evaluate.retrain as module

    path, test = scored
    seen = []
    original = module.run_arms

    def spy(features, test_features, arms, config, *args):
        seen.append((config.text_tower, config.text_in_dim, config.vocab is not None,
                     features.text_data.shape[1]))
        return original(features, test_features, arms, config, *args)

    monkeypatch.setattr("ncclean.evaluate.retrain.run_arms", spy)
    cache = path.parent / "cache"
    same = api.retrain(path, test, steps=2, cache_dir=cache)
    swapped = api.retrain(path, test, steps=2, text_encoder="e5", cache_dir=cache)
    assert (same.image_encoder, same.text_encoder) == ("pixels", "tokens")
    assert (swapped.image_encoder, swapped.text_encoder) == ("pixels", "e5")
    assert seen[0][0] == "tokens" and seen[0][2]
    assert seen[1] == ("e5", 384, False, 384)  # the scoring run's vocabulary is dropped
    with pytest.raises(BadOptionError, match="CLIP weights"):
        api.retrain(path, test, image_encoder="clip")
    with pytest.raises(BadOptionError, match="encoders"):
        api.retrain(path, test, text_encoder="bert")


def test_the_scoring_runs_own_matcher_is_one_more_arm(scored, capsys, monkeypatch):
    path, test = scored
    cache, saved = path.parent / "cache", path.parent / "matcher.safetensors"
    summary = api.retrain(path, test, baseline=True, steps=2, eval_every=0, matcher=saved,
                          cache_dir=cache)
    assert list(summary.arms) == ["cleaned", "noisy", "oracle", "matcher"]
    arm = summary.arms["matcher"]
    assert arm["n_pairs"] is None and arm["method"] == "gmm" and arm["path"] == str(saved)
    assert arm["gap_recovered"] == gap_recovered(summary.arms, "matcher")
    assert "curve" not in arm
    # retraining with another text tower: the saved matcher still reads captions its own way
    other = api.retrain(path, test, steps=1, eval_every=0, text_encoder="e5", matcher=saved,
                        cache_dir=cache)
    assert other.arms["matcher"]["strict"] == arm["strict"]
    assert other.arms["matcher"]["gap_recovered"] is None  # no baseline arms to compare with
    assert main(["retrain", str(path), "--test", str(test), "--steps", "1", "--matcher",
                 str(saved), "--cache-dir", str(cache)]) == 0
    assert "the gmm run's own matcher" in capsys.readouterr().out

    def never(*args, **kwargs):
        raise AssertionError("trained before the checkpoint was read")

    monkeypatch.setattr("ncclean.evaluate.retrain.run_arms", never)
    assert main(["retrain", str(path), "--test", str(test), "--matcher",
                 str(path.parent / "missing.safetensors")]) == 2
    assert "no matcher checkpoint" in capsys.readouterr().err


def test_the_embedding_columns_default_to_the_scoring_runs(tmp_path):
    from ncclean.data.schema import Columns
    from tests.helpers import write_parquet

    def pairs(path, n, seed):
        image = np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)
        return write_parquet(path, {"caption": [f"thing {i % 7} number {i}" for i in range(n)],
                                    "img": list(image)})

    train, test = pairs(tmp_path / "train.parquet", 60, 0), pairs(tmp_path / "test.parquet", 20, 1)
    scored = tmp_path / "scored.parquet"
    api.score(train, scored, params=FAST, embed_dim=16, columns=Columns(image_emb="img"),
              cache_dir=tmp_path / "cache")
    sidecar = json.loads(Path(f"{scored}.json").read_text())
    assert sidecar["columns"] == {"image_emb": "img", "text_emb": None}
    summary = api.retrain(scored, test, keep="weighted", steps=2, cache_dir=tmp_path / "cache")
    assert summary.image_encoder == "column" and summary.n_test == 20
    with pytest.raises(SchemaError, match="nope"):  # a name given still wins
        api.retrain(scored, test, keep="weighted", steps=2, columns=Columns(image_emb="nope"),
                    cache_dir=tmp_path / "cache")
