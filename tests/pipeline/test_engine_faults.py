"""Two sharded runs into one folder (issue 60, problem 23): a run removes only the temporary files
and scratch folders of runs that are gone, never those of a live run writing beside it, and its
own working files live beside the output under its process id, not in the system temp folder."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq

from ncclean.cli import main
from tests.pipeline.corpora import vector_table, write_shards

VECTORS = ["--method", "clip", "--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]
TEMP_MARK, SCRATCH_MARK = ".ncclean-", ".ncclean-scratch-"  # ncclean.data.atomic's names


def _gone_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_a_run_keeps_a_live_runs_temporary_files_and_removes_a_dead_ones(capsys, tmp_path):
    write_shards(vector_table(300), tmp_path / "in", 3)
    out = tmp_path / "out"
    out.mkdir()
    live = os.getppid()  # a process that runs while this one does, as a second run would
    gone = _gone_pid()
    theirs = out / f".part-000.parquet{TEMP_MARK}{live}-abcd1234.tmp"
    theirs.write_bytes(b"another run, half-way through part-000")
    their_scratch = out / f"{SCRATCH_MARK}{live}-efgh"
    their_scratch.mkdir()
    dead = out / f".part-001.parquet{TEMP_MARK}{gone}-ijkl5678.tmp"
    dead.write_bytes(b"a killed run's")
    dead_scratch = out / f"{SCRATCH_MARK}{gone}-mnop"
    (dead_scratch / "fit").mkdir(parents=True)
    code = main([str(a) for a in ["score", tmp_path / "in", "-o", out, *VECTORS]])
    assert code == 0, capsys.readouterr().err
    assert theirs.read_bytes() == b"another run, half-way through part-000"
    assert their_scratch.is_dir()
    assert not dead.exists() and not dead_scratch.exists()
    assert sum(pq.read_metadata(out / f"part-00{k}.parquet").num_rows for k in range(3)) == 300


def test_a_shards_working_files_live_beside_its_output_under_the_runs_id(capsys, tmp_path,
                                                                          monkeypatch):
    import ncclean.data.parquet

    write_shards(vector_table(200), tmp_path / "in", 2)
    out = tmp_path / "out"
    regroup, scratches = ncclean.data.parquet.with_row_groups_of, []

    def watched(source, rows, scratch, *args, **kwargs):
        scratches.append(scratch)
        return regroup(source, rows, scratch, *args, **kwargs)

    monkeypatch.setattr(ncclean.data.parquet, "with_row_groups_of", watched)
    code = main([str(a) for a in ["score", tmp_path / "in", "-o", out, *VECTORS]])
    assert code == 0, capsys.readouterr().err
    assert len(scratches) == 2
    for scratch in map(str, scratches):  # what the next run can tell a dead run's by
        folder, name = os.path.split(scratch)
        assert folder == str(out) and name.startswith(f"{SCRATCH_MARK}{os.getpid()}-"), scratch
        assert not os.path.exists(scratch)
    assert sorted(os.listdir(out)) == ["ncclean.json", "part-000.parquet", "part-001.parquet"]
