"""Writing files safely: every output goes to a temporary file of ours beside it and is renamed
into place, so a crash never leaves a half-written file under the real name, and a later write
removes the temporary files a killed run left. Also the checks made before any work (the output
folder can be written), the folders a failed run should not leave behind, and the outputs an
interrupted run keeps.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ncclean.errors import OutputError

_CREATED: list[Path] = []


def make_folder(folder: str | os.PathLike) -> Path:
    """Create ``folder`` and its missing parents, remembering the ones created here so that
    :func:`remove_created_folders` can take them away again after a failed or interrupted run."""
    folder = Path(folder)
    missing = []
    for parent in (folder, *folder.parents):
        if parent.exists():
            break
        missing.append(parent)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"cannot create the folder {folder}: {_reason(error)}") from None
    _CREATED.extend(reversed(missing))  # outermost first
    return folder


def remove_created_folders() -> list[Path]:
    """Remove the folders :func:`make_folder` created in this process that are still empty,
    innermost first (after a failed or interrupted run: it leaves no empty output folder
    behind); returns the ones removed."""
    remove_own_scratch()
    removed = []
    while _CREATED:
        folder = _CREATED.pop()
        with contextlib.suppress(OSError):
            folder.rmdir()  # only succeeds when empty
            removed.append(folder)
    return removed


def forget_created_folders() -> None:
    """Keep the folders created so far (a run that succeeded)."""
    _CREATED.clear()
    _SCRATCH_PARENTS.clear()


_PLANNED: dict[Path, None] = {}  # in plan order
_COMPLETE: set[Path] = set()


def plan_outputs(paths: Iterable[str | os.PathLike]) -> None:
    """Note the outputs this run writes one by one and keeps, each complete, when it stops
    early (a sharded run's shards: the rerun skips them), so that an interrupted run can say
    which it kept (:func:`kept_outputs`)."""
    _PLANNED.update(dict.fromkeys(Path(p) for p in paths))


def mark_complete(path: str | os.PathLike) -> None:
    """Note that the planned output ``path`` is complete (written, or found complete)."""
    _COMPLETE.add(Path(path))


def kept_outputs() -> tuple[list[Path], int]:
    """The planned outputs that are complete, in plan order, and how many were planned."""
    return [p for p in _PLANNED if p in _COMPLETE], len(_PLANNED)


def forget_outputs() -> None:
    """Start a new run's plan (:func:`plan_outputs`)."""
    _PLANNED.clear()
    _COMPLETE.clear()


TEMP_MARK = ".ncclean-"
"""What the temporary files of ours carry in their names: ``.<name>.ncclean-<pid>-<random>.tmp``
beside the file ``<name>`` they become."""


def _temp_prefix(dest: Path) -> str:
    return f".{dest.name}{TEMP_MARK}{os.getpid()}-"


def remove_stale_temps(dest: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of ours beside ``dest`` that a killed run left (their process
    is gone); returns them. Files of a live process, another run writing there, are kept."""
    dest = Path(dest)
    removed = []
    pattern = f".{glob_escape(dest.name)}{TEMP_MARK}*.tmp"
    for tmp in dest.parent.glob(pattern):
        if not _dead(tmp.name[len(dest.name) + 1 + len(TEMP_MARK):]):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


SCRATCH_MARK = ".ncclean-scratch-"
"""What the scratch folders of a run carry in their names: ``.ncclean-scratch-<pid>-<random>``
inside the folder they serve (the output's folder), so a later run can tell a dead run's."""


@contextlib.contextmanager
def scratch_folder(parent: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty folder ``parent/.ncclean-scratch-<pid>-<random>`` for a run's working
    files (a fit sample, a decoded shard), removed with everything in it when the block ends,
    however it ends. The scratch folders of runs whose process is gone (a kill -9) are removed
    first; a live run's are kept. ``parent`` must exist. A full disk or a permission problem
    becomes an :class:`OutputError`."""
    import shutil

    parent = Path(parent)
    remove_stale_scratch(parent)
    _SCRATCH_PARENTS.add(parent)  # an interrupt inside mkdtemp still finds what it made
    try:
        folder = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_MARK}{os.getpid()}-", dir=parent))
    except OSError as error:
        raise OutputError(f"cannot write to {parent}: {_reason(error)}") from None
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_SCRATCH_PARENTS: set[Path] = set()


def remove_own_scratch() -> None:
    """Remove this process's scratch folders wherever :func:`scratch_folder` made them (after a
    failed or interrupted run: one that a signal cut off before its block began included)."""
    import shutil

    for parent in _SCRATCH_PARENTS:
        for folder in parent.glob(f"{SCRATCH_MARK}{os.getpid()}-*"):
            shutil.rmtree(folder, ignore_errors=True)
    _SCRATCH_PARENTS.clear()


def remove_stale_scratch(parent: str | os.PathLike) -> list[Path]:
    """Remove the scratch folders in ``parent`` whose run is gone (see :func:`scratch_folder`);
    returns them."""
    import shutil

    removed = []
    parent = Path(parent)
    if not parent.is_dir():
        return removed
    for folder in parent.glob(f"{SCRATCH_MARK}*"):
        if not _dead(folder.name[len(SCRATCH_MARK):]):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def _dead(named: str) -> bool:
    """Whether ``named`` (``<pid>-<random>...``, the end of one of our temporary names) names
    a process that is gone."""
    pid_text = named.split("-", 1)[0]
    return pid_text.isdigit() and not _alive(int(pid_text))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: alive
        return True
    return True


def probe_writable(out: str | os.PathLike) -> None:
    """Create and remove a temporary file of ours beside ``out`` (after removing stale ones):
    an :class:`OutputError` now, when the folder is read-only or full, rather than after the
    whole run."""
    out = Path(out)
    remove_stale_temps(out)
    try:
        fd, name = tempfile.mkstemp(prefix=_temp_prefix(out), suffix=".tmp", dir=out.parent)
        try:
            os.write(fd, b"ncclean")
        finally:
            os.close(fd)
            Path(name).unlink(missing_ok=True)
    except OSError as error:
        raise OutputError(f"cannot write to {out.parent}: {_reason(error)}") from None


WRITE_ERRORS = {errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT, errno.EPERM}
"""The errno values of a write the user can fix (a full disk, no permission, read-only)."""
_WRITE_WORDS = ("No space left", "Disk quota", "Read-only file system", "Permission denied",
                "Operation not permitted")


def is_write_error(error: BaseException) -> bool:
    """Whether ``error`` is a full disk or a permission problem (an ``OSError`` with one of
    :data:`WRITE_ERRORS`, or pyarrow's wording of one) rather than a bug."""
    if not isinstance(error, OSError):
        return False
    return error.errno in WRITE_ERRORS or any(w in str(error) for w in _WRITE_WORDS)


def _reason(error: OSError) -> str:
    return error.strerror or " ".join(str(error).split())


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; rename it onto ``dest`` when the block succeeds,
    delete it when the block fails (an interrupt included). The temporary name,
    ``.<name>.ncclean-<pid>-<random>.tmp``, says whose it is: a later write to ``dest`` removes
    those a killed process left (:func:`remove_stale_temps`). A full disk or a permission
    problem becomes an :class:`OutputError`."""
    dest = Path(dest)
    remove_stale_temps(dest)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(dest), suffix=".tmp",
                                        dir=dest.parent)
    except OSError as error:
        raise OutputError(f"cannot write to {dest.parent}: {_reason(error)}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    mode = 0o666 & ~_umask()  # mkstemp makes 0600; give the output the usual mode
    try:
        os.chmod(tmp, mode)
        yield tmp
        os.chmod(tmp, mode)  # again: some writers (safetensors) replace the file they are given
        os.replace(tmp, dest)
        if dest in _PLANNED:  # a planned output, complete the moment it is in place
            _COMPLETE.add(dest)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if is_write_error(error):
            raise OutputError(f"cannot write {dest}: {_reason(error)}") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def finish_run(succeeded: bool) -> list:
    """End a run: keep the folders it created (``succeeded``) or remove the empty ones; returns
    the outputs it completed (an interrupted sharded run keeps its complete shards)."""
    if succeeded:
        forget_created_folders()
    else:
        remove_created_folders()
    kept = kept_outputs()
    forget_outputs()
    return kept

