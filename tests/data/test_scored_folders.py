"""A folder of output shards read back by ``check``, ``split`` and ``retrain`` (issue 60): a
finished sharded run is read with its record, an unfinished one is refused with one line that
says how to finish it, and a hand-made folder of scored Parquet is read as a hand-made file is."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from tests.cli.test_contract import one_line, run
from tests.pipeline.corpora import vector_table, write_shards

VECTORS = ["--image-emb-col", "img", "--text-emb-col", "txt"]


@pytest.fixture
def sharded(capsys, tmp_path, monkeypatch):
    """A finished sharded run's folder, ``out/`` (3 shards, 240 rows), written from ``tmp_path``
    (the folder 'ncclean score' remembers its last output in)."""
    monkeypatch.chdir(tmp_path)
    write_shards(vector_table(240), tmp_path / "in", 3)
    code, _, err = run(capsys, "score", "in", "-o", "out/", *VECTORS, "--no-cache")
    assert code == 0, err
    assert (tmp_path / "out" / "ncclean.json").exists()
    return tmp_path / "out"


def copy_of(folder, name):
    target = folder.parent / name
    shutil.copytree(folder, target)
    return target


def test_a_finished_sharded_folder_is_checked_and_split_whole(capsys, sharded):
    code, out, err = run(capsys, "check", sharded, "--json")
    assert code == 0, err
    assert sum(json.loads(out)["partition_counts"].values()) == 240
    code, _, err = run(capsys, "split", sharded, "-o", sharded.parent / "parts")
    assert code == 0, err
    assert sum(pq.read_metadata(p).num_rows for p in (sharded.parent / "parts").glob("*.parquet")) \
        == 240


def test_an_interrupted_sharded_run_is_refused_by_check_and_split(capsys, sharded):
    no_record = copy_of(sharded, "no_record")  # killed before the last shard: no record yet
    (no_record / "ncclean.json").unlink()
    sorted(no_record.glob("*.parquet"))[-1].unlink()
    short = copy_of(sharded, "short")  # a shard gone after the record was written
    sorted(short.glob("*.parquet"))[0].unlink()
    for folder in (no_record, short):
        for command in (["check", folder], ["split", folder, "-o", folder.parent / "sp"]):
            code, _, err = run(capsys, *command)
            line = one_line(err)
            assert code == 2 and "unfinished 'ncclean score' run" in line, line
            assert "rerun the same 'ncclean score' command to finish it" in line
            assert "160 rows" in line
            assert not (folder.parent / "sp").exists()
    code, _, err = run(capsys, "check", short)
    assert "its ncclean.json counts 240 rows" in err


def test_a_shard_of_another_fit_under_a_finished_record_is_refused(capsys, sharded):
    # a rerun with other options, interrupted: the old record, one shard of the new fit
    shard = sorted(sharded.glob("*.parquet"))[1]
    table = pq.read_table(shard)
    meta = dict(table.schema.metadata) | {b"ncclean.fit_hash": b"another"}
    pq.write_table(table.replace_schema_metadata(meta), shard)
    code, _, err = run(capsys, "check", sharded)
    assert code == 2 and "written by another fit" in one_line(err)


def test_a_folder_with_more_rows_than_its_record_counts_is_refused(capsys, sharded):
    pq.write_table(pq.read_table(sorted(sharded.glob("*.parquet"))[0]), sharded / "extra.parquet")
    code, _, err = run(capsys, "check", sharded)
    assert code == 2 and "320 rows, more than the 240" in one_line(err)


def test_a_hand_made_folder_of_scored_parquet_is_read_without_a_record(capsys, sharded):
    hand_made = sharded.parent / "hand_made"
    hand_made.mkdir()
    for shard in sorted(sharded.glob("*.parquet"))[:2]:
        pq.write_table(pq.read_table(shard).replace_schema_metadata(None), hand_made / shard.name)
    code, out, err = run(capsys, "check", hand_made, "--json")
    assert code == 0, err
    assert sum(json.loads(out)["partition_counts"].values()) == 160


def test_retrain_on_a_sharded_folder_reads_the_vector_columns_it_is_given(capsys, sharded):
    code, out, err = run(capsys, "retrain", sharded, *VECTORS, "--steps", 3, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["image_encoder"], summary["text_encoder"]) == ("column", "column")
    assert summary["n_valid"] + summary["n_test"] == 240
    # with no input: the folder the last score run wrote, the same
    code, again, err = run(capsys, "retrain", *VECTORS, "--steps", 3, "--json")
    assert code == 0, err
    assert json.loads(again)["arms"]["cleaned"]["strict"] == summary["arms"]["cleaned"]["strict"]


def test_retrain_with_nothing_named_after_a_sharded_run_reads_its_record(capsys, sharded):
    code, _, err = run(capsys, "retrain", "--steps", 3)  # the folder's record names the columns
    assert code == 0, err
