"""``split``, its reports, and ``check``, on a tiny scored corpus."""

import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from ncclean import api
from ncclean.cli import main
from ncclean.errors import BadOptionError, NcCleanError, OutputError, SchemaError

FAST = {"warmup_epochs": "1", "epochs": "2", "batch_size": "32", "pool_size": "64"}


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("split")
    api.synth(folder / "clean.parquet", n_images=30, captions_per_image=3, seed=0)
    api.inject_noise(folder / "clean.parquet", folder / "noisy.parquet", ratio=0.4, seed=0)
    api.score(folder / "noisy.parquet", folder / "scored.parquet", params=FAST, embed_dim=32,
              image_size=32, cache_dir=folder / "cache", clean_above=0.5)
    return folder / "scored.parquet"


def test_split_writes_every_row_once(scored, tmp_path):
    summary = api.split(scored, tmp_path / "parts")
    source = pq.read_table(scored)
    total = 0
    ids = []
    for name, path in summary.files.items():
        part = pq.read_table(path)
        assert part.schema.equals(source.schema, check_metadata=False)
        assert set(part.column("partition").to_pylist()) <= {name}
        total += part.num_rows
        ids += part.column("id").to_pylist()
    assert total == source.num_rows == summary.n_rows
    assert sorted(ids) == sorted(source.column("id").to_pylist())
    side = json.loads((tmp_path / "parts" / "summary.json").read_text())
    assert side["partition_counts"] == summary.partition_counts
    assert side["scoring"]["method"] == "gmm"


def test_report_lists_the_most_confidently_noisy_pairs(scored, tmp_path):
    summary = api.split(scored, tmp_path / "parts", top=5)
    probs = [item["clean_prob"] for item in summary.most_noisy]
    assert len(probs) == 5 and probs == sorted(probs)
    # a caption goes to at most its share of the noisy pairs, so not every one gets a suggestion
    assert any(item["pseudo_caption"] for item in summary.most_noisy)
    assert all(item["pseudo_caption_score"] is not None for item in summary.most_noisy
               if item["pseudo_caption"])
    side = json.loads(Path(f"{scored}.json").read_text())
    assert summary.noise["rate"] == side["estimated_noise_rate"]  # the run record's, once


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.headings, self.open = [], [], []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag not in ("img", "br", "meta", "rect", "line", "polyline"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in ("rect", "line", "polyline"):
            return
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()

    def handle_data(self, data):
        if self.open and self.open[-1] == "h2":
            self.headings.append(data)


def test_html_report_is_self_contained_and_valid(scored, tmp_path):
    summary = api.split(scored, tmp_path / "parts", html=tmp_path / "report.html",
                        per_partition=6)
    text = (tmp_path / "report.html").read_text()
    assert summary.html_bytes == len(text.encode()) < 20_000_000
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    # no network: one inline script (the labelling), loading nothing
    assert "https://" not in text and text.count("<script") == 1 and "<script src" not in text
    parser = _Collect()
    parser.feed(text)
    assert parser.open == []  # every tag closed, in order
    shown = sum(min(6, count) for name, count in summary.partition_counts.items())
    assert len(parser.images) == shown > 0
    for uri in parser.images:
        assert uri.startswith("data:image/jpeg;base64,")
        Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).verify()
    assert any("ROC" in h or "noisy_gt" in h for h in parser.headings)
    assert "AUROC" in text and "fitted mixture" in text


def test_split_refuses_bad_input_and_outputs(scored, tmp_path):
    with pytest.raises(SchemaError, match="not a scored file"):
        api.split(scored.parent / "noisy.parquet", tmp_path / "parts")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        api.split(scored, tmp_path / "file")


