"""``-o`` never replaces a file ncclean did not write: exit 2, the file unchanged; a file an
ncclean command wrote is replaced by a rerun; ``--overwrite`` replaces any."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cli.test_contract import CLIP, embedding_corpus, one_line, run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clipart-300.parquet"


def test_score_never_replaces_a_file_it_did_not_write(tmp_path, capsys):
    shutil.copy(EXAMPLE, tmp_path / "pairs.parquet")
    precious = tmp_path / "precious.parquet"
    shutil.copy(EXAMPLE, precious)
    before = precious.read_bytes()
    code, _, err = run(capsys, "score", tmp_path / "pairs.parquet", "-o", precious)
    assert code == 2 and "was not written by ncclean" in one_line(err)
    assert precious.read_bytes() == before
    code, _, err = run(capsys, "inject-noise", tmp_path / "pairs.parquet", "-o", precious)
    assert code == 2 and "--overwrite" in one_line(err)
    assert precious.read_bytes() == before


def test_a_rerun_replaces_its_own_output_and_overwrite_replaces_any(tmp_path, capsys):
    pairs = embedding_corpus(tmp_path / "pairs.parquet")
    out = tmp_path / "scored.parquet"
    for _ in range(2):
        code, _, err = run(capsys, "score", pairs, "-o", out, *CLIP)
        assert code == 0, err
    mine = tmp_path / "mine.parquet"
    shutil.copy(EXAMPLE, mine)
    code, _, err = run(capsys, "score", pairs, "-o", mine, "--overwrite", *CLIP)
    assert code == 0, err
    assert mine.read_bytes() != EXAMPLE.read_bytes()
