"""The run record says what made it: ncclean's version and its main dependencies', when the run
started (UTC, ISO 8601), the command line and a SHA-256 fingerprint of the input; the Parquet
copy leaves out what differs between two runs of one command (start time, command line)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

import pyarrow.parquet as pq

import ncclean
from tests.cli.test_contract import run
from tests.pipeline.corpora import vector_table, write_shards


def test_the_run_record_holds_version_start_command_line_and_input_hash(tmp_path, capsys):
    pq.write_table(vector_table(120), tmp_path / "pairs.parquet")
    code, _, err = run(capsys, "score", tmp_path / "pairs.parquet", "-o", tmp_path / "s.parquet",
                       "--image-emb-col", "img", "--text-emb-col", "txt", "--method", "clip",
                       "--no-cache")
    assert code == 0, err
    record = json.loads((tmp_path / "s.parquet.json").read_text())
    assert record["versions"]["ncclean"] == ncclean.__version__
    assert datetime.fromisoformat(record["started"]).utcoffset().total_seconds() == 0
    assert record["argv"][:3] == ["ncclean", "score", str(tmp_path / "pairs.parquet")]
    digest = hashlib.sha256((tmp_path / "pairs.parquet").read_bytes()).hexdigest()
    assert record["input_sha256"] == digest  # what sha256sum prints for one file
    inside = json.loads(pq.read_schema(tmp_path / "s.parquet").metadata[b"ncclean"])
    assert inside["input_sha256"] == digest and "started" not in inside


def test_a_folder_of_shards_is_fingerprinted_as_sha256sum_lists_it(tmp_path, capsys):
    folder = write_shards(vector_table(120), tmp_path / "in", 2)
    code, _, err = run(capsys, "score", folder, "-o", tmp_path / "out", "--image-emb-col", "img",
                       "--text-emb-col", "txt", "--method", "clip", "--no-cache")
    assert code == 0, err
    record = json.loads((tmp_path / "out" / "ncclean.json").read_text())
    lines = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
                    for p in sorted(folder.glob("*.parquet")))
    assert record["input_sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    assert record["versions"]["ncclean"] == ncclean.__version__ and record["started"]
