"""What a result was made with: package versions, the command line, the start time and a
fingerprint of the input, for run records and checkpoints."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

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


MAIN_PACKAGES = ("torch", "numpy", "pyarrow", "scikit-learn", "polars", "ray", "timm",
                 "open_clip_torch")


def started() -> str:
    """Now, in UTC, as ISO 8601 to the second (``2026-11-27T20:31:05+00:00``)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def command_line() -> list[str]:
    """The process's command line (``ncclean score ...``; in a notebook, the kernel's)."""
    return [Path(sys.argv[0]).name if sys.argv else "python", *sys.argv[1:]]


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (hex): what ``sha256sum`` prints."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def input_sha256(paths: list[Path], root: Path) -> str:
    """A fingerprint of the input files: one file's own SHA-256; for several (a folder of
    shards), the SHA-256 of ``sha256sum``'s lines for them (``<hex>  <path under root>``,
    sorted by path). Files are hashed on a few threads."""
    from concurrent.futures import ThreadPoolExecutor

    paths = sorted(paths, key=lambda p: str(p))
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        hashes = list(pool.map(file_sha256, paths))
    if len(paths) == 1 and Path(paths[0]) == root:
        return hashes[0]
    lines = "".join(f"{h}  {Path(p).relative_to(root).as_posix()}\n"
                    for h, p in zip(hashes, paths, strict=True))
    return hashlib.sha256(lines.encode()).hexdigest()



def input_sha256_soon(paths: list[Path], root: Path):
    """:func:`input_sha256` started now on a thread of its own (a daemon: a run that fails
    meanwhile does not wait for it), so that hashing the input overlaps the run's work instead
    of following it; returns a function that waits for it."""
    import threading

    done: dict = {}

    def work() -> None:
        try:
            done["digest"] = input_sha256([p for p in paths if Path(p).is_file()], root)
        except BaseException as error:  # raised where the digest is asked for
            done["error"] = error

    thread = threading.Thread(target=work, name="input-sha256", daemon=True)
    thread.start()

    def result() -> str:
        thread.join()
        if "error" in done:
            raise done["error"]
        return done["digest"]

    return result
