"""Off a terminal, progress is a line every few seconds: the stage, done of total, the rate and
the time left; a run shorter than the interval prints none."""

from __future__ import annotations

import io

from ncclean.cli.render import progress_lines


def test_a_line_every_interval_with_rate_and_time_left():
    now = [0.0]
    out = io.StringIO()
    update = progress_lines(every=5, stream=out, clock=lambda: now[0])
    update("embedding", 0, 1000)
    for step in range(1, 11):
        now[0] = step * 1.0
        update("embedding", step * 100, 1000)
    lines = out.getvalue().splitlines()
    assert lines == ["ncclean: embedding: 500/1,000 (50%), 100.0/s, 5 s left",
                     "ncclean: embedding: 1,000/1,000 (100%), 100.0/s"]


def test_a_short_run_prints_nothing():
    out = io.StringIO()
    update = progress_lines(every=5, stream=out, clock=lambda: 1.0)
    update("apply", 0, 3)
    update("apply", 3, 3)
    assert out.getvalue() == ""
