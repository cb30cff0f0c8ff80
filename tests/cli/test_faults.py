"""Faults during the write (issue 40, items 1 and 7): a full disk at every step of writing the
scored file and its record, and ``kill -9`` or SIGTERM while the output is being written. The
bars: exit 2 with one line on a full disk; never a file paired with another run's record; after
a kill and a normal rerun, no file of ours beside the output."""

from __future__ import annotations

import errno
import gc
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean.cli import main
from ncclean.data.parquet import TEMP_MARK
from ncclean.data.results import RECORD_KEY, partition_counts, stable_record
from ncclean.data.scored import open_scored
from tests.cli.test_contract import CLIP, embedding_corpus

ROOT = Path(__file__).resolve().parents[2]


def _pairing_holds(out: Path) -> None:
    """What is left at ``out`` is one run's rows with that run's record: the record in the file
    counts the file's rows, and a JSON copy beside it, if any, is that record."""
    folder = out.parent
    assert not [n for n in os.listdir(folder) if TEMP_MARK in n], os.listdir(folder)
    if not out.exists():
        assert not (folder / (out.name + ".json")).exists()
        return
    record = json.loads(pq.read_schema(out).metadata[RECORD_KEY.encode()])
    rows = pq.read_table(out).column("partition").to_pylist()
    assert record["partition_counts"] == partition_counts(rows)
    assert open_scored(out).sidecar["partition_counts"] == record["partition_counts"]
    copy = folder / (out.name + ".json")
    if copy.exists():  # the copy, with the timings the file leaves out
        assert stable_record(json.loads(copy.read_text())) == record


class Faults:
    """Raise ENOSPC at the ``k``-th write step: creating a temporary file, writing a Parquet
    batch, closing a Parquet file, writing text, renaming into place."""

    def __init__(self, monkeypatch, k: int) -> None:
        self.k, self.seen = k, 0
        for owner, name in [(tempfile, "mkstemp"), (os, "replace"),
                            (pq.ParquetWriter, "write_table"), (pq.ParquetWriter, "close"),
                            (pathlib.Path, "write_text")]:
            monkeypatch.setattr(owner, name, self.wrap(getattr(owner, name)))

    def wrap(self, real):
        def step(*args, **kwargs):
            self.seen += 1
            if self.seen == self.k:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(*args, **kwargs)
        return step


def test_a_full_disk_at_every_write_step(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = embedding_corpus(tmp_path / "in.parquet")
    out = tmp_path / "out" / "scored.parquet"
    # the earlier run: another cut, so its counts differ from the new run's
    assert main(["score", str(source), "-o", str(out), *CLIP, "--clean-above", "0.99",
                 "--noisy-below", "0.98"]) == 0
    earlier = {p.name: p.read_bytes() for p in out.parent.iterdir()}
    capsys.readouterr()
    outcomes = []
    for k in range(1, 40):
        shutil.rmtree(out.parent)
        out.parent.mkdir()
        for name, data in earlier.items():
            (out.parent / name).write_bytes(data)
        with monkeypatch.context() as patch:
            faults = Faults(patch, k)
            code = main(["score", str(source), "-o", str(out), *CLIP])
        _, err = capsys.readouterr()
        outcomes.append(code)
        if faults.seen < k:  # every step passed: the run is complete
            assert code == 0
            break
        if code != 0:
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1, err
            assert "No space left on device" in lines[0] and "Traceback" not in err
        _pairing_holds(out)
    assert outcomes[-1] == 0 and outcomes.count(2) >= 6, outcomes


def _can_mount(folder: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20k", "tmpfs", str(folder)],
                          capture_output=True)
    if done.returncode != 0:
        return False
    subprocess.run(["umount", str(folder)], check=True)
    return True


def test_a_small_tmpfs_20_to_44_kb(tmp_path, capsys, monkeypatch):
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _can_mount(disk):
        pytest.skip("mounting a tmpfs needs root and mount permission")
    monkeypatch.chdir(tmp_path)
    source = embedding_corpus(tmp_path / "in.parquet", n=60, dim=16)
    earlier = tmp_path / "earlier" / "scored.parquet"
    assert main(["score", str(source), "-o", str(earlier), *CLIP, "--clean-above", "0.99",
                 "--noisy-below", "0.98"]) == 0
    capsys.readouterr()
    codes = {}
    for size in range(20, 46, 2):
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}k", "tmpfs", str(disk)],
                       check=True)
        try:
            for name in (earlier.name, earlier.name + ".json"):
                try:
                    shutil.copy(earlier.parent / name, disk / name)
                except OSError:  # the disk is too small for the earlier run's files
                    (disk / name).unlink(missing_ok=True)
            code = main(["score", str(source), "-o", str(disk / "scored.parquet"), *CLIP])
            _, err = capsys.readouterr()
            codes[size] = code
            assert code in (0, 2), err
            if code == 2:
                lines = err.strip().splitlines()
                assert len(lines) == 1 and "Traceback" not in err, err
            if (disk / "scored.parquet").exists() and RECORD_KEY.encode() in (
                    pq.read_schema(disk / "scored.parquet").metadata or {}):
                _pairing_holds(disk / "scored.parquet")
            else:  # the earlier run's pair, or a copy cut short by the full disk
                assert not [n for n in os.listdir(disk) if TEMP_MARK in n]
        finally:
            gc.collect()  # files the run left to the garbage collector
            if subprocess.run(["umount", str(disk)]).returncode != 0:
                subprocess.run(["umount", "-l", str(disk)], check=True)
    assert 2 in codes.values(), codes


