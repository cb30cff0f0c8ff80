"""Bad input through the command line, one table: what goes in, the exit code, what is said.

Every case runs the real CLI entry point (``ncclean.cli.main``) in-process; a case that fails
must say so in one line on stderr, a case that succeeds must name what it found. Determinism and
the decoding pool's warnings are checked in real processes below the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.cli import main
from tests.helpers import huge_png, png_bytes, write_parquet

COLOURS = [(200, 0, 0), (0, 200, 0), (0, 0, 200), (200, 200, 0)]


def _grouped(images: list, path_column: bool = False) -> dict:
    """Eight pairs, two per image_id, with ``images`` as the image column."""
    return {"id": [f"p{i}" for i in range(8)], "image_id": [i // 2 for i in range(8)],
            "image": images, "caption": [f"caption {i}" for i in range(8)]}


def _good_images() -> list[bytes]:
    return [png_bytes(COLOURS[i // 2]) for i in range(8)]


def undecodable(folder: Path) -> Path:
    images = _good_images()
    images[3] = b"these bytes are no picture"
    return write_parquet(folder / "in.parquet", _grouped(images))


def empty_and_null(folder: Path) -> Path:
    images: list = _good_images()
    images[1], images[5] = b"", None
    return write_parquet(folder / "in.parquet", _grouped(images))


def urls(folder: Path) -> Path:
    return write_parquet(folder / "in.parquet", {
        "image": ["https://example.com/a.png", "https://example.com/b.png"],
        "caption": ["a", "b"]})


def escaping_paths(folder: Path) -> Path:
    (folder / "data").mkdir()
    (folder / "secret.png").write_bytes(png_bytes())
    (folder / "data" / "ok.png").write_bytes(png_bytes((0, 0, 255)))
    return write_parquet(folder / "data" / "in.parquet", {
        "image": ["ok.png", "../secret.png", "../../../../etc/passwd", str(folder / "secret.png")],
        "caption": ["a", "b", "c", "d"]})


def absolute_path(folder: Path) -> Path:
    (folder / "data").mkdir()
    (folder / "elsewhere.png").write_bytes(png_bytes())
    (folder / "data" / "ok.png").write_bytes(png_bytes((0, 0, 255)))
    return write_parquet(folder / "data" / "in.parquet", {
        "image": ["ok.png", str(folder / "elsewhere.png")], "caption": ["a", "b"]})


def truncated_in_group(folder: Path) -> Path:
    images = _good_images()
    images[5] = png_bytes(COLOURS[2], size=(64, 64))[:70]  # row 5: image 2, its second row
    return write_parquet(folder / "in.parquet", _grouped(images))


def bomb_in_group(folder: Path) -> Path:
    images = _good_images()
    images[3] = huge_png(20000, 20000)  # 400 Mpx: over twice the limit, PIL refuses first
    images[7] = huge_png(10000, 10000)  # 100 Mpx: over the limit, under PIL's own refusal
    return write_parquet(folder / "in.parquet", _grouped(images))


def embeddings(kind: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        rng = np.random.default_rng(0)
        image = rng.normal(size=(12, 8)).astype(np.float32)
        text = image + 0.1 * rng.normal(size=(12, 8)).astype(np.float32)
        if kind == "some zero":
            image[2] = 0
            text[5] = 0
            image[7] = 0.25  # one value in every dimension
        elif kind == "all zero":
            image[:] = 0
        elif kind == "constant":
            text[:] = text[0]
        return write_parquet(folder / "in.parquet", {
            "caption": [f"c{i}" for i in range(12)],
            "img": pa.array(list(image), pa.list_(pa.float32(), 8)),
            "txt": pa.array(list(text), pa.list_(pa.float32(), 8))})
    return build


def noise_index(kind: str) -> Callable[[Path], Path]:
    """A clean corpus (8 images x 3 captions, image by image) and an index made on it; the corpus
    the command gets is then the same rows shuffled (or reversed), or another corpus."""
    def build(folder: Path) -> Path:
        n = 24
        table = {"image": [png_bytes((i * 30, 0, 0)) for i in range(8) for _ in range(3)],
                 "caption": [f"caption {i}" for i in range(n)]}
        if kind in ("ids", "foreign ids"):
            table["id"] = [f"r{i}" for i in range(n)]
        write_parquet(folder / "clean.parquet", table)
        api.inject_noise(folder / "clean.parquet", folder / "made.parquet", ratio=0.25, seed=0)
        made = folder / "made.parquet.noise.npz"
        if kind == "published":  # the bare array, as NCR publishes it
            np.save(folder / "index.npy", np.load(made)["caption_to_image"])
        else:
            made.rename(folder / "index.npz")
        if kind == "foreign ids":
            table["id"] = [f"other{i}" for i in range(n)]
            return write_parquet(folder / "in.parquet", table)
        order = np.random.default_rng(1).permutation(n) if kind != "reversed" else \
            np.arange(n)[::-1]  # reversed: the same image blocks, so the same grouping
        shuffled = {key: [values[i] for i in order] for key, values in table.items()}
        return write_parquet(folder / "in.parquet", shuffled)
    return build


def string_clean_prob(folder: Path) -> Path:
    return write_parquet(folder / "in.parquet", {"partition": ["noisy", "clean_significant"],
                                                 "clean_prob": ["0.1", "high"]})


def foreign_default_output(folder: Path) -> Path:
    """A corpus whose default output name (in.scored.parquet) holds a file of someone else's."""
    path = embeddings("plain")(folder)
    write_parquet(folder / "in.scored.parquet", {"theirs": [1]})
    return path


