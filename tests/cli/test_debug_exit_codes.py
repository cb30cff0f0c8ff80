"""``--debug`` adds a traceback and changes nothing else (issue 60, deliverable 5): bad input is
still exit 2 and a bug exit 3, each with its one line after the traceback, whether ``--debug``
comes before or after the command."""

from __future__ import annotations

import pytest

from ncclean import api
from ncclean.cli import main


def _run(capsys, *args) -> tuple[int, str]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def _traceback_then_the_line(err: str, line: str) -> None:
    lines = err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):", err
    assert lines[-1].startswith("ncclean: error: ") and line in lines[-1], err


@pytest.mark.parametrize("where", ["before", "after"])
def test_bad_input_under_debug_is_still_exit_2(capsys, tmp_path, where):
    missing = tmp_path / "nope.parquet"
    words = ["score", missing, "-o", tmp_path / "x.parquet"]
    code, err = _run(capsys, *(["--debug", *words] if where == "before" else [*words, "--debug"]))
    assert code == 2
    _traceback_then_the_line(err, "no such file")
    assert "InputNotFoundError" in err  # the traceback names the error


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_bug_under_debug_is_still_exit_3(capsys, tmp_path, monkeypatch, where):
    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(api, "check", broken)
    words = ["check", tmp_path / "x.parquet"]
    code, err = _run(capsys, *(["--debug", *words] if where == "before" else [*words, "--debug"]))
    assert code == 3
    _traceback_then_the_line(err, "internal error: KeyError: 'boom'")
    assert 'raise KeyError("boom")' in err


def test_without_debug_there_is_no_traceback(capsys, tmp_path):
    code, err = _run(capsys, "score", tmp_path / "nope.parquet", "-o", tmp_path / "x.parquet")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
