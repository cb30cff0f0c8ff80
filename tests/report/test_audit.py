"""``ncclean audit``: a labelling sheet drawn by partition, labelled from the keyboard and
exported in the browser; estimates whose intervals hold the true precision; ``check --labels``."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.cli.test_contract import one_line, run
from tests.pipeline.corpora import vector_table
from tests.report.test_split_check import (
    CHROMIUM_FLAGS,
    _chromium_and_playwright,
    assert_each_pair_shows_its_image,
    score_elsewhere,
)


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("audit")
    pq.write_table(vector_table(600, noise=0.3, seed=3), folder / "pairs.parquet")
    from ncclean import api
    from ncclean.data.schema import Columns

    api.score(folder / "pairs.parquet", folder / "s.parquet", "clip",
              columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    return folder / "s.parquet"


def labels_from_truth(scored: Path, ids: list[str], path: Path) -> None:
    table = pq.read_table(scored, columns=["id", "noisy_gt"])
    truth = dict(zip(table["id"].to_pylist(), table["noisy_gt"].to_pylist(), strict=True))
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "label"])
        writer.writerows([i, "mismatch" if truth[i] else "match"] for i in ids)


def test_sheet_labels_and_intervals_that_hold_the_truth(scored, tmp_path, capsys):
    import json

    code, _, err = run(capsys, "audit", scored, "--sample", "120", "-o", tmp_path / "sheet.html")
    assert code == 0, err
    ids = re.findall(r'data-id="([^"]*)"', (tmp_path / "sheet.html").read_text())
    assert len(ids) >= 100 and len(set(ids)) == len(ids)
    labels_from_truth(scored, ids, tmp_path / "labels.csv")
    code, out, err = run(capsys, "audit", scored, "--labels", tmp_path / "labels.csv", "--json")
    assert code == 0, err
    found = json.loads(out)
    table = pq.read_table(scored, columns=["partition", "noisy_gt"])
    part = np.array(table["partition"].to_pylist())
    truth = np.array(table["noisy_gt"].to_pylist())
    checked = 0
    for name in ("clean_significant", "noisy"):
        inside = part == name
        if not inside.any():
            continue
        true = truth[inside].mean() if name == "noisy" else (~truth[inside]).mean()
        low, high = found["partitions"][name]["ci"]
        assert low <= true <= high, (name, true, low, high)
        checked += 1
    assert checked == 2
    low, high = found["noise_rate"]["ci"]
    assert low <= truth[part != "invalid"].mean() <= high
    code, out, _ = run(capsys, "check", scored, "--labels", tmp_path / "labels.csv",
                       "--min-precision", "0.5")
    assert code == 0 and out.startswith("PASS: clean_significant precision")


def test_bad_labels_are_one_line(scored, tmp_path, capsys):
    (tmp_path / "bad.csv").write_text("id,label\np1,maybe\n")
    code, _, err = run(capsys, "audit", scored, "--labels", tmp_path / "bad.csv")
    assert code == 2 and "'maybe' is not one of match, mismatch, generic, partial" in one_line(err)
    code, _, err = run(capsys, "audit", scored)
    assert code == 2 and "--sample N -o SHEET.html" in one_line(err)
    (tmp_path / "other.csv").write_text("id,label\nnot-a-pair,match\nnor-this,mismatch\n")
    for command in (("audit",), ("check", "--min-precision", "0.5")):
        code, _, err = run(capsys, *command, scored, "--labels", tmp_path / "other.csv")
        assert code == 2 and "none of its 2 ids is a pair of this file" in one_line(err)


def test_labels_of_ids_the_file_lacks_are_named(scored, tmp_path, capsys):
    ids = pq.read_table(scored, columns=["id"])["id"].to_pylist()[:40]
    labels_from_truth(scored, ids, tmp_path / "labels.csv")
    with open(tmp_path / "labels.csv", "a") as handle:
        handle.write("not-a-pair,match\n")
    code, out, err = run(capsys, "audit", scored, "--labels", tmp_path / "labels.csv")
    assert code == 0, err
    assert "1 labels ignored: their ids are not pairs of" in out


def label_in_browser(page_path: Path, keys: str, tmp_path: Path) -> tuple[list, str, list]:
    """Open ``page_path`` in Chromium, press ``keys``, export the labels: the pairs' ids in page
    order, the page's labelled count and the exported ``(id, label)`` rows."""
    browser_path, sync_playwright = _chromium_and_playwright()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(accept_downloads=True)
            page.goto(page_path.as_uri(), wait_until="load")
            ids = page.eval_on_selector_all(".pair", "els => els.map(e => e.dataset.id)")
            for key in keys:
                page.keyboard.press(key)
            done = page.inner_text("#done")
            with page.expect_download() as download:
                page.click("#export")
            download.value.save_as(tmp_path / "labels.csv")
        finally:
            browser.close()
    with open(tmp_path / "labels.csv", newline="") as handle:
        rows = [(r["id"], r["label"]) for r in csv.DictReader(handle)]
    return ids, done, rows


def test_the_sheet_is_labelled_from_the_keyboard_and_exported(scored, tmp_path):
    _chromium_and_playwright()
    from ncclean import api

    api.audit(scored, sample=8, output=tmp_path / "sheet.html")
    # the first four pairs, focus moving on after each label, then one step on
    ids, done, rows = label_in_browser(tmp_path / "sheet.html", "mxgpj", tmp_path)
    assert done == "4"
    assert rows == list(zip(ids[:4], ["match", "mismatch", "generic", "partial"]))


def test_the_report_is_a_workspace_queue_first_labelled_and_exported(scored, tmp_path):
    _chromium_and_playwright()
    from ncclean import api

    api.split(scored, tmp_path / "parts", html=tmp_path / "report.html", per_partition=5)
    text = (tmp_path / "report.html").read_text()
    assert text.index("id='noisy'") < text.index("id='run'")  # the review queue first
    assert "truly mismatched (noisy_gt)" in text
    ids, _, rows = label_in_browser(tmp_path / "report.html", "xm", tmp_path)
    assert rows == list(zip(ids[:2], ["mismatch", "match"]))
    summary = api.audit(scored, labels=tmp_path / "labels.csv")  # audit reads the report's export
    assert summary.labelled == 2


@pytest.fixture(scope="module")
def scored_elsewhere(tmp_path_factory) -> dict[str, Path]:
    return score_elsewhere(tmp_path_factory.mktemp("elsewhere"))


@pytest.mark.parametrize("name", ["wds", "paths"])
def test_the_sheet_shows_the_images_wherever_the_output_was_written(scored_elsewhere, name,
                                                                     tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)  # neither the input's folder nor the output's
    code, _, err = run(capsys, "audit", scored_elsewhere[name], "--sample", "24", "-o",
                       tmp_path / "sheet.html")
    assert code == 0, err
    assert assert_each_pair_shows_its_image((tmp_path / "sheet.html").read_text(),
                                            {"p0003"}) == 24
