"""The inputs of the reliability audit (shared/reviews/reliability-2.md, issue 60), rebuilt in a
work folder for ``benchmarks/reliability.py``.

Vector corpora: 32-d ``fixed_size_list<float>`` pairs, a caption vector near its image vector,
30% of the image vectors replaced by random ones (``noisy_gt``), int ids, a unique caption per
row. Webdataset folders: tars of ``KEY.png``, ``KEY.txt``, ``KEY.image_emb.npy`` and
``KEY.text_emb.npy``. Image corpora: ``ncclean synth --n-images 20`` (100 pairs), changed row by
row. :func:`build` returns, for every tar folder, the ``(key, caption)`` rows each tar should
give, by its output shard's name.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

DIM = 32
NOISE = 0.3
INVISIBLE = ["\u200b", "\u3000", "\x00", "\u200b\u200b\u200b ", "\ufeff", "\t\n", "\u00a0",
             "\u2060"]  # captions with no visible character (audit case 229)
ODD_CAPTIONS = ["", "   ", None, "x" * 10_000, "y " * 5_000, "\U0001f600\U0001f431",
                "a cat\x00 on a mat", "a cat 猫 на коврике", "\u200b", "\x00"]  # case 213


def vectors(n: int, first: int = 0, seed: int = 0, dim: int = DIM, blob: int = 0,
            tag: str = "caption") -> pa.Table:
    """``n`` pairs with ids ``first..first+n-1``: ``id``, ``caption``, ``image_emb``,
    ``text_emb`` (``(n, dim)`` float32 lists), ``noisy_gt``, and ``blob`` (``blob`` random
    bytes a row) when asked, so that writing a shard lasts long enough to signal it."""
    rng = np.random.default_rng([seed, first, dim])
    image = rng.normal(size=(n, dim)).astype(np.float32)
    text = image + 0.5 * rng.normal(size=(n, dim)).astype(np.float32)
    noisy = rng.random(n) < NOISE
    image[noisy] = rng.normal(size=(int(noisy.sum()), dim))
    ids = np.arange(first, first + n)
    columns = {"id": pa.array(ids), "caption": [f"{tag} {k}" for k in ids],
               "image_emb": _fixed(image), "text_emb": _fixed(text), "noisy_gt": noisy}
    if blob:
        columns["blob"] = pa.array([rng.bytes(blob) for _ in range(n)], pa.binary())
    return pa.table(columns)


def _fixed(values: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), values.shape[1])


def _png(k: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (k * 37 % 256, k * 91 % 256, k * 13 % 256)).save(out, "PNG")
    return out.getvalue()


def _npy(vector: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, vector.astype(np.float32))
    return out.getvalue()


def _samples(keys: list[str], seed: int, vectors_too: bool = True) -> list[tuple[str, dict]]:
    """One sample per key: its members by extension, in webdataset's order."""
    rng = np.random.default_rng(seed)
    samples = []
    for k, key in enumerate(keys):
        image = rng.normal(size=DIM)
        members = {"png": _png(k + seed), "txt": f"sample {seed}-{k}".encode()}
        if vectors_too:
            members["image_emb.npy"] = _npy(image)
            members["text_emb.npy"] = _npy(image + 0.5 * rng.normal(size=DIM))
        samples.append((key, members))
    return samples


