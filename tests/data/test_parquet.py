import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean.data.parquet import (
    TEMP_MARK,
    atomic_path,
    check_output_path,
    forget_created_folders,
    is_write_error,
    make_folder,
    open_pairs,
    probe_writable,
    remove_created_folders,
    remove_stale_temps,
    sidecar_path,
    write_json,
    write_pairs,
)
from ncclean.errors import (
    EmptyInputError,
    InputNotFoundError,
    NotParquetError,
    OutputError,
    SchemaError,
)


def _table(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)),
                     "caption": [f"caption {i}" for i in range(start, start + n)]})


def test_one_file_and_a_folder_of_shards(tmp_path):
    single = tmp_path / "one.parquet"
    pq.write_table(_table(5), single)
    assert open_pairs(single).n_rows == 5

    folder = tmp_path / "shards"
    (folder / "sub").mkdir(parents=True)
    pq.write_table(_table(3, 0), folder / "part-0.parquet")
    pq.write_table(_table(4, 3), folder / "sub" / "part-1.parquet")
    pq.write_table(_table(9, 100), folder / "_temporary.parquet")  # skipped, like Spark's
    source = open_pairs(folder)
    assert source.n_rows == 7
    assert [s.first_row for s in source.shards] == [0, 3]
    rows = [(first, batch.num_rows) for _, first, batch in source.iter_batches(["id"])]
    assert rows == [(0, 3), (3, 4)]
    assert source.read_columns(["id"]).column("id").to_pylist() == list(range(7))


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(InputNotFoundError, match="no such file or folder"):
        open_pairs(tmp_path / "nope.parquet")


@pytest.mark.parametrize("content", [b"", b"id,caption\n1,a cat\n"])
def test_a_file_that_is_not_parquet(tmp_path, content):
    path = tmp_path / "pairs.parquet"
    path.write_bytes(content)
    with pytest.raises(NotParquetError, match="not a readable Parquet file"):
        open_pairs(path)


