"""What a result was made with: package versions for sidecars and checkpoints."""

from __future__ import annotations

import platform
from importlib import metadata

import ncclean


def versions(*packages: str) -> dict[str, str]:
    """``{"ncclean": ..., "python": ..., <package>: ...}``; a package not installed is left out."""
    found = {"ncclean": ncclean.__version__, "python": platform.python_version()}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found
