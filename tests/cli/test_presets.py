"""``score --preset``: one word for what the output is for, read back by ``retrain``."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean.cli import main
from ncclean.options import PRESETS, preset_cut, preset_keep
from tests.helpers import write_parquet


def vectors(path, n=160, noisy=48, seed=0):
    """Image and caption vectors 8 wide of one latent; the first ``noisy`` captions swapped."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, 8))
    image = latent + 0.3 * rng.normal(size=(n, 8))
    text = latent + 0.3 * rng.normal(size=(n, 8))
    text[:noisy] = text[n - noisy:][::-1]
    write_parquet(path, {"id": [f"p{i}" for i in range(n)],
                         "caption": [f"caption {i}" for i in range(n)],
                         "img": list(image.astype(np.float32)),
                         "txt": list(text.astype(np.float32))})
    return path


CLIP = ["--method", "clip", "--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]


@pytest.mark.parametrize("preset", list(PRESETS))
def test_a_preset_sets_the_cut_and_is_recorded(tmp_path, preset):
    source = vectors(tmp_path / "in.parquet")
    assert main(["score", str(source), "-o", str(tmp_path / "out.parquet"), *CLIP,
                 "--preset", preset]) == 0
    record = json.loads((tmp_path / "out.parquet.json").read_text())
    assert record["options"]["cut"]["preset"] == preset
    expected = preset_cut(preset)
    assert record["options"]["cut"]["rare_clean_above"] == expected.rare_clean_above
    assert record["options"]["cut"]["noise_rate"] == expected.noise_rate
    assert preset_keep(record) == PRESETS[preset]["keep"]
    parts = pq.read_table(tmp_path / "out.parquet").column("partition").to_pylist()
    if preset == "gate":  # the noisy partition is the method's estimated share
        assert parts.count("noisy") / len(parts) == pytest.approx(
            record["estimated_noise_rate"], abs=1.5 / len(parts))


def test_retrain_trains_on_what_the_preset_says_unless_told(tmp_path, capsys):
    source = vectors(tmp_path / "in.parquet")
    assert main(["score", str(source), "-o", str(tmp_path / "out.parquet"), *CLIP,
                 "--preset", "train"]) == 0
    capsys.readouterr()
    retrain = ["retrain", str(tmp_path / "out.parquet"), "--steps", "20", "--cache-dir",
               str(tmp_path / "cache"), "--json"]
    assert main(retrain) == 0
    assert json.loads(capsys.readouterr().out)["keep"] == "significant"
    assert main([*retrain, "--keep", "clean"]) == 0
    assert json.loads(capsys.readouterr().out)["keep"] == "clean"


def test_a_preset_with_cut_options_is_one_line_and_exit_2(tmp_path, capsys):
    source = vectors(tmp_path / "in.parquet")
    code = main(["score", str(source), "-o", str(tmp_path / "out.parquet"), *CLIP,
                 "--preset", "train", "--clean-above", "0.9"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--preset train sets the cut, so --clean-above would be ignored" in err
    assert not (tmp_path / "out.parquet").exists()


def test_the_recall_bands_are_options_of_score_and_zero_turns_one_off(tmp_path, capsys):
    source = vectors(tmp_path / "in.parquet")
    out = str(tmp_path / "out.parquet")

    def cut(*options):
        assert main(["score", str(source), "-o", out, *CLIP, *options]) == 0
        return json.loads((tmp_path / "out.parquet.json").read_text())["cut"]

    default = cut()
    assert (default["noisy_recall"], default["review_recall"]) == (0.5, 0.9)
    assert default["recall_clean_above"] is not None
    off = cut("--review-recall", "0", "--noisy-recall", "0")
    assert off["review_recall"] is None and off["recall_clean_above"] is None
    assert cut("--review-recall", "0.7")["review_recall"] == 0.7
    assert main(["score", str(source), "-o", out, *CLIP, "--noisy-recall", "0.8",
                 "--review-recall", "0.6"]) == 2
    assert "need --noisy-recall (0.8) <= --review-recall (0.6;" in capsys.readouterr().err
    assert main(["score", str(source), "-o", out, *CLIP, "--preset", "train",
                 "--review-recall", "0.9"]) == 2
    assert "--review-recall would be ignored" in capsys.readouterr().err
    shared = cut("--noise-rate", "0.2", "--review-recall", "0")  # a share cut has no bands
    assert shared["noisy_recall"] is None and shared["review_recall"] is None
    assert main(["score", str(source), "-o", out, *CLIP, "--rare-clean-above", "0.3",
                 "--review-recall", "0.9"]) == 2
    assert "--rare-clean-above makes another cut" in capsys.readouterr().err
