"""``score``'s cut options do what they say: thresholds given are the thresholds applied (the
queue by the noise estimate only where asked for too, and a line where a rule moved one), and a
method that draws its own partitions refuses the options it would ignore."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean.cli import main
from tests.pipeline.corpora import vector_table

CLIP = ["--method", "clip", "--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]


@pytest.fixture
def queued(tmp_path):
    """Two-wide vectors at 30% noise: the thresholds flag more pairs than the upper end of the
    noise estimate's interval, so the default cut sizes the queue by the estimate."""
    path = tmp_path / "in.parquet"
    pq.write_table(vector_table(200, d=2, noise=0.3, seed=2), path)
    return path


def scored(capsys, source, out, *options) -> tuple[dict, np.ndarray, np.ndarray, dict]:
    """``(summary, clean_prob, partition, record's cut)`` of ``score --json`` with ``options``."""
    assert main(["score", str(source), "-o", str(out), *CLIP, "--json", *options]) == 0
    summary = json.loads(capsys.readouterr().out)
    table = pq.read_table(out)
    prob = np.asarray(table.column("clean_prob").to_pylist(), dtype=np.float32)
    parts = np.asarray(table.column("partition").to_pylist(), dtype=object)
    return summary, prob, parts, json.loads(out.with_name(out.name + ".json").read_text())["cut"]


@pytest.mark.parametrize("options", [["--clean-above", "0.7"],
                                     ["--clean-above", "0.95", "--noisy-below", "0.9"],
                                     ["--noisy-below", "0.3"]])
def test_thresholds_given_are_the_thresholds_applied(queued, tmp_path, capsys, options):
    _, _, default, cut = scored(capsys, queued, tmp_path / "default.parquet")
    assert cut["queue_clean_above"] is not None  # the default still sizes the queue

    _, prob, parts, cut = scored(capsys, queued, tmp_path / "given.parquet", *options)
    assert not cut["queue_by_estimate"] and cut["queue_clean_above"] is None
    clean = np.char.startswith(parts.astype(str), "clean")
    assert not clean[prob < cut["clean_above"]].any()  # never clean below --clean-above
    assert (parts[prob < cut["noisy_below"]] == "noisy").all()  # always noisy below --noisy-below
    if options == ["--clean-above", "0.7"]:
        assert (parts != default).any()  # not the default's partitions


def test_a_threshold_a_band_raises_is_said_in_one_line(queued, tmp_path, capsys):
    summary, prob, parts, cut = scored(capsys, queued, tmp_path / "out.parquet",
                                       "--clean-above", "0.7")
    assert cut["recall_clean_above"] > 0.7  # the review band reaches past the threshold given
    moved = [w for w in summary["warnings"] if "--clean-above 0.7 to" in w]
    assert len(moved) == 1 and "recall bands raised" in moved[0]
    assert "--review-recall 0" in moved[0]
    _, _, _, cut = scored(capsys, queued, tmp_path / "off.parquet", "--clean-above", "0.7",
                          "--noisy-recall", "0", "--review-recall", "0")
    assert cut["recall_clean_above"] is None


def test_the_queue_asked_for_with_a_threshold_moves_it_and_says_so(queued, tmp_path, capsys):
    summary, prob, parts, cut = scored(capsys, queued, tmp_path / "out.parquet",
                                       "--clean-above", "0.85", "--queue-by-estimate")
    assert cut["queue_by_estimate"] and cut["queue_clean_above"] < 0.85
    moved = [w for w in summary["warnings"] if "--clean-above 0.85 to" in w]
    assert len(moved) == 1 and "--queue-by-thresholds keeps" in moved[0]


def test_no_line_where_no_threshold_was_given(queued, tmp_path, capsys):
    summary, _, _, _ = scored(capsys, queued, tmp_path / "out.parquet")
    assert not [w for w in summary["warnings"] if "--clean-above" in w or "--noisy-below" in w]


@pytest.mark.parametrize("options, named", [
    (["--clean-above", "0.9"], "--clean-above 0.9"),
    (["--noisy-below", "0.3"], "--noisy-below 0.3"),
    (["--noise-rate", "0.1"], "--noise-rate 0.1"),
    (["--noise-rate", "auto"], "--noise-rate auto"),
    (["--preset", "train"], "--preset train"),
    (["--preset", "review"], "--preset review"),
    (["--review-recall", "0"], "--review-recall 0"),
    (["--queue-by-thresholds"], "--queue-by-thresholds"),
])
def test_sdd_refuses_the_cut_options_it_does_not_apply(queued, tmp_path, capsys, options,
                                                       named):
    out = tmp_path / "out.parquet"
    code = main(["score", str(queued), "-o", str(out), *CLIP[2:], "--method", "sdd", *options])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert f"{named} does not apply: sdd draws its own partitions" in lines[0]
    assert not out.exists()


def test_clip_keeping_a_fraction_refuses_another_cut_and_takes_none(queued, tmp_path, capsys):
    out = tmp_path / "out.parquet"
    code = main(["score", str(queued), "-o", str(out), *CLIP, "-p", "keep_fraction=0.7",
                 "--noise-rate", "0.1"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert "--noise-rate 0.1 does not apply: -p keep_fraction=0.7 draws the partitions" in lines[0]
    summary, _, parts, _ = scored(capsys, queued, out, "-p", "keep_fraction=0.7")
    assert (parts == "noisy").sum() == round(0.3 * len(parts))  # its own share, as the default


def test_a_saved_fit_keeps_its_queue_and_a_threshold_given_says_why_it_is_refused(
        queued, tmp_path, capsys):
    fit = tmp_path / "fit"
    scored(capsys, queued, tmp_path / "s.parquet", "--save-fit", str(fit))
    for restated in (["--clean-above", "0.8"], ["--clean-above", "0.8", "--queue-by-estimate"]):
        # the fit's own threshold restated: its cut applies, queue and all
        assert main(["score", str(queued), "-o", str(tmp_path / "o.parquet"), *CLIP, "--fit",
                     str(fit), *restated]) == 0
        capsys.readouterr()
    code = main(["score", str(queued), "-o", str(tmp_path / "o.parquet"), *CLIP, "--fit",
                 str(fit), "--noisy-below", "0.4"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--noisy-below" in lines[0]
