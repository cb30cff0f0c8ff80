"""How long-running library code reports progress without printing.

A :class:`Progress` is a plain callback ``progress(stage, done, total, note="")``; library
functions call it as work advances (``note`` carries, say, the running loss) and the command line
draws bars from it. The default does nothing.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def __call__(self, stage: str, done: int, total: int, note: str = "") -> None: ...


def no_progress(stage: str, done: int, total: int, note: str = "") -> None:
    """The default :class:`Progress`: ignore."""
