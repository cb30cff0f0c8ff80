"""clip-retrieval embedding folders (``img_emb/``, ``text_emb/`` ``.npy`` shards beside
``metadata/`` Parquet), as that tool and ``ncclean embed --layout clip-retrieval`` write them:
``inspect`` and ``score`` read them as shards of vectors."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.cli.test_contract import one_line, run


def retrieval_folder(folder, shards: int = 2, rows: int = 60, dim: int = 8, seed: int = 0,
                     dtype=np.float16):
    """A clip-retrieval folder of ``shards`` shards, a fifth of each shard's captions
    mismatched (``noisy_gt``)."""
    rng = np.random.default_rng(seed)
    for name in ("img_emb", "text_emb", "metadata"):
        (folder / name).mkdir(parents=True)
    for k in range(shards):
        image = rng.normal(size=(rows, dim))
        text = image + 0.2 * rng.normal(size=(rows, dim))
        noisy = np.arange(rows) < rows // 5
        text[noisy] = rng.normal(size=(int(noisy.sum()), dim))
        np.save(folder / "img_emb" / f"img_emb_{k}.npy", image.astype(dtype))
        np.save(folder / "text_emb" / f"text_emb_{k}.npy", text.astype(dtype))
        pq.write_table(pa.table({"id": [f"s{k}-{i}" for i in range(rows)],
                                 "caption": [f"caption {k} {i}" for i in range(rows)],
                                 "noisy_gt": noisy}),
                       folder / "metadata" / f"metadata_{k}.parquet")
    return folder


VECTORS = ["--image-emb-col", "image_emb", "--text-emb-col", "text_emb", "--no-cache"]


def test_score_reads_a_retrieval_folder_shard_by_shard(tmp_path, capsys):
    source = retrieval_folder(tmp_path / "emb")
    code, _, err = run(capsys, "score", source, "-o", tmp_path / "out", *VECTORS)
    assert code == 0, err
    files = sorted((tmp_path / "out" / "metadata").glob("*.parquet"))
    assert [f.name for f in files] == ["metadata_0.parquet", "metadata_1.parquet"]
    out = pa.concat_tables([pq.read_table(f) for f in files])
    assert out.column("id").to_pylist() == [f"s{k}-{i}" for k in range(2) for i in range(60)]
    from sklearn.metrics import roc_auc_score

    noisy = np.asarray(out.column("noisy_gt").to_pylist())
    assert roc_auc_score(~noisy, np.asarray(out.column("clean_prob").to_pylist())) > 0.9
    record = json.loads((tmp_path / "out" / "ncclean.json").read_text())
    assert record["n_rows"] == 120


def test_inspect_reads_a_retrieval_folder(tmp_path, capsys):
    source = retrieval_folder(tmp_path / "emb")
    code, out, err = run(capsys, "inspect", source, "--json", *VECTORS[:4])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_pairs"] == 120 and summary["shard_kind"] == "clip-retrieval"


def test_vectors_of_another_length_than_the_metadata_are_one_line(tmp_path, capsys):
    source = retrieval_folder(tmp_path / "emb")
    np.save(source / "img_emb" / "img_emb_1.npy", np.zeros((59, 8), np.float16))
    code, _, err = run(capsys, "score", source, "-o", tmp_path / "out", *VECTORS)
    assert code == 2 and "img_emb_1.npy" in one_line(err)


def test_what_embed_writes_as_clip_retrieval_scores(tmp_path, capsys, shapes):
    pairs = tmp_path / "pairs.parquet"  # 90 of the pairs: three shards, the last one short
    pq.write_table(pq.read_table(shapes).slice(0, 90), pairs)
    code, _, err = run(capsys, "embed", pairs, "-o", tmp_path / "emb", "--layout",
                       "clip-retrieval", "--shard-rows", "40")
    assert code == 0, err
    assert len(list((tmp_path / "emb" / "img_emb").glob("*.npy"))) == 3
    code, _, err = run(capsys, "score", tmp_path / "emb", "-o", tmp_path / "out", *VECTORS,
                       "--id-col", "row")
    assert code == 0, err
    out = pa.concat_tables([pq.read_table(f) for f in
                            sorted((tmp_path / "out").rglob("metadata_*.parquet"))])
    assert out.column("row").to_pylist() == list(range(90))
