"""How long-running library code reports progress without printing.

A :class:`Progress` is a plain callback ``progress(stage, done, total, note="")``; library
functions call it as work advances (``note`` carries, say, the running loss) and the command line
draws bars from it. The default does nothing; the API functions' default, in a Jupyter kernel
only, is a line per stage in the cell's output (:func:`chosen_progress`).
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def __call__(self, stage: str, done: int, total: int, note: str = "") -> None: ...


def no_progress(stage: str, done: int, total: int, note: str = "") -> None:
    """The default :class:`Progress`: ignore."""


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel: IPython is loaded (a kernel always has it; it
    is never imported here) and its shell has a kernel, which a terminal IPython has not."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


def chosen_progress(progress: Progress | bool | None) -> Progress:
    """The callback an API function reports to: ``progress`` itself when it is one, none for
    ``False``, :func:`notebook_lines` for ``True``; ``None`` (the default) is ``True`` in a
    Jupyter kernel (:func:`in_notebook`) and ``False`` elsewhere."""
    if callable(progress):
        return progress
    if progress is None:
        progress = in_notebook()
    return notebook_lines() if progress else no_progress


def notebook_lines(stream=None, every: float = 0.5, clock=None) -> Progress:
    """A :class:`Progress` for a notebook cell: one line per stage, rewritten in place
    (a carriage return, which Jupyter's output honours) at most every ``every`` seconds and
    ended when the stage is done: ``stage: done/total (pct%) note`` on ``stream`` (stderr)."""
    import sys
    import time

    clock = clock or time.monotonic
    shown: dict[str, float] = {}
    ended: set[str] = set()

    def update(stage: str, done: int, total: int, note: str = "") -> None:
        now, finished = clock(), bool(total) and done >= total
        if finished and stage in ended or not finished and now - shown.get(stage, -every) < every:
            return
        shown[stage] = now
        (ended.add if finished else ended.discard)(stage)
        line = f"{stage}: {done:,}/{total:,} ({100 * done / total:.0f}%)" if total \
            else f"{stage}: {done:,}"
        out = stream or sys.stderr
        out.write("\r" + line + (f" {note}" if note else "") + ("\n" if finished else ""))
        out.flush()

    return update
