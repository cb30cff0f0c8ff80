"""The ray engine writes what the local engine writes (same fit, same seed, same bytes)."""

from __future__ import annotations

import json

import pytest

from ncclean.api import score
from ncclean.data.schema import Columns
from ncclean.options import ScaleOptions
from tests.pipeline.corpora import vector_table, write_shards

pytest.importorskip("ray")


def test_ray_and_local_write_the_same_shards(tmp_path):
    write_shards(vector_table(500, seed=5), tmp_path / "in", 4)
    kwargs = {"columns": Columns(image_emb="img", text_emb="txt"), "cache_dir": False, "seed": 2}
    local = score(tmp_path / "in", tmp_path / "local", "clip",
                  scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / "fit"), **kwargs)
    ray = score(tmp_path / "in", tmp_path / "ray", "clip",
                scale=ScaleOptions(fit=tmp_path / "fit", engine="ray"), **kwargs)
    names = sorted(p.name for p in (tmp_path / "local").glob("*.parquet"))
    assert names == sorted(p.name for p in (tmp_path / "ray").glob("*.parquet"))
    assert len(names) == 4
    for name in names:
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes()
    assert ray.partition_counts == local.partition_counts
    shards = json.loads((tmp_path / "ray" / "ncclean.json").read_text())["shards"]
    assert [s["stem"] for s in shards] == [n[:-8] for n in names]


def test_bad_input_in_a_ray_worker_is_the_local_engines_one_line(capfd, tmp_path):
    """A worker's error of ours comes back as itself (exit 2, its one line), not wrapped in
    Ray's exceptions and traceback, and Ray's own log lines stay off the terminal."""
    import numpy as np
    import pyarrow as pa

    from ncclean.cli import main

    table = vector_table(300, seed=5)
    img = table.column("img").to_pylist()
    img[150] = [float("nan")] * len(img[150])  # an invalid pair in the second shard
    bad = table.set_column(table.schema.get_field_index("img"), "img",
                           pa.array([np.asarray(v, np.float32) for v in img],
                                    table.schema.field("img").type))
    write_shards(table, tmp_path / "in", 3)
    write_shards(bad, tmp_path / "bad", 3)
    vectors = ["--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]
    assert main(["score", str(tmp_path / "in"), "-o", str(tmp_path / "local"), *vectors,
                 "--save-fit", str(tmp_path / "fit")]) == 0
    capfd.readouterr()
    lines = {}
    for engine in ("local", "ray"):
        code = main(["score", str(tmp_path / "bad"), "-o", str(tmp_path / engine / "out"),
                     *vectors, "--fit", str(tmp_path / "fit"), "--strict", "--engine", engine])
        err = capfd.readouterr().err
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        lines[engine] = err.replace(str(tmp_path / engine), "OUT")
    assert lines["ray"] == lines["local"]


def test_a_cluster_address_where_nothing_answers_is_one_line(capsys, tmp_path):
    import socket

    from tests.cli.test_contract import run

    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    write_shards(vector_table(60), tmp_path / "in", 2)
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out",
                       "--image-emb-col", "img", "--text-emb-col", "txt", "--engine", "ray",
                       "--ray-address", f"127.0.0.1:{port}")
    assert code == 2 and err.count("\n") == 1
    assert f"--ray-address 127.0.0.1:{port}: no Ray cluster answers there" in err
