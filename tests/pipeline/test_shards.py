"""Input shards, the fit sample's keys, completion marks."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean.data.shards import (
    completion_metadata,
    list_shards,
    output_complete,
    pair_keys,
    smallest_keys,
)
from ncclean.errors import EmptyInputError


def test_shards_are_listed_in_order_with_unique_stems(tmp_path):
    for name in ("b/x.parquet", "a/x.parquet", "_tmp/y.parquet", "c.parquet"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        pq.write_table(pa.table({"a": [1]}), tmp_path / name)
    shards = list_shards(tmp_path)
    assert [s.stem for s in shards] == ["a/x", "b/x", "c"]
    assert {s.kind for s in shards} == {"parquet"}
    with pytest.raises(EmptyInputError):
        list_shards(_empty(tmp_path))


def _empty(tmp_path):
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def test_the_sample_is_the_smallest_keys_whatever_the_order():
    keys = pair_keys([f"p{k}" for k in range(1000)])
    assert keys.dtype == np.uint64 and len(np.unique(keys)) == 1000
    assert np.array_equal(pair_keys(["p1", 7]), pair_keys(pa.array(["p1", "7"])))
    forward = backward = None
    for block in np.array_split(keys, 7):
        forward = smallest_keys(block, 100, forward)
    for block in np.array_split(keys[::-1], 3):
        backward = smallest_keys(block, 100, backward)
    assert np.array_equal(forward, backward)
    assert np.array_equal(forward, np.sort(keys)[:100])


def test_sample_membership_is_a_search_of_the_sorted_sample():
    from ncclean.data.shards import find_sorted

    def _members(keys, wanted):
        at, found = find_sorted(wanted, keys)
        assert np.array_equal(wanted[at[found]], keys[found])
        return found

    rng = np.random.default_rng(0)
    wanted = np.unique(rng.integers(0, 2**63, 1000, dtype=np.uint64))
    keys = np.concatenate([wanted[::3], rng.integers(0, 2**63, 500, dtype=np.uint64),
                           np.array([0, 2**64 - 1], dtype=np.uint64)])
    assert (_members(keys, wanted) == np.isin(keys, wanted)).all()
    assert _members(keys, wanted).sum() == len(wanted[::3])
    assert not _members(keys, wanted[:0]).any()


def test_an_output_is_complete_only_with_its_fit_and_row_count(tmp_path):
    path = tmp_path / "o.parquet"
    assert not output_complete(path, "abc", 3)
    table = pa.table({"a": [1, 2, 3]})
    pq.write_table(table.replace_schema_metadata(completion_metadata("abc", 3)), path)
    assert output_complete(path, "abc", 3)
    assert not output_complete(path, "abd", 3)
    assert not output_complete(path, "abc", 4)
    path.write_bytes(b"not parquet")
    assert not output_complete(path, "abc", 3)


def saved_hf_dataset(folder, table: pa.Table, files: int = 2):
    """The layout ``datasets.Dataset.save_to_disk`` writes: Arrow IPC streams named
    ``data-0000k-of-0000n.arrow`` listed in ``state.json``, beside ``dataset_info.json``."""
    folder.mkdir(parents=True)
    names = [f"data-{k:05d}-of-{files:05d}.arrow" for k in range(files)]
    bounds = np.linspace(0, table.num_rows, files + 1).astype(int)
    for k, name in enumerate(names):
        with pa.OSFile(str(folder / name), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(bounds[k], bounds[k + 1] - bounds[k]))
    (folder / "state.json").write_text(json.dumps(
        {"_data_files": [{"filename": name} for name in names], "_split": "train"}))
    (folder / "dataset_info.json").write_text("{}")
    return folder


def test_a_saved_hugging_face_dataset_scores_shard_by_shard(tmp_path):
    from ncclean.api import score
    from ncclean.data.schema import Columns
    from tests.pipeline.corpora import vector_table

    table = vector_table(200)
    saved_hf_dataset(tmp_path / "hf" / "train", table)
    shards = list_shards(tmp_path / "hf")
    assert [(s.stem, s.kind) for s in shards] == [
        ("train/data-00000-of-00002", "arrow"), ("train/data-00001-of-00002", "arrow")]
    summary = score(tmp_path / "hf", tmp_path / "out", "clip", cache_dir=False,
                    columns=Columns(image_emb="img", text_emb="txt"))
    assert summary.n_pairs == 200
    out = pa.concat_tables([pq.read_table(tmp_path / "out" / f"{s.stem}.parquet")
                            for s in shards])
    assert out.column("id").equals(table.column("id"))


def test_a_saved_dataset_without_ids_is_keyed_by_shard_and_row(tmp_path, capsys):
    from tests.cli.test_contract import one_line, run
    from tests.pipeline.corpora import vector_table

    table = vector_table(200).drop_columns(["id"])
    saved_hf_dataset(tmp_path / "hf" / "train", table)
    args = ["--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache", "--method", "clip"]
    code, _, err = run(capsys, "score", tmp_path / "hf", *args)
    assert code == 2 and "a saved Hugging Face dataset, read shard by shard: give -o DIR" \
        in one_line(err)
    code, _, err = run(capsys, "score", tmp_path / "hf", "-o", tmp_path / "out", *args)
    assert code == 0, err
    first = pq.read_table(tmp_path / "out" / "train" / "data-00000-of-00002.parquet")
    assert first.column("id").to_pylist()[:2] == ["train/data-00000-of-00002/0",
                                                  "train/data-00000-of-00002/1"]
    second = pq.read_table(tmp_path / "out" / "train" / "data-00001-of-00002.parquet")
    assert first.num_rows + second.num_rows == 200
    assert first.column("txt").equals(table.column("txt").slice(0, first.num_rows))