# ---------------------------------------------------------------------- kill -9 and SIGTERM


def _slow_corpus(path: Path) -> Path:
    """Pairs with a large incompressible column, so that writing the output takes a while."""
    n, dim = 20_000, 8
    rng = np.random.default_rng(0)
    image = rng.normal(size=(n, dim)).astype(np.float32)
    text = image + 0.2 * rng.normal(size=(n, dim)).astype(np.float32)
    blob = [rng.bytes(4096) for _ in range(n)]
    pq.write_table(pa.table({
        "id": [f"p{i}" for i in range(n)], "caption": [f"caption {i}" for i in range(n)],
        "img": pa.array(list(image), pa.list_(pa.float32(), dim)),
        "txt": pa.array(list(text), pa.list_(pa.float32(), dim)),
        "blob": blob}), path, compression="none")
    return path


def _score(source: Path, out: Path, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ncclean", "score", str(source), "-o", str(out), *CLIP,
         "--no-pseudo-captions", "--significance", "off"],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})


def _wait_for_temp(process: subprocess.Popen, folder: Path, timeout: float = 120) -> Path | None:
    """The output's temporary file once it holds data (not the writability probe)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and process.poll() is None:
        for entry in os.scandir(folder) if folder.exists() else []:
            if TEMP_MARK in entry.name and entry.name.endswith(".tmp"):
                try:
                    if entry.stat().st_size > 100_000:
                        return Path(entry.path)
                except FileNotFoundError:
                    pass
        time.sleep(0.002)
    return None


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill -9", "SIGTERM"])
def test_killed_during_the_write_then_a_rerun_leaves_nothing_of_ours(tmp_path, how):
    source = _slow_corpus(tmp_path / "in.parquet")
    folder = tmp_path / "fresh" / "out"
    out = folder / "scored.parquet"
    process = _score(source, out, tmp_path)
    temp = _wait_for_temp(process, folder)
    if temp is None:
        process.kill()
        pytest.skip("the write finished before its temporary file could be caught")
    process.send_signal(how)
    _, err = process.communicate(timeout=120)
    if how == signal.SIGTERM:
        assert process.returncode == 143, err
        assert err.strip().splitlines()[-1] == (
            "ncclean: error: interrupted: ncclean score wrote nothing; partial files removed")
        assert not (tmp_path / "fresh").exists()  # the folders it created, empty, are gone
    else:
        assert process.returncode == -signal.SIGKILL
        assert temp.exists()  # what kill -9 leaves; the next run removes it
    rerun = _score(source, out, tmp_path)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert sorted(os.listdir(folder)) == ["scored.parquet", "scored.parquet.json"]
    assert pq.read_metadata(out).num_rows == 20_000
