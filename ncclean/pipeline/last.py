"""The last file ``ncclean score`` wrote from a folder, so that ``split``, ``retrain`` and
``check`` can be typed without an input.

``score`` records its output in ``.ncclean/last.json`` under the current folder; the others, given
no input, read it back and say which file they use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STATE = Path(".ncclean") / "last.json"
"""The state file, relative to the folder the commands are run from."""


def remember_scored(output: Path) -> None:
    """Record ``output`` as the last file ``score`` wrote from the current folder. Best effort:
    a folder where the state cannot be written only loses the shortcut."""
    from ncclean.data.parquet import write_json

    try:
        STATE.parent.mkdir(exist_ok=True)
        write_json(STATE, {"scored": os.path.abspath(output)})
    except Exception:  # noqa: BLE001 (the scoring run itself succeeded)
        return


def scored_input(given: Path | None, command: str) -> tuple[Path, str | None]:
    """``(path, note)``: ``given`` (no note), or else the last file ``score`` wrote from this
    folder and a note saying so, for the command line to show. :class:`BadOptionError` when
    there is none."""
    from ncclean.errors import BadOptionError

    if given is not None:
        return given, None
    try:
        recorded = Path(json.loads(STATE.read_text())["scored"])
    except (OSError, ValueError, KeyError, TypeError):
        raise BadOptionError(f"{command}: no input given, and 'ncclean score' has written no "
                             f"file from this folder ({STATE}); give the scored file") from None
    if not recorded.exists():
        raise BadOptionError(f"{command}: no input given, and {recorded}, the last file 'ncclean "
                             "score' wrote from this folder, is gone; give the scored file")
    shown = _relative(recorded)
    note = f"{command}: reading {shown} (the last file 'ncclean score' wrote from this folder)"
    return Path(shown), note


def _relative(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path