def write_tar(path: Path, samples: list[tuple[str, dict]]) -> list[tuple[str, str | None]]:
    """A tar of ``samples`` (``(key, {extension: bytes})``, in order); the ``(key, caption)``
    rows it should score to."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for key, members in samples:
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
    return [(key, m["txt"].decode() if "txt" in m else None) for key, m in samples]


def _cut(tar: Path, within_member: bool) -> None:
    """Cut ``tar`` in its middle: inside a member's data, or where a sample's first member
    starts (no end-of-archive blocks either way)."""
    with tarfile.open(tar) as archive:
        members = archive.getmembers()
    middle = next(m for m in members[len(members) // 2:] if m.name.endswith(".png"))
    size = middle.offset_data + middle.size // 2 if within_member else middle.offset
    with open(tar, "r+b") as handle:
        handle.truncate(size)


def _keys(start: int, n: int, folder: str = "") -> list[str]:
    return [f"{folder}{k:06d}" for k in range(start, start + n)]


def build_tars(inputs: Path) -> dict[str, dict[str, list]]:
    """The webdataset folders; their expected rows by output shard name."""
    expected: dict[str, dict[str, list]] = {}

    def folder(name: str, tars: dict[str, list]) -> None:
        expected[name] = {f"{stem}.parquet": write_tar(inputs / name / f"{stem}.tar", samples)
                          for stem, samples in tars.items()}

    first, second = _samples(_keys(0, 150), 1), _samples(_keys(150, 150), 2)
    folder("wds", {"00000": first, "00001": second})
    for name, within in (("wds_trunc", True), ("wds_trunc_boundary", False)):
        folder(name, {"00000": first, "00001": second})
        _cut(inputs / name / "00001.tar", within)
    nocap = _samples(_keys(0, 150), 3)
    for _, members in nocap[10:13]:
        del members["txt"]
    folder("wds_nocap", {"00000": nocap + [("000150", {"txt": b"a caption alone"})]})
    again = _samples(["000010", "000020"], 4)  # the same key twice in one tar, other vectors
    folder("wds_dupkey", {"00000": _samples(_keys(0, 150), 5) + again})
    folder("wds_dupdir", {"00000": _samples(_keys(0, 100, "a/"), 6)
                          + _samples(_keys(0, 50, "b/"), 7)})
    folder("wds_duptars", {"00000": _samples(_keys(0, 150), 8),
                           "00001": _samples(_keys(0, 150), 9)})
    bad = _samples(_keys(0, 150), 10)
    bad[40][1]["json"] = b"{not json"
    folder("wds_badjson", {"00000": bad})
    folder("wds_novec", {"00000": _samples(_keys(0, 20), 11, vectors_too=False)})
    folder("wds_empty", {"00000": []})
    return expected


def build_images(inputs: Path, synth: Callable[[Path], None]) -> None:
    """``base.parquet`` from ``ncclean synth --n-images 20`` and its variants."""
    base = inputs / "base.parquet"
    synth(base)
    table = pq.read_table(base)
    (inputs / "img_shards").mkdir()
    pq.write_table(table.slice(0, 50), inputs / "img_shards" / "a.parquet")
    pq.write_table(table.slice(50), inputs / "img_shards" / "b.parquet")
    for n in (2, 3, 4):
        pq.write_table(table.slice(0, n), inputs / f"rows{n}.parquet")
    captions = table.column("caption").to_pylist()
    captions[:len(ODD_CAPTIONS)] = ODD_CAPTIONS
    odd = table.set_column(table.schema.get_field_index("caption"), "caption",
                           pa.array(captions, pa.string()))
    pq.write_table(odd, inputs / "captions_odd.parquet")


def build(work: Path, synth: Callable[[Path], None]) -> dict[str, dict[str, list]]:
    """Every input under ``work/in``, plus ``work/out/afile`` (a file where a folder is asked
    for) and the fit-less folders the cases fill; returns :func:`build_tars`'s rows."""
    inputs = work / "in"
    for sub in ("shards", "shards_other", "bigshards", "collide/a", "dupshards", "d48dir",
                "odd_zero_bytes", "odd_widths_differ"):
        (inputs / sub).mkdir(parents=True, exist_ok=True)
    pq.write_table(vectors(300), inputs / "vec300.parquet")
    for s in range(3):
        pq.write_table(vectors(200, 200 * s, seed=1), inputs / "shards" / f"part-{s}.parquet")
    shutil.copytree(inputs / "shards", inputs / "shards_copy")
    for s in range(2):
        pq.write_table(vectors(200, 50_000 + 200 * s, seed=2),
                       inputs / "shards_other" / f"part-{s}.parquet")
    for s in range(4):
        pq.write_table(vectors(500, 500 * s, seed=3, blob=100_000),
                       inputs / "bigshards" / f"s{s}.parquet")
    for k, name in enumerate(["a__b.parquet", "a/b.parquet", "c.parquet"]):
        pq.write_table(vectors(200, 200 * k, seed=4), inputs / "collide" / name)
    pq.write_table(vectors(200, 0, seed=5), inputs / "dupshards" / "a.parquet")
    again = vectors(200, 200, seed=5, tag="other pair")
    ids = np.concatenate([np.arange(20), np.arange(220, 400)])  # ids 0..19 again
    pq.write_table(again.set_column(0, "id", pa.array(ids)), inputs / "dupshards" / "b.parquet")
    pq.write_table(vectors(300, dim=48), inputs / "d48dir" / "vec300_d48.parquet")
    pq.write_table(vectors(200, seed=6), inputs / "odd_zero_bytes" / "a.parquet")
    (inputs / "odd_zero_bytes" / "b.parquet").write_bytes(b"")
    pq.write_table(vectors(200, seed=7), inputs / "odd_widths_differ" / "a.parquet")
    pq.write_table(vectors(200, 200, seed=7, dim=48), inputs / "odd_widths_differ" / "b.parquet")
    invisible = vectors(300, seed=8)
    captions = invisible.column("caption").to_pylist()
    captions[:len(INVISIBLE)] = INVISIBLE
    pq.write_table(invisible.set_column(1, "caption", pa.array(captions)),
                   inputs / "emb_invisible.parquet")
    build_images(inputs, synth)
    (work / "out").mkdir()
    (work / "out" / "afile").write_text("a file where a folder is asked for\n")
    (work / "fits").mkdir()
    return build_tars(inputs)


