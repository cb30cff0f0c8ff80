"""One pipeline for every size and input: a single file goes through the same entry, fit and
write as a folder of shards, and a corpus no larger than the fit sample is scored alike in one
file or in shards, fitted in place (no sample copy)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ncclean.pipeline.score
import ncclean.pipeline.sharded
from ncclean.api import score
from ncclean.data.schema import Columns
from ncclean.options import ScaleOptions
from tests.pipeline.corpora import vector_table, write_shards

COLUMNS = Columns(image_emb="img", text_emb="txt")
PARAMS = {"clip": None, "gmm": {"epochs": "2", "warmup_epochs": "1"}}
SCORED = ("clean_prob", "partition", "significance", "pseudo_caption", "pseudo_caption_id",
          "pseudo_caption_score")


def spy(monkeypatch, module, name: str) -> list:
    """Record the arguments of every call of ``module.name`` (still called)."""
    calls: list = []
    real = getattr(module, name)

    def recorded(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return calls


def test_one_file_goes_through_the_pipeline_and_is_fitted_in_place(tmp_path, monkeypatch):
    pq.write_table(vector_table(120), tmp_path / "in.parquet")
    entered = spy(monkeypatch, ncclean.pipeline.sharded, "score_pipeline")
    fitted = spy(monkeypatch, ncclean.pipeline.score, "fit_corpus")
    sampled = spy(monkeypatch, ncclean.pipeline.sharded, "write_sample")
    summary = score(tmp_path / "in.parquet", tmp_path / "out.parquet", "clip", columns=COLUMNS,
                    seed=1, cache_dir=False)
    assert len(entered) == 1 and entered[0][0].input == tmp_path / "in.parquet"
    assert [call[0].input for call in fitted] == [tmp_path / "in.parquet"]  # in place
    assert not sampled and summary.n_pairs == 120
    record = json.loads((tmp_path / "out.parquet.json").read_text())
    assert "fit" not in record and record["n_rows"] == 120  # written as fitted: no fit kept


def test_a_file_without_ids_no_larger_than_the_sample_needs_none(tmp_path):
    pq.write_table(vector_table(120).drop_columns(["id"]), tmp_path / "in.parquet")
    summary = score(tmp_path / "in.parquet", tmp_path / "out.parquet", "clip", columns=COLUMNS,
                    seed=1, cache_dir=False, scale=ScaleOptions(fit_sample=500))
    assert summary.n_pairs == 120
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 120


@pytest.mark.parametrize("method", ["clip", "gmm"])
def test_shards_no_larger_than_the_sample_are_scored_as_one_file(method, tmp_path,
                                                                  monkeypatch):
    table = vector_table(240, seed=4)
    pq.write_table(table, tmp_path / "one.parquet")
    write_shards(table, tmp_path / "two", 2)
    score(tmp_path / "one.parquet", tmp_path / "one-out.parquet", method, PARAMS[method],
          columns=COLUMNS, seed=1, cache_dir=False)
    fitted = spy(monkeypatch, ncclean.pipeline.score, "fit_corpus")
    sampled = spy(monkeypatch, ncclean.pipeline.sharded, "write_sample")
    score(tmp_path / "two", tmp_path / "two-out", method, PARAMS[method], columns=COLUMNS,
          seed=1, cache_dir=False, scale=ScaleOptions(fit_sample=1000))
    assert [call[0].input for call in fitted] == [tmp_path / "two"] and not sampled
    one = pq.read_table(tmp_path / "one-out.parquet").sort_by("id")
    shards = sorted((tmp_path / "two-out").glob("*.parquet"))
    assert [p.name for p in shards] == ["part-000.parquet", "part-001.parquet"]
    two = pa.concat_tables([pq.read_table(p) for p in shards]).sort_by("id")
    assert two.column("id").equals(one.column("id"))
    names = [*SCORED, *(c for c in one.column_names if c.startswith(f"{method}_"))]
    assert len(names) > len(SCORED)  # the method's own columns too
    for name in names:
        assert two.column(name).equals(one.column(name)), name
    assert pc.sum(pc.equal(one.column("partition"), "noisy")).as_py() > 0  # something to compare
    assert one.column("pseudo_caption").null_count < one.num_rows


def test_the_plan_is_read_from_the_row_counts_and_the_sample_size(tmp_path):
    from ncclean.data.shards import list_shards
    from ncclean.pipeline.sharded import FitPlan, plan_fit

    write_shards(vector_table(200), tmp_path / "in", 2)
    shards = list_shards(tmp_path / "in")

    def plan(to_folder=True, columns=COLUMNS, **scale):
        return plan_fit(tmp_path / "in", shards, ScaleOptions(**scale), columns, to_folder)

    assert plan(False) == FitPlan(every_pair=True, in_place=True, kept=False)
    assert plan(fit_sample=200) == FitPlan(every_pair=True, in_place=True, kept=True)
    assert plan(False, fit_sample=200, save_fit=tmp_path / "fit") == plan(fit_sample=200)
    assert plan(False, fit_sample=199) == FitPlan(every_pair=False, in_place=False, kept=True)
    # images without vectors: embedded shard by shard before a fit that is kept
    assert plan(columns=Columns()) == FitPlan(every_pair=True, in_place=False, kept=True)
    assert plan(False, columns=Columns()) == plan(False)  # the towers embed them as read
