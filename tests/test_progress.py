"""Progress in notebooks: the API functions show a line per stage in a Jupyter kernel by default,
nothing elsewhere, and call a caller's own callback; detected without importing IPython."""

from __future__ import annotations

import io
import sys
import types

import pytest

from ncclean import api
from ncclean.progress import chosen_progress, in_notebook, no_progress, notebook_lines
from tests.pipeline.corpora import vector_table


def fake_ipython(monkeypatch, kernel: bool) -> None:
    """An ``IPython`` module in ``sys.modules`` whose shell has a kernel (Jupyter) or not (a
    terminal IPython)."""
    shell = types.SimpleNamespace(kernel=object()) if kernel else types.SimpleNamespace()
    module = types.ModuleType("IPython")
    module.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", module)


def test_a_kernel_is_a_notebook_a_terminal_ipython_or_none_is_not(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not in_notebook()
    assert "IPython" not in sys.modules  # never imported to find out
    fake_ipython(monkeypatch, kernel=False)
    assert not in_notebook() and chosen_progress(None) is no_progress
    fake_ipython(monkeypatch, kernel=True)
    assert in_notebook() and chosen_progress(None) is not no_progress
    assert chosen_progress(False) is no_progress


def test_notebook_lines_rewrite_one_line_per_stage():
    stream, now = io.StringIO(), [0.0]
    update = notebook_lines(stream, every=1.0, clock=lambda: now[0])
    update("reading", 0, 100)
    update("reading", 50, 100)  # within a second of the last line: skipped
    now[0] = 2.0
    update("reading", 60, 100, "loss 0.5")
    update("reading", 100, 100)
    update("reading", 100, 100)  # the end is written once
    assert stream.getvalue() == ("\rreading: 0/100 (0%)\rreading: 60/100 (60%) loss 0.5"
                                 "\rreading: 100/100 (100%)\n")


@pytest.fixture
def table():
    return vector_table(40, seed=1).rename_columns(["id", "text", "img", "txt", "noisy_gt"])


def test_an_api_call_reports_to_a_callback_and_in_a_notebook_by_default(table, monkeypatch,
                                                                        capsys):
    calls = []
    api.inspect(table, decode=False, caption_col="text", image_emb_col="img",
                text_emb_col="txt", progress=lambda *a: calls.append(a))
    assert ("reading", 40, 40) in calls
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    api.inspect(table, decode=False, caption_col="text", image_emb_col="img", text_emb_col="txt")
    assert capsys.readouterr().err == ""
    fake_ipython(monkeypatch, kernel=True)
    api.inspect(table, decode=False, caption_col="text", image_emb_col="img", text_emb_col="txt")
    assert "reading: 40/40 (100%)\n" in capsys.readouterr().err
    api.inspect(table, decode=False, caption_col="text", image_emb_col="img", text_emb_col="txt",
                progress=False)
    assert capsys.readouterr().err == ""
