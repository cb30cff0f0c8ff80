import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean.data.parquet import (
    atomic_path,
    check_output_path,
    open_pairs,
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