def test_zero_rows_and_empty_folder(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(_table(0), path)
    with pytest.raises(EmptyInputError, match="no rows"):
        open_pairs(path)
    (tmp_path / "folder").mkdir()
    with pytest.raises(EmptyInputError, match="no .parquet files"):
        open_pairs(tmp_path / "folder")


def test_shards_with_different_schemas_are_refused(tmp_path):
    pq.write_table(_table(2), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": ["x"], "caption": ["y"]}), tmp_path / "b.parquet")
    with pytest.raises(SchemaError, match="b.parquet"):
        open_pairs(tmp_path)


def test_write_pairs_replaces_in_place_and_appends(tmp_path):
    source_path = tmp_path / "in.parquet"
    pq.write_table(_table(10), source_path, row_group_size=3)
    source = open_pairs(source_path)
    out = write_pairs(source, tmp_path / "out" / "scored.parquet", {
        "caption": pa.array([f"new {i}" for i in range(10)]),
        "clean_prob": pa.array([i / 10 for i in range(10)], pa.float32()),
    }, batch_rows=4)
    table = pq.read_table(out)
    assert table.column_names == ["id", "caption", "clean_prob"]
    assert table.column("id").to_pylist() == list(range(10))
    assert table.column("caption").to_pylist()[7] == "new 7"
    assert table.schema.field("clean_prob").type == pa.float32()


def test_write_pairs_checks_lengths(tmp_path):
    pq.write_table(_table(3), tmp_path / "in.parquet")
    source = open_pairs(tmp_path / "in.parquet")
    with pytest.raises(ValueError, match="2 values for 3 rows"):
        write_pairs(source, tmp_path / "out.parquet", {"x": pa.array([1, 2])})


def test_refuses_to_overwrite_the_input(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(_table(3), path)
    source = open_pairs(path)
    with pytest.raises(OutputError, match="is the input file"):
        check_output_path(tmp_path / "." / "in.parquet", source)
    folder = tmp_path / "shards"
    folder.mkdir()
    pq.write_table(_table(3), folder / "a.parquet")
    with pytest.raises(OutputError, match="inside the input folder"):
        check_output_path(folder / "out.parquet", open_pairs(folder))
    with pytest.raises(OutputError, match="is a folder"):
        check_output_path(folder)
    assert path.read_bytes()[:4] == b"PAR1"


def test_atomic_path_leaves_nothing_behind_on_failure(tmp_path):
    dest = tmp_path / "out.parquet"
    dest.write_text("previous")
    with pytest.raises(RuntimeError), atomic_path(dest) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash while writing")
    assert dest.read_text() == "previous"
    assert os.listdir(tmp_path) == ["out.parquet"]


def test_atomic_path_replaces_on_success_with_a_readable_mode(tmp_path):
    dest = tmp_path / "out.json"
    write_json(dest, {"a": 1, "path": tmp_path})
    assert json.loads(dest.read_text())["a"] == 1
    assert dest.stat().st_mode & 0o044  # not mkstemp's private 0600
    assert sidecar_path(tmp_path / "scored.parquet").name == "scored.parquet.json"


# ------------------------------------------- temp files of ours, probes, folders (issue 40.6-8)


def test_temp_files_carry_our_mark_and_pid(tmp_path):
    dest = tmp_path / "out.parquet"
    with atomic_path(dest) as tmp:
        assert tmp.name.startswith(f".out.parquet{TEMP_MARK}{os.getpid()}-")
        assert tmp.name.endswith(".tmp") and tmp.parent == tmp_path
        tmp.write_text("x")
    assert sorted(os.listdir(tmp_path)) == ["out.parquet"]


def test_stale_temps_of_dead_processes_are_removed_live_ones_kept(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(done.stdout)  # that process has exited
    stale = tmp_path / f".out.parquet{TEMP_MARK}{dead}-abc123.tmp"
    live = tmp_path / f".out.parquet{TEMP_MARK}{os.getpid()}-def456.tmp"
    other = tmp_path / ".out.parquet.zz9.tmp"  # not ours: no mark
    neighbour = tmp_path / f".other.parquet{TEMP_MARK}{dead}-abc123.tmp"
    for path in (stale, live, other, neighbour):
        path.write_bytes(b"partial")
    write_json(tmp_path / "out.parquet", {"a": 1})  # any write to out.parquet cleans up
    left = sorted(os.listdir(tmp_path))
    assert stale.name not in left
    assert {live.name, other.name, neighbour.name, "out.parquet"} == set(left)
    assert remove_stale_temps(tmp_path / "other.parquet") == [neighbour]


def test_output_folder_is_probed_before_any_work(tmp_path, monkeypatch):
    import errno
    import tempfile

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OutputError, match="cannot write to .*Read-only file system"):
        probe_writable(tmp_path / "out.parquet")
    with pytest.raises(OutputError, match="Read-only file system"):
        check_output_path(tmp_path / "sub" / "out.parquet")


def test_folders_a_failed_run_created_are_removed_if_empty(tmp_path):
    forget_created_folders()
    kept = tmp_path / "kept"
    kept.mkdir()
    check_output_path(tmp_path / "a" / "b" / "out.parquet")
    check_output_path(kept / "out.parquet")
    make_folder(tmp_path / "full")
    (tmp_path / "full" / "file").write_text("x")
    removed = remove_created_folders()
    assert set(removed) == {tmp_path / "a", tmp_path / "a" / "b"}
    assert kept.is_dir() and (tmp_path / "full").is_dir() and not (tmp_path / "a").exists()


def test_write_errors_become_one_output_error(tmp_path):
    import errno

    dest = tmp_path / "out.json"
    with pytest.raises(OutputError, match="cannot write .*out.json: No space left"), \
            atomic_path(dest) as tmp:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert os.listdir(tmp_path) == []
    assert is_write_error(OSError("[Errno 28] Error writing bytes: No space left on device"))
    assert not is_write_error(OSError(errno.ENOENT, "No such file"))


def test_write_pairs_adds_key_value_metadata(tmp_path):
    write_parquet_table = pq.write_table
    write_parquet_table(_table(3), tmp_path / "in.parquet")
    out = write_pairs(open_pairs(tmp_path / "in.parquet"), tmp_path / "out.parquet", {},
                      metadata={"ncclean": '{"run": 1}'})
    assert pq.read_schema(out).metadata[b"ncclean"] == b'{"run": 1}'


def test_a_file_written_from_a_scored_one_does_not_inherit_its_run_record(tmp_path):
    from ncclean.data.parquet import RECORD_KEY

    table = _table(3).replace_schema_metadata({RECORD_KEY: '{"run": 1}', "other": "kept"})
    pq.write_table(table, tmp_path / "scored.parquet")
    out = write_pairs(open_pairs(tmp_path / "scored.parquet"), tmp_path / "noisy.parquet", {})
    assert pq.read_schema(out).metadata == {b"other": b"kept"}
