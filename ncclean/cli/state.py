"""What one command line run knows beyond its options: whether tracebacks show (``--debug``) and
the words it was given (for the run record)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class State:
    debug: bool = False
    argv: tuple[str, ...] = ()  # the command line, for run records


state = State()
