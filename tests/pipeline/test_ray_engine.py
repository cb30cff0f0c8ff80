"""The ray engine writes what the local engine writes (same fit, same seed, same bytes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


ROOT = Path(__file__).resolve().parents[2]
SLOW_DRIVER = """
import os
import sys
import time

from ncclean.pipeline import ray_engine


class SlowApplier(ray_engine.ShardApplier):  # defined in __main__: Ray ships it by value
    def __call__(self, batch):
        from ncclean.pipeline import shard

        apply = shard._apply_part

        def slow(*args, **kwargs):  # the first shard applied is written, the others wait
            try:
                os.close(os.open(FIRST, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                time.sleep(60)
            return apply(*args, **kwargs)

        shard._apply_part = slow
        return super().__call__(batch)


ray_engine.ShardApplier = SlowApplier
from ncclean.cli import run

sys.argv[0] = "ncclean"
run()
"""


def _workers_writing(process: subprocess.Popen, out: Path, timeout: float = 90) -> list[str]:
    """The output folder's names once a shard is complete and a worker is writing another (its
    temporary file is there), before ``process`` ends or ``timeout`` seconds pass; else ``[]``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and process.poll() is None:
        names = os.listdir(out) if out.is_dir() else []
        if any(n.endswith(".parquet") for n in names) and any(n.endswith(".tmp") for n in names):
            return names
        time.sleep(0.1)
    return []


@pytest.mark.parametrize(("how", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_an_interrupt_while_ray_workers_write_ends_as_the_local_engines_does(tmp_path, how,
                                                                             code):
    """Exit 143 or 130 and the one line (for SIGTERM, not Ray's exit code 15 and its core's
    stack dump); the complete shard stays, the workers' temporary files and scratch folders
    go (with SIGINT they stayed, though the line said they were removed)."""
    write_shards(vector_table(400, seed=5), tmp_path / "in", 4)
    driver = tmp_path / "driver.py"
    driver.write_text(f"FIRST = {str(tmp_path / 'first')!r}\n{SLOW_DRIVER}")
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, str(driver), "score", str(tmp_path / "in"), "-o", str(out),
         "--method", "clip", "--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache",
         "--engine", "ray"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    try:
        writing = _workers_writing(process, out)
        if writing:
            process.send_signal(how)
        else:
            process.kill()
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert writing, err
    assert process.returncode == code, err
    assert "SIGTERM received" not in err and "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.startswith("ncclean: error:")] == [
        f"ncclean: error: interrupted: ncclean score kept 1 of 4 shards complete in {out}/ "
        "(the same command finishes the rest; partial files removed)"], err
    left = os.listdir(out)  # no .ncclean-*.tmp, no .ncclean-scratch-*
    assert len(left) == 1 and left[0].startswith("part-00") and left[0].endswith(".parquet")


def test_the_callers_signal_handlers_are_back_once_ray_has_started(monkeypatch):
    """ray.init sets a SIGTERM handler that exits with code 15: the caller's is put back, and
    a SIGTERM that Ray's took while starting is sent on to the caller's."""
    from types import SimpleNamespace

    from ncclean.pipeline import ray_engine

    class Terminated(Exception):
        pass

    def ours(signum, frame):
        raise Terminated

    terminate_while_starting = []

    def init(**kwargs):  # as ray.init does, without starting anything
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        if terminate_while_starting:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this

    fake = SimpleNamespace(is_initialized=lambda: False, init=init, shutdown=lambda: None)
    monkeypatch.setattr(ray_engine, "_import_ray", lambda: fake)
    previous = signal.signal(signal.SIGTERM, ours)
    try:
        with ray_engine._session(None):
            assert signal.getsignal(signal.SIGTERM) is ours
        terminate_while_starting.append(True)
        with pytest.raises(Terminated), ray_engine._session(None):
            pass
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
