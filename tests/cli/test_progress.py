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


def test_a_stage_that_printed_a_line_prints_its_end():
    now = [0.0]
    out = io.StringIO()
    update = progress_lines(every=5, stream=out, clock=lambda: now[0])
    update("apply", 0, 3)
    now[0] = 6.0
    update("apply", 1, 3)
    now[0] = 7.0
    update("apply", 3, 3)  # within the interval, but the stage's last
    assert out.getvalue().splitlines()[-1].startswith("ncclean: apply: 3/3 (100%)")


def test_a_stage_of_unknown_length_says_it_began_at_once():
    now = [0.0]
    out = io.StringIO()
    update = progress_lines(every=5, stream=out, clock=lambda: now[0])
    update("fitting clip on 30 pairs", 0, 0)  # within the first interval: a short run, silent
    assert out.getvalue() == ""
    now[0] = 6.0
    update("fitting clip on 300 pairs", 0, 0)
    now[0] = 7.0
    update("fitting clip on 300 pairs", 0, 0)  # once
    assert out.getvalue() == "ncclean: fitting clip on 300 pairs ...\n"


def test_a_short_run_prints_nothing():
    out = io.StringIO()
    update = progress_lines(every=5, stream=out, clock=lambda: 1.0)
    update("apply", 0, 3)
    update("apply", 3, 3)
    assert out.getvalue() == ""


def test_the_one_bar_shows_the_run_elapsed_and_the_stage_left():
    """On a terminal one bar serves the whole run: its time counts from the first stage, its
    time left is the current stage's at that stage's rate."""
    from ncclean.cli.render import OverallClock

    now = [0.0]
    clock = OverallClock(lambda: now[0])
    assert clock.times("reading", 0, 100) == "0 s elapsed, ? left"
    now[0] = 10.0
    assert clock.times("reading", 50, 100) == "10 s elapsed, 10 s left"
    now[0] = 70.0
    assert clock.times("scoring", 0, 10) == "1 min 10 s elapsed, ? left"
    now[0] = 80.0
    assert clock.times("scoring", 5, 10) == "1 min 20 s elapsed, 10 s left"
    assert clock.times("scoring", 10, 10) == "1 min 20 s elapsed"


def test_the_bar_runs_on_a_terminal(monkeypatch):
    import sys

    from ncclean.cli.render import progress_bars

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress_bars() as update:
        update("reading", 1, 2)
        update("scoring", 2, 2, "loss 0.1")
