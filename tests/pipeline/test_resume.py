"""A sharded run resumes: complete output shards are skipped, the rest redone, and the result is
byte-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq

from ncclean.api import score
from ncclean.data.atomic import TEMP_MARK
from ncclean.data.schema import Columns
from ncclean.options import ScaleOptions
from tests.pipeline.corpora import vector_table, write_shards

COLUMNS = Columns(image_emb="img", text_emb="txt")


def outputs(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.parquet"))}


def cli(input, output, fit):
    return [sys.executable, "-m", "ncclean", "score", str(input), "-o", str(output),
            "--method", "clip", "--image-emb-col", "img", "--text-emb-col", "txt",
            "--fit", str(fit), "--no-cache", "--json"]


def test_killed_run_resumes_with_only_the_rest(tmp_path):
    write_shards(vector_table(1200), tmp_path / "in", 24)
    score(tmp_path / "in", tmp_path / "full", "clip", columns=COLUMNS, cache_dir=False,
          scale=ScaleOptions(save_fit=tmp_path / "fit", fit_sample=300))
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(cli(tmp_path / "in", tmp_path / "killed", tmp_path / "fit"),
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (tmp_path / "killed" / "part-000.parquet").exists() and process.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "killed").glob("*.parquet")}
    assert before, "the run was killed before it wrote a shard"
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()  # a process that is gone, as the killed run's is
    stale = tmp_path / "killed" / f".part-023.parquet{TEMP_MARK}{gone.pid}-x.tmp"
    if "part-023.parquet" not in before:  # as a kill in the middle of a write leaves it
        stale.write_bytes(b"half a file")
    result = subprocess.run(cli(tmp_path / "in", tmp_path / "killed", tmp_path / "fit"),
                            env=env, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout)["n_rows"] == 1200
    assert json.loads(result.stdout)["resumed"] == [len(before), 24]
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "killed").glob("*.parquet")}
    assert all(after[name] == stamp for name, stamp in before.items())  # not rewritten
    shards = json.loads((tmp_path / "killed" / "ncclean.json").read_text())["shards"]
    assert sum(s["skipped"] for s in shards) == len(before)
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "full")
    assert not list((tmp_path / "killed").glob(".*.tmp"))  # no half-written file left behind


def test_rerun_redoes_shards_of_another_fit_or_a_wrong_size(tmp_path):
    write_shards(vector_table(300), tmp_path / "in", 3)
    kwargs = {"columns": COLUMNS, "cache_dir": False}
    score(tmp_path / "in", tmp_path / "out", "clip", scale=ScaleOptions(fit_sample=100),
          **kwargs)
    first = outputs(tmp_path / "out")
    stale = tmp_path / "out" / "part-001.parquet"
    table = pq.read_table(stale)
    pq.write_table(table.slice(0, 10).replace_schema_metadata(table.schema.metadata), stale)
    score(tmp_path / "in", tmp_path / "out", "clip", scale=ScaleOptions(fit_sample=100),
          **kwargs)
    shards = json.loads((tmp_path / "out" / "ncclean.json").read_text())["shards"]
    assert [s["skipped"] for s in shards] == [True, False, True]
    assert outputs(tmp_path / "out") == first
    score(tmp_path / "in", tmp_path / "out", "clip", scale=ScaleOptions(fit_sample=101),
          **kwargs)  # another fit: every shard redone
    shards = json.loads((tmp_path / "out" / "ncclean.json").read_text())["shards"]
    assert not any(s["skipped"] for s in shards)


def test_resume_on_a_sharded_folder_does_not_say_it_starts_from_scratch(tmp_path, capsys):
    from ncclean.cli import main

    write_shards(vector_table(300), tmp_path / "in", 3)
    words = ["score", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--method", "clip",
             "--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]
    assert main(words) == 0
    capsys.readouterr()
    assert main([*words, "--resume"]) == 0  # every shard complete: all skipped
    err = capsys.readouterr().err
    assert "warning" not in err and "starting from scratch" not in err, err
    shards = json.loads((tmp_path / "out" / "ncclean.json").read_text())["shards"]
    assert all(s["skipped"] for s in shards)
    assert main(["score", str(tmp_path / "in" / "part-000.parquet"), "-o",
                 str(tmp_path / "one.parquet"), *words[4:], "--resume"]) == 0
    assert "nothing to resume; starting from scratch" in capsys.readouterr().err  # one pass
