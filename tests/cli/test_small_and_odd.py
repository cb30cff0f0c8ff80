"""Corpora at the edge, through the commands: a handful of pairs (the default pipeline's CCA on
pairs that all show one image), and captions with nothing visible in them (issue 60)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli.test_contract import CLIP, one_line, run


def vector_rows(path, n: int, widths: tuple[int, int] = (8, 8), captions=None) -> str:
    """``n`` pairs of random image and caption vectors of ``widths`` (ids ``r0``...)."""
    rng = np.random.default_rng(n)
    image = rng.normal(size=(n, widths[0])).astype(np.float32)
    text = rng.normal(size=(n, widths[1])).astype(np.float32)
    pq.write_table(pa.table({
        "id": [f"r{i}" for i in range(n)],
        "caption": captions if captions is not None else [f"caption {i}" for i in range(n)],
        "img": pa.array(list(image), pa.list_(pa.float32(), widths[0])),
        "txt": pa.array(list(text), pa.list_(pa.float32(), widths[1]))}), path)
    return path


def rows_out(path) -> list[dict]:
    return pq.read_table(path, columns=["id", "caption", "partition", "invalid_reason"]) \
        .to_pylist()


# --------------------------------------------------------------------------- a handful of pairs


@pytest.mark.parametrize("widths", [(8, 8), (12, 8)])  # one space; two encoders (a CCA)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 6])
def test_every_tiny_vector_corpus_scores_every_row_or_says_why_not_in_one_line(
        capsys, tmp_path, n, widths):
    source = vector_rows(tmp_path / "in.parquet", n, widths)
    code, _, err = run(capsys, "score", source, "-o", tmp_path / "out.parquet", *CLIP)
    if n < 2:  # nothing to compare a single pair with
        assert code == 2 and ("no rows" if n == 0 else "needs at least 2") in one_line(err)
        return
    assert code == 0, err
    out = rows_out(tmp_path / "out.parquet")
    assert [r["id"] for r in out] == [f"r{i}" for i in range(n)]
    assert all(r["partition"] != "invalid" for r in out)


@pytest.fixture(scope="module")
def one_image_first(tmp_path_factory):
    """A synthetic image corpus whose first five pairs are captions of one image."""
    from ncclean import api

    path = tmp_path_factory.mktemp("one_image") / "synth.parquet"
    api.synth(path, n_images=4, captions_per_image=5, seed=0)
    assert len(set(pq.read_table(path, columns=["image_id"]).column(0).to_pylist()[:5])) == 1
    return pq.read_table(path)


@pytest.fixture
def pretrained(monkeypatch):
    from ncclean.models.registry import DEFAULT_TOWERS, default_towers

    monkeypatch.delenv("NCCLEAN_TOWERS", raising=False)
    if default_towers() != DEFAULT_TOWERS["pretrained"]:
        pytest.skip("the imagenet and e5 extras are not installed")


@pytest.mark.parametrize("n, method", [(2, []), (3, []), (4, []), (4, ["--method", "clip"])])
def test_the_default_pipeline_scores_a_few_pairs_of_one_image_and_says_it_fitted_no_cca(
        capsys, tmp_path, pretrained, one_image_first, n, method):
    pq.write_table(one_image_first.slice(0, n), tmp_path / "in.parquet")
    out = tmp_path / "out.parquet"
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", out, "--no-cache", *method)
    assert code == 0, err
    rows = rows_out(out)
    assert [r["id"] for r in rows] == one_image_first.column("id").to_pylist()[:n]
    # one image under every caption: no pair can be told from another, so none is called noisy
    assert {r["partition"] for r in rows} == {"vague"}
    assert set(pq.read_table(out, columns=["clean_prob"]).column(0).to_pylist()) == {0.5}
    record = json.loads((tmp_path / "out.parquet.json").read_text())
    assert record["report"]["alignment"] is None
    assert "fitted no CCA" in record["report"]["warnings"][0]
    assert "pairs whose images differ" in record["report"]["warnings"][0]


def test_the_default_pipeline_on_one_or_six_pairs(capsys, tmp_path, pretrained, one_image_first):
    pq.write_table(one_image_first.slice(0, 1), tmp_path / "one.parquet")
    code, _, err = run(capsys, "score", tmp_path / "one.parquet", "-o", tmp_path / "o1.parquet",
                       "--no-cache")
    assert code == 2 and "needs at least 2" in one_line(err)
    pq.write_table(one_image_first.slice(0, 6), tmp_path / "six.parquet")  # two images: a CCA
    code, _, err = run(capsys, "score", tmp_path / "six.parquet", "-o", tmp_path / "o6.parquet",
                       "--no-cache")
    assert code == 0, err
    assert len(rows_out(tmp_path / "o6.parquet")) == 6
    record = json.loads((tmp_path / "o6.parquet.json").read_text())
    assert record["report"]["alignment"]["method"] == "ridge CCA"
    assert "warnings" not in record["report"]


# ---------------------------------------------------------------- captions with nothing visible

INVISIBLE = ["\u200b", "\x00", "\u2060", "\ufeff", "\u200b\u200b\u200b ", "\u200d\u3164"]


def test_a_caption_with_no_visible_character_is_invalid_like_an_empty_one(capsys, tmp_path):
    captions = [f"caption {i}" for i in range(40)]
    captions[:len(INVISIBLE)] = INVISIBLE
    captions[10], captions[11], captions[12] = "", "\u3000\t", "a\u200bb\x00"
    source = vector_rows(tmp_path / "in.parquet", 40, captions=captions)
    code, _, err = run(capsys, "score", source, "-o", tmp_path / "out.parquet", *CLIP)
    assert code == 0, err
    rows = rows_out(tmp_path / "out.parquet")
    assert [r["caption"] for r in rows] == captions  # every row out once, as it came in
    for row in rows[:len(INVISIBLE)]:
        assert (row["partition"], row["invalid_reason"]) == \
            ("invalid", "caption has no visible character"), repr(row["caption"])
    assert [r["invalid_reason"] for r in rows[10:12]] == ["empty caption"] * 2
    assert rows[12]["partition"] != "invalid"  # visible text around invisible characters
    assert sum(r["partition"] == "invalid" for r in rows) == len(INVISIBLE) + 2


def test_no_usable_pair_says_why_and_what_to_do(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.cli.test_contract import one_line, run

    for name, images, says in (
            ("urls", ["https://example.com/a.jpg", "https://example.com/b.jpg"], "img2dataset"),
            ("absolute", ["/etc/a.jpg", "/etc/b.jpg"], "--allow-absolute-paths")):
        pq.write_table(pa.table({"caption": ["a cat", "a dog"], "image": images}),
                       tmp_path / f"{name}.parquet")
        code, _, err = run(capsys, "score", tmp_path / f"{name}.parquet", "-o",
                           tmp_path / f"{name}-out.parquet")
        assert code == 2 and says in one_line(err) and "2 rows:" in err