def scored_with_foreign_test(folder: Path) -> Path:
    """A scored embedding corpus, and test.parquet naming its caption column 'text'."""
    path = embeddings("plain")(folder)
    from ncclean.data.schema import Columns

    api.score(path, folder / "scored.parquet", "clip", columns=Columns(image_emb="img",
                                                                      text_emb="txt"),
              cache_dir=False)
    table = pq.read_table(path)
    pq.write_table(table.rename_columns(["text", "img", "txt"]), folder / "test.parquet")
    return folder / "scored.parquet"


IMAGE_INSPECT = ["inspect", "{input}", "--json"]
CLIP = ["score", "{input}", "-o", "{dir}/out.parquet", "--method", "clip", "--image-emb-col",
        "img", "--text-emb-col", "txt", "--no-cache"]

# (case, build the input, arguments, exit code, a fragment of stdout (exit 0) or of the one
# stderr line (exit 2), a fragment that must not appear anywhere)
CASES = [
    ("undecodable bytes: stable text", undecodable, IMAGE_INSPECT, 0,
     '"undecodable image": 1', "0x"),
    ("empty bytes and null: one reason", empty_and_null, IMAGE_INSPECT, 0,
     '"missing image": 2', "empty bytes"),
    ("a URL is one category, not two", urls, IMAGE_INSPECT, 0,
     '"image is a URL": 2', '"download'),
    ("paths out of the folder are not read", escaping_paths, IMAGE_INSPECT, 0,
     '"image path outside the input folder": 3', "undecodable"),
    ("--allow-absolute-paths reads them", absolute_path,
     [*IMAGE_INSPECT, "--allow-absolute-paths"], 0, '"n_invalid": 0', "outside"),
    ("a truncated PNG in a group's second row", truncated_in_group, IMAGE_INSPECT, 0,
     '"n_invalid": 1', None),
    ("bombs in groups' second rows: one message, one limit", bomb_in_group, IMAGE_INSPECT, 0,
     '"image too large": 2', "178956970"),
    ("a pixel limit PIL would undercut", undecodable,
     [*IMAGE_INSPECT, "--max-image-pixels", "200000000"], 2,
     "--max-image-pixels must be at most 178,956,970", None),
    ("zero and one-value embeddings are invalid rows", embeddings("some zero"), CLIP, 0,
     "", None),
    ("an all-zero embedding column", embeddings("all zero"), CLIP, 2,
     "embedding column 'img' holds all zeros in all 12 usable rows", None),
    ("a constant embedding column", embeddings("constant"), CLIP, 2,
     "embedding column 'txt' holds one vector in all 12 usable rows", None),
    ("our index on reordered rows: matched by id", noise_index("ids"),
     ["inject-noise", "{input}", "-o", "{dir}/noisy.parquet", "--index", "{dir}/index.npz"], 0,
     "realised", None),
    ("our index on reordered rows without ids", noise_index("no ids"),
     ["inject-noise", "{input}", "-o", "{dir}/noisy.parquet", "--index", "{dir}/index.npz"], 2,
     "index.npz does not fit this corpus: its images are grouped differently", None),
    ("our index on reversed rows without ids: the captions moved", noise_index("reversed"),
     ["inject-noise", "{input}", "-o", "{dir}/noisy.parquet", "--index", "{dir}/index.npz"], 2,
     "index.npz was written for other captions in these rows (24 of 24 differ, first: row 0)",
     None),
    ("our index on another corpus", noise_index("foreign ids"),
     ["inject-noise", "{input}", "-o", "{dir}/noisy.parquet", "--index", "{dir}/index.npz"], 2,
     "names 24 ids this corpus does not hold (first: 'r0')", None),
    ("a published index on reordered rows", noise_index("published"),
     ["inject-noise", "{input}", "-o", "{dir}/noisy.parquet", "--index", "{dir}/index.npy"], 2,
     "the rows are not in the order it was made for", None),
    ("a non-numeric clean_prob: check", string_clean_prob,
     ["check", "{input}", "--max-noisy", "0.5"], 2, "clean_prob holds string, not numbers", None),
    ("a non-numeric clean_prob: split", string_clean_prob, ["split", "{input}", "-o", "{dir}/s"],
     2, "clean_prob holds string, not numbers", None),
    ("a learning rate below zero", embeddings("plain"), [*CLIP, "-p", "lr=-1"], 2,
     "parameter 'lr' of 'clip': -1.0 must be > 0", None),
    ("a noise rate and a threshold it would ignore", embeddings("plain"),
     [*CLIP, "--noise-rate", "0.2", "--clean-above", "0.9"], 2,
     "--noise-rate cuts by a share and wins over --clean-above", None),
    ("score's default output over a file it did not write", foreign_default_output,
     [a for a in CLIP if a not in ("-o", "{dir}/out.parquet")], 2,
     "in.scored.parquet exists and was not written by 'ncclean score'", None),
    ("split with no input and nothing scored from here", embeddings("plain"), ["split"], 2,
     "no input given, and 'ncclean score' has written no file from this folder", None),
    ("retrain: the test file lacks the caption column", scored_with_foreign_test,
     ["retrain", "{input}", "--test", "{dir}/test.parquet", "--steps", "2"], 2,
     "test file", None),
    ("retrain: test columns named apart", scored_with_foreign_test,
     ["retrain", "{input}", "--test", "{dir}/test.parquet", "--steps", "2",
      "--test-caption-col", "text"], 0, "Recall@K", None),
]


