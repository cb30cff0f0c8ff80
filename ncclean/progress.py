"""How long-running library code reports progress without printing.

A :data:`Progress` is a plain callback ``progress(stage, done, total)``; library functions call it
as work advances and the command line draws bars from it. The default does nothing.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, int, int], None]


def no_progress(stage: str, done: int, total: int) -> None:
    """The default :data:`Progress`: ignore."""
