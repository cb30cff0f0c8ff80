"""Input shards, the fit sample's keys, completion marks."""

from __future__ import annotations

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
    assert [s.stem for s in shards] == ["a__x", "b__x", "c"]
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
