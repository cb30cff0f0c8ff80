"""Plain records: what a command returns and what a run writes down, as JSON-ready dicts."""

from __future__ import annotations

import os
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

PathLike = str | os.PathLike


def as_record(obj: Any) -> dict:
    """The fields of the dataclass ``obj`` as a dict, in field order, paths as strings (one level
    deep: nested dataclasses are left as they are)."""
    if not is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"as_record needs a dataclass instance, got {type(obj).__name__}")
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}


def _plain(value: Any) -> Any:
    if isinstance(value, Path | os.PathLike):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) and not isinstance(value, str):
        return type(value)(_plain(v) for v in value)
    return value


class Summary:
    """Base of the frozen summary dataclasses the commands return: :meth:`as_dict` is what
    ``--json`` prints."""

    def as_dict(self) -> dict:
        return as_record(self)