@pytest.mark.parametrize("build, args, code, said, unsaid",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input(tmp_path, capsys, monkeypatch, build, args, code, said, unsaid):
    monkeypatch.chdir(tmp_path)  # the commands that find their input from the current folder
    path = build(tmp_path)
    argv = [a.format(input=path, dir=tmp_path) for a in args]
    got = main(argv)
    out, err = capsys.readouterr()
    assert got == code, err
    assert "Traceback" not in out + err
    if code == 0:
        assert said in out
    else:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ncclean: error: "), err
        assert said in lines[0]
    if unsaid is not None:
        assert unsaid not in out + err


def test_zero_embeddings_land_in_invalid_with_their_reason(tmp_path, capsys):
    path = embeddings("some zero")(tmp_path)
    assert main([a.format(input=path, dir=tmp_path) for a in CLIP]) == 0
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert len(rows) == 12
    reasons = {i: row["invalid_reason"] for i, row in enumerate(rows) if row["invalid_reason"]}
    assert reasons == {2: "image embedding is all zeros", 5: "text embedding is all zeros",
                       7: "image embedding has one value in every dimension"}
    assert all(rows[i]["partition"] == "invalid" for i in reasons)


def test_noise_index_follows_ids_to_reordered_rows(tmp_path, capsys):
    path = noise_index("ids")(tmp_path)
    api.inject_noise(path, tmp_path / "again.parquet", index=tmp_path / "index.npz")
    first = pq.read_table(tmp_path / "made.parquet").to_pylist()
    again = pq.read_table(tmp_path / "again.parquet").to_pylist()
    by_id = {row["id"]: (row["image"], row["noisy_gt"]) for row in first}
    assert {row["id"]: (row["image"], row["noisy_gt"]) for row in again} == by_id
    assert sum(gt for _, gt in by_id.values()) == 6


# ----------------------------------------------------------------------- in real processes


def _ncclean(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ncclean", *args], capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_same_seed_same_bytes_with_undecodable_images(tmp_path):
    api.synth(tmp_path / "clean.parquet", n_images=12, captions_per_image=2, seed=0)
    table = pq.read_table(tmp_path / "clean.parquet").to_pydict()
    table["image"][0] = b"no picture"  # the first row of its image_id
    table["image"][3] = b"not one either"  # the second row of its image_id
    table["image"][8] = b"\x89PNG\r\n\x1a\n" + b"\x00" * 30  # a PNG signature, then nothing
    write_parquet(tmp_path / "in.parquet", table)
    outputs = []
    for run in ("a", "b"):
        out = tmp_path / f"{run}.parquet"
        done = _ncclean("score", str(tmp_path / "in.parquet"), "-o", str(out), "--seed", "0",
                        "--no-cache", "-p", "epochs=1", "-p", "warmup_epochs=1", "-p",
                        "batch_size=8", "--image-size", "16", "--embed-dim", "16")
        assert done.returncode == 0, done.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    reasons = pq.read_table(tmp_path / "a.parquet").column("invalid_reason").to_pylist()
    assert [i for i, r in enumerate(reasons) if r] == [0, 3, 8]
    assert reasons[0] == "undecodable image: not an image format PIL reads"
    assert not any("0x" in r for r in reasons if r)


def test_no_decompression_warning_reaches_stderr(tmp_path):
    big = huge_png(10000, 10000)  # over PIL's warning limit, under its refusal
    write_parquet(tmp_path / "in.parquet", {
        "image": [big + bytes([i]) for i in range(16)],  # 16 distinct images for the pool
        "caption": [f"c{i}" for i in range(16)]})
    for _ in range(3):
        done = _ncclean("inspect", str(tmp_path / "in.parquet"), "--json")
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert json.loads(done.stdout)["invalid"] == {"image too large": 16}
