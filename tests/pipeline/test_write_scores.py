"""``score --write scores``: the id column and ncclean's columns only, in input row order, joinable
on the id to exactly the ``--write all`` output's columns, from every writer (one pass, a fit
applied to one file or to shards, the ray engine), resumed without mixing the two forms, and
read back by split and check (retrain refuses in one line)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.cli import main
from ncclean.data.parquet import RECORD_KEY, WRITE_KEY
from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError, SchemaError
from ncclean.options import RunOptions, ScaleOptions
from tests.pipeline.corpora import vector_table, write_shards

COLUMNS = Columns(image_emb="img", text_emb="txt")
INPUT_COLUMNS = ["id", "caption", "img", "txt", "noisy_gt"]


def score(input, output, write, **kwargs):
    return api.score(input, output, "clip", columns=kwargs.pop("columns", COLUMNS),
                     cache_dir=False, write=write, **kwargs)


def assert_joins(scores_path, all_path) -> None:
    """The scores file is the all file's id and ncclean columns, row for row, and a join on the
    id (rows shuffled first) gives those columns exactly."""
    scores, full = pq.read_table(scores_path), pq.read_table(all_path)
    ncclean = [n for n in full.column_names if n not in INPUT_COLUMNS]
    assert scores.column_names == ["id", *ncclean]
    assert scores.column("id").equals(full.column("id"))  # same rows, same order
    assert scores.drop_columns("id").equals(full.select(ncclean))
    shuffled = scores.take(pa.array(np.random.default_rng(0).permutation(scores.num_rows)))
    joined = full.select(["id"]).join(shuffled, "id").sort_by("id")
    assert joined.select(ncclean).equals(full.sort_by("id").select(ncclean))


def test_one_pass_writes_the_id_and_ncclean_columns(tmp_path):
    pq.write_table(vector_table(200, seed=1), tmp_path / "in.parquet")
    score(tmp_path / "in.parquet", tmp_path / "all.parquet", "all")
    summary = score(tmp_path / "in.parquet", tmp_path / "scores.parquet", "scores")
    assert_joins(tmp_path / "scores.parquet", tmp_path / "all.parquet")
    scores = pq.read_table(tmp_path / "scores.parquet")
    assert {"clean_prob", "partition", "significance", "pseudo_caption", "clip_sim",
            "invalid_reason"} <= set(scores.column_names)
    metadata = scores.schema.metadata
    assert metadata[WRITE_KEY] == b"scores"
    assert WRITE_KEY not in pq.read_schema(tmp_path / "all.parquet").metadata
    record = json.loads(metadata[RECORD_KEY.encode()])
    assert record["write"] == "scores" and record["options"]["run"]["write"] == "scores"
    sidecar = json.loads((tmp_path / "scores.parquet.json").read_text())
    assert sidecar["write"] == "scores" and sidecar["partition_counts"] == record[
        "partition_counts"] == summary.partition_counts
    assert _data_bytes(tmp_path / "scores.parquet") < _data_bytes(tmp_path / "all.parquet") / 3


def _data_bytes(path) -> int:
    """The column data's size, without the run's record that both outputs carry alike."""
    meta = pq.ParquetFile(path).metadata
    return sum(meta.row_group(k).total_byte_size for k in range(meta.num_row_groups))


def test_a_fit_applied_to_one_file_writes_scores(tmp_path):
    pq.write_table(vector_table(400, seed=2), tmp_path / "in.parquet", row_group_size=100)
    scale = ScaleOptions(fit_sample=150)
    score(tmp_path / "in.parquet", tmp_path / "all.parquet", "all", scale=scale)
    score(tmp_path / "in.parquet", tmp_path / "scores.parquet", "scores", scale=scale)
    assert_joins(tmp_path / "scores.parquet", tmp_path / "all.parquet")
    assert json.loads((tmp_path / "scores.parquet.json").read_text())["write"] == "scores"


def test_shards_resume_and_a_changed_write_redoes_them(tmp_path):
    write_shards(vector_table(300, seed=3), tmp_path / "in", 3)
    scale = ScaleOptions(fit_sample=100)
    score(tmp_path / "in", tmp_path / "all", "all", scale=scale)
    score(tmp_path / "in", tmp_path / "out", "scores", scale=scale)
    names = sorted(p.name for p in (tmp_path / "all").glob("*.parquet"))
    assert names == sorted(p.name for p in (tmp_path / "out").glob("*.parquet"))
    for name in names:
        assert_joins(tmp_path / "out" / name, tmp_path / "all" / name)
    record = json.loads((tmp_path / "out" / "ncclean.json").read_text())
    assert record["write"] == "scores"

    def skipped():
        return [s["skipped"] for s in json.loads((tmp_path / "out" / "ncclean.json")
                                                 .read_text())["shards"]]

    first = {n: (tmp_path / "out" / n).read_bytes() for n in names}
    score(tmp_path / "in", tmp_path / "out", "scores", scale=scale)  # resumed: nothing to do
    assert skipped() == [True, True, True]
    assert {n: (tmp_path / "out" / n).read_bytes() for n in names} == first
    score(tmp_path / "in", tmp_path / "out", "all", scale=scale)  # another form: all redone
    assert skipped() == [False, False, False]
    for name in names:
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "all" / name).read_bytes()
    score(tmp_path / "in", tmp_path / "out", "scores", scale=scale)
    assert skipped() == [False, False, False]
    assert {n: (tmp_path / "out" / n).read_bytes() for n in names} == first


def test_ray_engine_writes_the_local_engines_scores(tmp_path):
    pytest.importorskip("ray")
    write_shards(vector_table(300, seed=5), tmp_path / "in", 2)
    score(tmp_path / "in", tmp_path / "local", "scores",
          scale=ScaleOptions(fit_sample=100, save_fit=tmp_path / "fit"))
    score(tmp_path / "in", tmp_path / "ray", "scores",
          scale=ScaleOptions(fit=tmp_path / "fit", engine="ray"))
    names = sorted(p.name for p in (tmp_path / "local").glob("*.parquet"))
    assert len(names) == 2
    for name in names:
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
        assert pq.read_schema(tmp_path / "ray" / name).names[:2] == ["id", "clean_prob"]


def test_no_id_column_is_refused_before_any_work(tmp_path, capsys):
    table = vector_table(50).drop_columns("id")
    pq.write_table(table, tmp_path / "in.parquet")
    with pytest.raises(BadOptionError, match="--write scores needs an id column.*--write all"):
        score(tmp_path / "in.parquet", tmp_path / "out.parquet", "scores")
    assert not (tmp_path / "out.parquet").exists()
    with pytest.raises(BadOptionError, match="'uid' is not in"):
        score(tmp_path / "in.parquet", tmp_path / "out.parquet", "scores",
              columns=Columns(image_emb="img", text_emb="txt", id="uid"))
    with pytest.raises(BadOptionError, match="--write must be all or scores"):
        RunOptions(write="ids")
    code = main(["score", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "out.parquet"),
                 "--image-emb-col", "img", "--text-emb-col", "txt", "--write", "scores",
                 "--no-cache"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--id-col" in err[0] and "--write all" in err[0]
    assert not (tmp_path / "out.parquet").exists()


def test_split_and_check_read_a_scores_file_and_retrain_refuses(tmp_path, capsys):
    pq.write_table(vector_table(200, seed=4), tmp_path / "in.parquet")
    scored = score(tmp_path / "in.parquet", tmp_path / "scores.parquet", "scores")
    split = api.split(tmp_path / "scores.parquet", tmp_path / "split",
                      html=tmp_path / "report.html")
    assert split.partition_counts == scored.partition_counts
    noisy = pq.read_table(split.files["noisy"])
    assert noisy.column_names[0] == "id" and "caption" not in noisy.column_names
    assert set(noisy.column("partition").to_pylist()) <= {"noisy"}
    assert "score with --write all to see them" in (tmp_path / "report.html").read_text()
    assert api.check(tmp_path / "scores.parquet", max_noisy=1.0).passed
    with pytest.raises(SchemaError, match="retrain needs the corpus's columns.*--write all"):
        api.retrain(tmp_path / "scores.parquet", tmp_path / "in.parquet", columns=COLUMNS)
    code = main(["retrain", str(tmp_path / "scores.parquet"), "--test",
                 str(tmp_path / "in.parquet"), "--image-emb-col", "img", "--text-emb-col", "txt"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--write all" in err[0]


def test_a_webdataset_folder_writes_scores_keyed_by_the_tar_keys(tmp_path):
    from tests.pipeline.test_webdataset import img2dataset_folder

    keys = img2dataset_folder(tmp_path / "wds", per_shard=40)
    columns = Columns(image_emb="img_emb", text_emb="txt_emb")
    score(tmp_path / "wds", tmp_path / "all", "all", columns=columns)
    score(tmp_path / "wds", tmp_path / "out", "scores", columns=columns)
    names = sorted(p.name for p in (tmp_path / "out").glob("*.parquet"))
    assert names == ["00000.parquet", "00001.parquet"]
    for name in names:
        scores = pq.read_table(tmp_path / "out" / name)
        full = pq.read_table(tmp_path / "all" / name)
        assert "image" not in scores.column_names and "image_ref" not in scores.column_names
        ncclean = scores.column_names[1:]
        assert scores.column("id").equals(full.column("id"))
        assert scores.select(ncclean).equals(full.select(ncclean))
    ids = [pq.read_table(tmp_path / "out" / n, columns=["id"]).column(0).to_pylist()
           for n in names]
    assert ids[0] + ids[1] == keys
