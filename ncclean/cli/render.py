"""Everything the command line shows: error lines, progress bars, summaries, JSON."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator

from ncclean.progress import Progress


def error_line(message: str) -> None:
    """``ncclean: error: <message>`` on stderr, folded onto one line."""
    sys.stderr.write("ncclean: error: " + " ".join(str(message).split()) + "\n")


def print_json(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@contextlib.contextmanager
def progress_bars(enabled: bool = True) -> Iterator[Progress]:
    """A :data:`Progress` callback drawing one rich bar per stage on stderr (transient: the
    bars vanish when the work is done). Draws nothing when stderr is not a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield lambda stage, done, total: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeRemainingColumn,
    )
    from rich.progress import (
        Progress as RichProgress,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as bars:
        tasks: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=total)
            bars.update(tasks[stage], completed=done, total=total)

        yield update


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"
