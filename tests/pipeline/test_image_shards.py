"""A folder of img2dataset-style tars of images and captions, no vectors: ``score wds/ -o out/``
embeds each shard with the default pipeline's pretrained towers (cached by content), fits on a
sample and applies it shard by shard."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli.test_contract import run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clipart-300.parquet"


def clipart_tars(folder: Path, shards: int = 3, moved: float = 0.3, seed: int = 0,
                 rows: int | None = None) -> np.ndarray:
    """The 300-pair clip-art example (its first ``rows`` pairs) as ``shards`` tars (``KEY.png``,
    ``KEY.txt``, ``KEY.json``), a share ``moved`` of its captions moved to other images; which,
    by row."""
    table = pq.read_table(EXAMPLE)
    if rows is not None:
        table = table.slice(0, rows)
    rng = np.random.default_rng(seed)
    n = table.num_rows
    captions = table.column("caption").to_pylist()
    noisy = np.zeros(n, dtype=bool)
    chosen = rng.choice(n, int(moved * n), replace=False)
    noisy[chosen] = True
    rolled = np.roll(chosen, 1)
    moved_captions = list(captions)
    for a, b in zip(chosen, rolled):
        moved_captions[a] = captions[b]
    folder.mkdir(parents=True)
    bounds = np.linspace(0, n, shards + 1).astype(int)
    images = table.column("image").to_pylist()
    for s in range(shards):
        with tarfile.open(folder / f"{s:05d}.tar", "w") as tar:
            for row in range(bounds[s], bounds[s + 1]):
                key = f"{s:05d}{row:04d}"
                for name, data in ((f"{key}.png", images[row]),
                                   (f"{key}.txt", moved_captions[row].encode()),
                                   (f"{key}.json", json.dumps({"key": key}).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return noisy


@pytest.fixture()
def pretrained(monkeypatch, tmp_path):
    monkeypatch.setenv("NCCLEAN_TOWERS", "pretrained")
    monkeypatch.setenv("NCCLEAN_CACHE", str(tmp_path / "cache"))


def outputs(folder: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(folder.glob("*.parquet"))])


def test_raw_image_tars_score_with_no_option(tmp_path, capsys, pretrained):
    noisy = clipart_tars(tmp_path / "wds")
    code, _, err = run(capsys, "score", tmp_path / "wds", "-o", tmp_path / "out")
    assert code == 0, err
    out = outputs(tmp_path / "out")
    keys = out.column("id").to_pylist()
    assert len(keys) == len(set(keys)) == 300
    assert "image_emb" not in out.column_names and "text_emb" not in out.column_names
    assert out.column("image").null_count == 300  # a tar's bytes stay in the tar
    from sklearn.metrics import roc_auc_score

    prob = np.asarray(out.column("clean_prob").to_pylist(), dtype=float)
    valid = np.isfinite(prob)
    assert roc_auc_score(~noisy[valid], prob[valid]) > 0.8
    record = json.loads((tmp_path / "out" / "ncclean.json").read_text())
    assert record["embedded"]["computed"] == 3 and record["method"] == "clip"
    # a second run into another folder embeds nothing again, and writes the same bytes
    code, _, err = run(capsys, "score", tmp_path / "wds", "-o", tmp_path / "again")
    assert code == 0, err
    record = json.loads((tmp_path / "again" / "ncclean.json").read_text())
    assert record["embedded"] == {"towers": record["embedded"]["towers"], "computed": 0,
                                  "cached": 3}
    for name in ("00000.parquet", "00001.parquet", "00002.parquet"):
        first = pq.read_table(tmp_path / "out" / name).replace_schema_metadata(None)
        second = pq.read_table(tmp_path / "again" / name).replace_schema_metadata(None)
        assert first.equals(second)


def test_without_the_pretrained_towers_the_line_says_what_to_install(tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setenv("NCCLEAN_TOWERS", "scratch")
    clipart_tars(tmp_path / "wds", shards=2, moved=0.1)
    code, _, err = run(capsys, "score", tmp_path / "wds", "-o", tmp_path / "out")
    assert code == 2 and "ncclean[imagenet,e5]" in err and "--image-emb-col" in err
    assert not (tmp_path / "out").exists()


def test_an_undecodable_image_in_a_tar_keeps_its_row_and_says_why(tmp_path, capsys,
                                                                  pretrained):
    clipart_tars(tmp_path / "wds", shards=2, moved=0.1, rows=60)
    with tarfile.open(tmp_path / "wds" / "00001.tar", "a") as tar:
        for name, data in (("bad0.png", b"not a picture"), ("bad0.txt", b"a caption")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    code, _, err = run(capsys, "score", tmp_path / "wds", "-o", tmp_path / "out")
    assert code == 0, err
    last = pq.read_table(tmp_path / "out" / "00001.parquet").to_pylist()[-1]
    assert last["id"] == "bad0" and last["partition"] == "invalid"
    assert "undecodable image" in last["invalid_reason"]


def test_embed_writes_each_shard_with_both_vectors_and_redoes_only_what_changed(
        tmp_path, capsys, pretrained):
    clipart_tars(tmp_path / "wds", shards=2, rows=80)
    code, _, err = run(capsys, "embed", tmp_path / "wds", "-o", tmp_path / "vec", "--half")
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "vec").glob("*.parquet"))
    assert names == ["00000.parquet", "00001.parquet"]
    table = outputs(tmp_path / "vec")
    assert table.num_rows == 80 and {"image_emb", "text_emb"} <= set(table.column_names)
    made = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "vec").glob("*.parquet")}
    with tarfile.open(tmp_path / "wds" / "00001.tar", "a") as tar:  # one shard changes
        info = tarfile.TarInfo("extra.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"a cat"))
    code, _, err = run(capsys, "embed", tmp_path / "wds", "-o", tmp_path / "vec", "--half")
    assert code == 0, err
    again = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "vec").glob("*.parquet")}
    assert again["00000.parquet"] == made["00000.parquet"]
    assert again["00001.parquet"] != made["00001.parquet"]
    code, _, err = run(capsys, "score", tmp_path / "vec", "-o", tmp_path / "scored",
                       "--image-emb-col", "image_emb", "--text-emb-col", "text_emb")
    assert code == 0, err
    assert outputs(tmp_path / "scored").num_rows == 81


@pytest.mark.slow
def test_embed_on_ray_writes_the_local_engines_bytes(tmp_path, capsys, pretrained, monkeypatch):
    monkeypatch.setenv("NCCLEAN_RAY_CPUS", "2")
    clipart_tars(tmp_path / "wds", shards=2)
    for engine in ("local", "ray"):
        code, _, err = run(capsys, "embed", tmp_path / "wds", "-o", tmp_path / engine,
                           "--engine", engine, "--half")
        assert code == 0, err
    for name in ("00000.parquet", "00001.parquet"):
        assert pq.read_table(tmp_path / "ray" / name).equals(
            pq.read_table(tmp_path / "local" / name))
