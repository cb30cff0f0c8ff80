"""``split`` and its report read the caption and image columns from the scoring run's record, so
a corpus scored with ``--caption-col text --image-col jpg`` shows its captions and images; a
column that is not there is exit 2."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pyarrow.parquet as pq

from tests.cli.test_contract import one_line, run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clipart-300.parquet"


def test_the_report_shows_the_captions_of_the_columns_the_run_named(tmp_path, capsys):
    table = pq.read_table(EXAMPLE)
    table = table.rename_columns(["text" if n == "caption" else "jpg" if n == "image" else n
                                  for n in table.column_names])
    pq.write_table(table, tmp_path / "pairs.parquet")
    code, _, err = run(capsys, "score", tmp_path / "pairs.parquet", "-o", tmp_path / "s.parquet",
                       "--caption-col", "text", "--image-col", "jpg", "--method", "clip",
                       "--no-cache")
    assert code == 0, err
    code, out, err = run(capsys, "split", tmp_path / "s.parquet", "--report", "--html",
                         tmp_path / "r.html")
    assert code == 0, err
    listed = [line for line in out.splitlines() if line.startswith("    id '")]
    assert listed and all(re.search(r"\) '.+'", line) for line in listed)  # with its caption
    page = (tmp_path / "r.html").read_text()
    shown = {c for c in set(table.column("text").to_pylist()) if c and html.escape(c) in page}
    assert len(shown) >= 60
    assert page.count("data:image") >= 60
    code, _, err = run(capsys, "split", tmp_path / "s.parquet", "--caption-col", "nope",
                       "-o", tmp_path / "x")
    assert code == 2 and "no caption column 'nope'" in one_line(err)
