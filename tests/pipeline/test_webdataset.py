"""A webdataset folder in img2dataset's layout (tars + per-shard Parquet) scores without
conversion: every sample once, the key as the id, the image referenced, not copied."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.api import score
from ncclean.data.schema import Columns
from ncclean.data.webdataset import read_tar
from tests.helpers import png_bytes


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def img2dataset_folder(folder, shards: int = 2, per_shard: int = 80, seed: int = 0):
    """Tars ``00000.tar``... with ``KEY.png``, a caption (``KEY.txt`` in even shards, the
    ``caption`` of ``KEY.json`` in odd ones) and vectors in ``KEY.json``; beside each tar the
    Parquet img2dataset writes, with one failed download that has no member."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    keys = []
    for s in range(shards):
        meta = {"key": [], "url": [], "status": []}
        with tarfile.open(folder / f"{s:05d}.tar", "w") as tar:
            for k in range(per_shard):
                key = f"{s:05d}{k:04d}"
                image = rng.normal(size=8)
                text = image + 0.3 * rng.normal(size=8) if k % 4 else rng.normal(size=8)
                caption = f"a caption {k}"
                record = {"img_emb": image.tolist(), "txt_emb": text.tolist(), "width": 32}
                add(tar, f"{key}.png", png_bytes())
                if s % 2 == 0:
                    add(tar, f"{key}.txt", caption.encode())
                else:
                    record["caption"] = caption
                add(tar, f"{key}.json", json.dumps(record).encode())
                meta["key"].append(key), meta["url"].append(f"http://x/{key}.png")
                meta["status"].append("success")
                keys.append(key)
        meta["key"].append(f"{s:05d}9999"), meta["url"].append("http://x/gone.png")
        meta["status"].append("failed_to_download")
        pq.write_table(pa.table(meta), folder / f"{s:05d}.parquet")
    return keys


def test_read_tar_joins_the_img2dataset_parquet(tmp_path):
    img2dataset_folder(tmp_path / "wds", shards=1, per_shard=5)
    table = read_tar(tmp_path / "wds" / "00000.tar")
    assert table.column("id").to_pylist() == [f"0000000{k:02d}" for k in range(5)]
    assert table.column("caption").to_pylist()[0] == "a caption 0"
    assert table.column("url").to_pylist()[4] == "http://x/000000004.png"
    assert table.column("image_ref").to_pylist()[0].endswith("00000.tar::000000000.png")
    assert table.schema.field("img_emb").type == pa.list_(pa.float32())


def test_a_webdataset_folder_scores_every_sample_once(tmp_path):
    keys = img2dataset_folder(tmp_path / "wds")
    summary = score(tmp_path / "wds", tmp_path / "out", "clip", cache_dir=False,
                    columns=Columns(image_emb="img_emb", text_emb="txt_emb"))
    assert summary.n_pairs == len(keys) == 160
    names = sorted(p.name for p in (tmp_path / "out").glob("*.parquet"))
    assert names == ["00000.parquet", "00001.parquet"]
    out = pa.concat_tables([pq.read_table(tmp_path / "out" / n) for n in names])
    assert out.column("id").to_pylist() == keys  # every sample once, the key as the id
    assert out.column("image").null_count == out.num_rows  # not copied...
    assert all(ref.split("::")[1] == f"{key}.png"  # ...but referenced
               for ref, key in zip(out.column("image_ref").to_pylist(), keys, strict=True))
    assert set(out.column("status").to_pylist()) == {"success"}
    prob = np.asarray(out.column("clean_prob").to_pylist())
    mismatched = np.array([int(k[-4:]) % 4 == 0 for k in keys])
    assert prob[mismatched].mean() < prob[~mismatched].mean()
