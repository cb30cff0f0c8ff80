"""Reading a scored file back: partitions as codes, the sidecar, chosen rows."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean.data.results import CLEAN_SIGNIFICANT, INVALID, NOISY, PARTITIONS, VAGUE
from ncclean.data.scored import fetch_rows, open_scored
from ncclean.errors import SchemaError
from tests.helpers import write_parquet


@pytest.fixture
def scored(tmp_path):
    n = 90
    partition = [PARTITIONS[k % len(PARTITIONS)] for k in range(n)]
    path = write_parquet(tmp_path / "scored.parquet", {
        "id": [f"p{k}" for k in range(n)], "caption": [f"caption {k}" for k in range(n)],
        "partition": partition,
        "clean_prob": [None if p == INVALID else k / n for k, p in enumerate(partition)],
        "noisy_gt": [p == NOISY for p in partition]})
    (tmp_path / "scored.parquet.json").write_text(json.dumps({"method": "gmm"}))
    return path


def test_open_scored_reads_partitions_scores_truth_and_sidecar(scored):
    opened = open_scored(scored)
    assert opened.n_rows == 90 and opened.sidecar == {"method": "gmm"}
    assert opened.counts() == {name: 18 for name in PARTITIONS}
    assert list(opened.rows_in(VAGUE)[:2]) == [2, 7]
    assert opened.valid.sum() == 72 and np.isnan(opened.clean_prob[~opened.valid]).all()
    assert (opened.noisy_gt == (opened.partition == PARTITIONS.index(NOISY))).all()


def test_open_scored_refuses_what_is_not_a_scored_file(tmp_path):
    write_parquet(tmp_path / "raw.parquet", {"caption": ["a"], "clean_prob": [0.5]})
    with pytest.raises(SchemaError, match="not a scored file"):
        open_scored(tmp_path / "raw.parquet")
    write_parquet(tmp_path / "odd.parquet", {"partition": [CLEAN_SIGNIFICANT, "fine"],
                                             "clean_prob": [0.9, 0.8]})
    with pytest.raises(SchemaError, match="unknown partition values \\['fine'\\]"):
        open_scored(tmp_path / "odd.parquet")


def test_fetch_rows_streams_only_the_wanted_rows(scored):
    source = open_scored(scored).source
    got = fetch_rows(source, [5, 0, 89, 5], ["id", "caption", "nonexistent"])
    table = pq.read_table(scored, columns=["id", "caption"]).to_pylist()
    assert sorted(got) == [0, 5, 89]
    for row, values in got.items():
        assert values == table[row]


def test_the_record_in_the_file_wins_over_a_json_copy_of_another_run(tmp_path):
    from ncclean.data.parquet import open_pairs, write_pairs

    table = {"id": ["a", "b"], "partition": [CLEAN_SIGNIFICANT, NOISY], "clean_prob": [0.9, 0.1]}
    write_parquet(tmp_path / "in.parquet", table)
    out = write_pairs(open_pairs(tmp_path / "in.parquet"), tmp_path / "scored.parquet", {},
                      metadata={"ncclean": json.dumps({"method": "clip", "run": "new"})})
    (tmp_path / "scored.parquet.json").write_text(json.dumps({"method": "gmm", "run": "old"}))
    assert open_scored(out).sidecar == {"method": "clip", "run": "new"}
    # an older file with no record inside: its JSON sidecar is read
    assert open_scored(tmp_path / "in.parquet").sidecar == {}
    (tmp_path / "in.parquet.json").write_text(json.dumps({"method": "gmm"}))
    assert open_scored(tmp_path / "in.parquet").sidecar == {"method": "gmm"}


def test_non_numeric_clean_prob_is_bad_input(tmp_path):
    path = write_parquet(tmp_path / "s.parquet", {"partition": [NOISY, VAGUE],
                                                  "clean_prob": ["high", "low"]})
    with pytest.raises(SchemaError, match="clean_prob holds string, not numbers"):
        open_scored(path)