def damage_fit(fit: Path, folder: Path, how: str) -> None:
    """A copy of the clip fit ``fit`` in ``folder``, damaged ``how``: ``nowidths``,
    ``emptyjson`` (``fit.json`` is ``[]``), ``methodgmm``/``methodpc2`` (another method's name),
    ``missingarray`` (no ``table.y``), ``shortarray`` (``table.y`` shorter than ``table.x``)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(fit, folder)
    meta = json.loads((folder / "fit.json").read_text())
    arrays = load_file(folder / "fit.safetensors")
    if how == "nowidths":
        del meta["widths"]
    elif how == "emptyjson":
        meta = []
    elif how.startswith("method"):
        meta["method"] = how[len("method"):]
    elif how == "missingarray":
        del arrays["table.y"]
    elif how == "shortarray":
        arrays["table.y"] = arrays["table.y"][:-10]
    (folder / "fit.json").write_text(json.dumps(meta))
    save_file(arrays, folder / "fit.safetensors")


def write_bug_plugin(folder: Path) -> None:
    """A method plugin, ``bug``, whose fit raises: an internal error on demand (exit 3), found
    through the ``ncclean.methods`` entry point when ``folder`` is on ``PYTHONPATH``."""
    info = folder / "ncclean_reliability_bug-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ncclean-reliability-bug\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text(
        "[ncclean.methods]\nbug = ncclean_reliability_bug:Bug\n")
    (folder / "ncclean_reliability_bug.py").write_text(
        "from dataclasses import dataclass\n\n"
        "from ncclean.methods.base import Method\n\n\n"
        "@dataclass\nclass Bug(Method):\n"
        "    name = 'bug'\n    summary = 'raises in fit: a bug on demand'\n"
        "    trains_matcher = False\n\n"
        "    def fit(self, features, context):\n"
        "        raise RuntimeError('a bug planted by benchmarks/reliability.py')\n")
