import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean.data.corpus import read_corpus
from ncclean.data.results import PARTITIONS, PairResults, partition_counts, write_results
from tests.helpers import png_bytes, write_parquet


@pytest.fixture
def corpus(tmp_path):
    path = write_parquet(tmp_path / "in.parquet", {
        "id": ["a", "b", "c", "d", "e"],
        "image": [png_bytes((i * 40, 0, 0)) for i in range(5)],
        "caption": ["red", "blue", "", "green", "grey"],
        "clean_prob": [9.0] * 5,  # an earlier run's column: replaced, not duplicated
    })
    return read_corpus(path)


def results(n=5, **overrides):
    base = dict(
        clean_prob=np.array([0.9, 0.1, 0.5, 0.4, 0.8]),
        partition=np.array(["clean_significant", "noisy", "noisy", "vague",
                            "clean_insignificant"]),
        significance=np.array([1.2, 0.3, 0.0, 0.9, 0.7]),
        pseudo_caption_row=np.array([-1, 3, 0, -1, -1]),
        pseudo_caption_score=np.array([0, 0.7, 0.9, 0, 0]),
        method_columns={"gmm_loss": np.arange(n, dtype=np.float64),
                        "gmm_label": np.array([1, 0, 0, 0, 1])},
    )
    return PairResults(**(base | overrides))


def test_contract_columns_order_types_and_nulls(corpus, tmp_path):
    out = write_results(corpus, tmp_path / "scored.parquet", results(), {"method": "gmm"})
    table = pq.read_table(out)
    assert table.column_names == ["id", "image", "caption", "clean_prob", "partition",
                                  "significance", "pseudo_caption", "pseudo_caption_id",
                                  "pseudo_caption_score", "invalid_reason", "gmm_loss",
                                  "gmm_label"]
    assert str(table.schema.field("clean_prob").type) == "float"
    rows = table.to_pylist()
    assert rows[1]["pseudo_caption"] == "green" and rows[1]["pseudo_caption_id"] == "d"
    assert rows[1]["pseudo_caption_score"] == pytest.approx(0.7)
    assert rows[0]["pseudo_caption"] is None and rows[0]["pseudo_caption_score"] is None
    # Row c has an empty caption: invalid, whatever the method said about it.
    assert rows[2]["partition"] == "invalid" and rows[2]["invalid_reason"] == "empty caption"
    assert rows[2]["clean_prob"] is None and rows[2]["gmm_loss"] is None
    assert rows[2]["pseudo_caption"] is None
    assert [r["id"] for r in rows] == ["a", "b", "c", "d", "e"]


def test_sidecar_counts_agree_with_the_file(corpus, tmp_path):
    out = write_results(corpus, tmp_path / "scored.parquet", results(), {"method": "gmm",
                                                                        "seed": 0})
    sidecar = json.loads((tmp_path / "scored.parquet.json").read_text())
    assert sidecar["method"] == "gmm" and sidecar["n_rows"] == 5
    assert sidecar["partition_counts"] == partition_counts(pq.read_table(out).column("partition")
                                                           .combine_chunks())
    assert sidecar["partition_counts"]["invalid"] == 1
    assert list(sidecar["partition_counts"]) == list(PARTITIONS)
    assert sidecar["invalid_counts"] == {"empty caption": 1}


@pytest.mark.parametrize("bad, message", [
    (dict(clean_prob=np.array([0.9, 1.1, 0.5, 0.4, 0.8])), r"\[0, 1\]"),
    (dict(partition=np.array(["clean", "noisy", "noisy", "vague", "vague"])), "unknown partition"),
    (dict(clean_prob=np.array([0.5])), "1 values for 5 rows"),
])
def test_contract_violations_are_caught(corpus, tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        write_results(corpus, tmp_path / "x.parquet", results(**bad), {})
    assert not (tmp_path / "x.parquet").exists()


def test_nan_on_an_invalid_row_is_fine(corpus, tmp_path):
    write_results(corpus, tmp_path / "x.parquet",
                  results(clean_prob=np.array([0.9, 0.1, np.nan, 0.4, 0.8])), {})


def test_the_run_record_is_in_the_parquet_itself(corpus, tmp_path):
    from ncclean.data.results import RECORD_KEY

    out = write_results(corpus, tmp_path / "scored.parquet", results(), {"method": "gmm"})
    inside = json.loads(pq.read_schema(out).metadata[RECORD_KEY.encode()])
    copy = json.loads((tmp_path / "scored.parquet.json").read_text())
    assert inside == copy and inside["n_rows"] == 5 and inside["method"] == "gmm"


def test_a_failed_json_copy_leaves_no_older_copy_beside_the_new_file(corpus, tmp_path,
                                                                     monkeypatch):
    import errno

    from ncclean.data import results as results_module
    from ncclean.errors import OutputError

    out = tmp_path / "scored.parquet"
    (tmp_path / "scored.parquet.json").write_text(json.dumps({"method": "an older run"}))

    def full(*args, **kwargs):
        raise OutputError(f"cannot write {out}.json: {os.strerror(errno.ENOSPC)}")

    monkeypatch.setattr(results_module, "write_json", full)
    with pytest.raises(OutputError):
        write_results(corpus, out, results(), {"method": "gmm"})
    assert not (tmp_path / "scored.parquet.json").exists()
    from ncclean.data.scored import open_scored

    assert open_scored(out).sidecar["method"] == "gmm"