def test_check_verdicts_and_exit_codes(scored, tmp_path, capsys):
    shares = api.check(scored, max_noisy=1.0).shares
    assert api.check(scored, max_noisy=shares["noisy"]).passed
    failed = api.check(scored, max_noisy=shares["noisy"] / 2)
    assert not failed.passed and failed.verdict.startswith("FAIL: noisy")
    assert main(["check", str(scored), "--max-noisy", "1.0"]) == 0
    assert capsys.readouterr().out.startswith("PASS")
    assert main(["check", str(scored), "--max-noisy", "0.0"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL") and out.count("\n") == 1
    assert main(["check", str(scored.parent / "noisy.parquet"), "--max-noisy", "0.2"]) == 2
    default = 0 if api.check(scored, max_noisy=0.5).passed else 1
    assert main(["check", str(scored)]) == default  # no bound: --max-noisy 0.5
    assert main(["check", str(tmp_path / "missing.parquet"), "--max-noisy", "0.2"]) == 2


def test_check_against_a_previous_run(scored, tmp_path, capsys):
    sidecar = scored.parent / "scored.parquet.json"
    assert api.check(scored, against=sidecar).passed  # the same run: no growth
    before = json.loads(sidecar.read_text())
    counts = dict(before["partition_counts"])
    moved = counts["noisy"] // 2
    counts["noisy"] -= moved
    counts["clean_significant"] += moved
    (tmp_path / "better.json").write_text(json.dumps({"partition_counts": counts}))
    result = api.check(scored, against=tmp_path / "better.json")
    assert not result.passed and "before" in result.verdict
    assert main(["check", str(scored), "--against", str(tmp_path / "better.json"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["passed"] is False
    assert result.warnings == []  # nothing recorded to compare: no warning
    before["cut"] = dict(before["cut"], clean_above=0.95)
    (tmp_path / "other-cut.json").write_text(json.dumps(before))
    result = api.check(scored, against=tmp_path / "other-cut.json")
    assert result.passed and len(result.warnings) == 1
    assert "was scored otherwise (clean_above 0.95 -> " in result.warnings[0]
    assert main(["check", str(scored), "--against", str(tmp_path / "other-cut.json")]) == 0
    assert "ncclean: warning: --against" in capsys.readouterr().err
    assert api.check(scored, against=sidecar).warnings == []
    (tmp_path / "junk.json").write_text("[1, 2]")
    with pytest.raises(NcCleanError, match="partition_counts"):
        api.check(scored, against=tmp_path / "junk.json")
    with pytest.raises(BadOptionError):
        api.check(scored, max_noisy=1.5)


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _chromium_and_playwright():
    """Debian's Chromium and Playwright's sync API, or a skip (a failure where CI sets
    ``NCCLEAN_REQUIRE_BROWSER=1``, so that the test cannot silently stop running there).
    Playwright drives the system browser: it cannot download its own here."""
    import os
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    missing = [name for name, found in (("Debian's chromium package", browser),
                                        ("the playwright Python package", sync_playwright))
               if not found]
    if missing:
        message = " and ".join(missing) + " not installed"
        if os.environ.get("NCCLEAN_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " (NCCLEAN_REQUIRE_BROWSER=1)")
        pytest.skip(message)
    return browser, sync_playwright


def test_html_report_renders_offline_in_chromium(scored, tmp_path):
    browser_path, sync_playwright = _chromium_and_playwright()
    api.split(scored, tmp_path / "parts", html=tmp_path / "report.html", per_partition=4)
    requested = []

    def only_local(route):
        requested.append(route.request.url)
        if route.request.url.startswith(("file:", "data:")):
            route.continue_()
        else:
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.route("**/*", only_local)
            page.goto((tmp_path / "report.html").as_uri(), wait_until="load")
            thumbnails = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])")
            plots = page.eval_on_selector_all(
                "svg", "els => els.map(e => { const r = e.getBoundingClientRect();"
                       " return [r.width, r.height, e.querySelectorAll('rect,path,line,"
                       "polyline,circle').length]; })")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()

    assert not [url for url in requested if not url.startswith(("file:", "data:"))]
    # Every thumbnail decoded in the browser, not just present in the HTML ...
    assert len(thumbnails) >= 4
    assert all(done and width > 0 and height > 0 for done, width, height in thumbnails)
    # ... and every plot was laid out with a size and drew marks.
    assert len(plots) >= 2
    assert all(width > 0 and height > 0 and marks > 0 for width, height, marks in plots)
    pixels = np.asarray(Image.open(tmp_path / "report.png").convert("RGB")).astype(int)
    assert pixels.shape[0] >= 900
    # The partition colours of the charts and swatches are on the page ...
    for colour in ((0x2A, 0x9D, 0x8F), (0xE7, 0x6F, 0x51)):
        assert (np.abs(pixels - colour).sum(axis=2) < 30).sum() > 50, colour
    # ... and so are the thumbnails: many distinct colours, not just text on white.
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 500


def test_html_report_shows_each_writing_system_where_the_captions_use_several(
        scored, tmp_path, rng):
    from ncclean.data.schema import Columns
    from tests.methods.test_scripts import two_languages

    two_languages(tmp_path / "two.parquet", rng)
    table = pq.read_table(tmp_path / "two.parquet")
    pq.write_table(table.append_column("noisy_gt", [list(np.arange(400) < 120)]),
                   tmp_path / "two.parquet")
    api.score(tmp_path / "two.parquet", tmp_path / "scored-two.parquet", method="clip",
              columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    api.split(tmp_path / "scored-two.parquet", tmp_path / "parts", html=tmp_path / "two.html",
              per_partition=2)
    text = (tmp_path / "two.html").read_text()
    section = text.split("By writing system</h2>", 1)[1].split("</table>", 1)[0]
    rows = {row.split("</td>", 1)[0]: row for row in section.split("<tr><td>")[1:]}
    assert rows.keys() == {"latin", "cyrillic"} and "truly noisy" in section
    assert rows["latin"].startswith("latin</td><td>200</td>")
    assert re.search(r"<td>60\.0%</td><td>0\.\d{3}</td></tr>$", rows["latin"])  # moved, ranked
    assert rows["cyrillic"].endswith("<td>0.0%</td><td>-</td></tr>")  # none moved: no AUROC
    api.split(scored, tmp_path / "one", html=tmp_path / "one.html", per_partition=2)
    assert "By writing system" not in (tmp_path / "one.html").read_text()  # one system


# ------------------------------------------------ images the output refers to (docs/output.md)


def pair_colour(k: int) -> tuple[int, int, int]:
    """The colour of pair ``k``'s image: each pair's own, so a page shows which image it found."""
    return 30 + 5 * k % 200, 220 - 3 * k % 180, 60 + 11 * k % 150


def shown_colours(page: str) -> dict[str, np.ndarray]:
    """Each pair's id on a page (report or sheet) with the mean colour of its thumbnail."""
    found = {}
    for pair_id, uri in re.findall(r"data-id=['\"]([^'\"]*)['\"][^>]*><img src=['\"]([^'\"]*)",
                                   page):
        data = base64.b64decode(uri.split(",", 1)[1])
        with Image.open(io.BytesIO(data)) as image:
            found[pair_id] = np.asarray(image.convert("RGB")).reshape(-1, 3).mean(axis=0)
    return found


def assert_each_pair_shows_its_image(page: str, missing: set[str] = frozenset()) -> int:
    """Every pair on ``page`` but ``missing`` shows its own image (its id ends in its number),
    those in ``missing`` say "no image"; the number of pairs shown."""
    ids = re.findall(r"<div class=['\"][^'\"]*\bpair\b[^'\"]*['\"][^>]*data-id=['\"]([^'\"]*)",
                     page)
    shown = shown_colours(page)
    assert set(shown) == set(ids) - missing and ids
    for pair_id, colour in shown.items():
        assert np.abs(colour - pair_colour(int(pair_id[-4:]))).max() < 12, pair_id
    assert page.count("no image") == len(set(ids) & missing)
    return len(ids)


@pytest.fixture(scope="module")
def scored_elsewhere(tmp_path_factory) -> dict[str, Path]:
    return score_elsewhere(tmp_path_factory.mktemp("elsewhere"))


def score_elsewhere(folder: Path) -> dict[str, Path]:
    """Two corpora in ``folder``, each scored (from vectors) with paths relative to ``folder``
    into ``folder/out``, not its input's folder: img2dataset-style tars (``wds``, the output
    keeps only ``image_ref``) and a Parquet file of image paths relative to it (``paths``, pair
    0003's image missing)."""
    from tests.data.test_webdataset_reader import npy, write_tar
    from tests.helpers import png_bytes

    rng = np.random.default_rng(5)
    image = rng.normal(size=(48, 8))
    text = image + 0.3 * rng.normal(size=(48, 8))
    text[:10] = rng.normal(size=(10, 8))
    for s in range(2):
        members = []
        for k in range(s * 24, s * 24 + 24):
            key = f"{s:05d}{k:04d}"
            members += [(f"{key}.jpg", png_bytes(pair_colour(k))),
                        (f"{key}.txt", f"a caption {k}".encode()),
                        (f"{key}.json", json.dumps({"key": key}).encode()),
                        (f"{key}.image_emb.npy", npy(image[k])),
                        (f"{key}.text_emb.npy", npy(text[k]))]
        write_tar(folder / "wds" / f"{s:05d}.tar", members)
    (folder / "pq" / "imgs").mkdir(parents=True)
    for k in range(48):
        if k != 3:
            (folder / "pq" / "imgs" / f"{k}.png").write_bytes(png_bytes(pair_colour(k)))
    pq.write_table(pa.table({"id": [f"p{k:04d}" for k in range(48)],
                             "caption": [f"a caption {k}" for k in range(48)],
                             "image": [f"imgs/{k}.png" for k in range(48)],
                             "img": list(image.astype(np.float32)),
                             "txt": list(text.astype(np.float32))}),
                   folder / "pq" / "pairs.parquet")
    vectors = ["--method", "clip", "--no-cache"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        for args in (["wds", "-o", "out/wds-scored", "--image-emb-col", "image_emb",
                      "--text-emb-col", "text_emb"],
                     ["pq/pairs.parquet", "-o", "out/pairs.scored.parquet",
                      "--image-emb-col", "img", "--text-emb-col", "txt"]):
            assert main(["score", *args, *vectors]) == 0
    return {"wds": folder / "out" / "wds-scored", "paths": folder / "out" / "pairs.scored.parquet"}


@pytest.mark.parametrize("name", ["wds", "paths"])
def test_the_report_shows_the_images_wherever_the_output_was_written(scored_elsewhere, name,
                                                                      tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # neither the input's folder nor the output's
    api.split(scored_elsewhere[name], tmp_path / "parts", html=tmp_path / "report.html")
    missing = {"p0003"} if name == "paths" else set()
    assert assert_each_pair_shows_its_image((tmp_path / "report.html").read_text(), missing) == 48
    if name == "wds":  # the reference named as the image column reads the same
        api.split(scored_elsewhere[name], tmp_path / "ref", html=tmp_path / "ref.html",
                  image_col="image_ref")
        assert_each_pair_shows_its_image((tmp_path / "ref.html").read_text())
