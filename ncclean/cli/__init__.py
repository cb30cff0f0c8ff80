"""The ``ncclean`` command line: a thin layer over :mod:`ncclean.api`.

:func:`main` is the one place where errors become exit codes, the same for every command
(:data:`EXIT_CODES`): 0 success; 1 a gate that failed (``check``'s FAIL, nothing else); 2 bad
input or usage (a :class:`NcCleanError`, a usage error, a full disk or a permission problem), one
line on stderr; 3 an internal error (a bug), one line asking to report it, the traceback only
under ``--debug``; 130 on SIGINT and 143 on SIGTERM, one line saying what was interrupted, with
the partial files removed (a sharded run's complete shards stay, and the line counts them).
``--debug`` prints the traceback before that line and changes no exit code.
"""

from __future__ import annotations

import os
import signal
import sys

from ncclean.cli.exits import (  # noqa: F401 (the contract, re-exported)
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_FAILED_GATE,
    EXIT_INTERNAL,
    EXIT_OK,
)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, Kubernetes, Slurm), raised like Ctrl-C so that the same clean-up
    runs."""


_SIGNALLED: list[int] = []


def _on_signal(signum, frame) -> None:
    _SIGNALLED.append(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    words = _debug_first(words)
    if not words or "-h" in words or "--help" in words:
        _wide_help()
    previous = {}
    _SIGNALLED.clear()
    if _main_thread():
        previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run(words)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(words: list[str]) -> int:
    try:
        import typer

        from ncclean.cli.app import app, state
        from ncclean.cli.render import error_line
        from ncclean.errors import NcCleanError
    except Exception as error:  # a dependency missing, or of a version the command line lacks
        _traceback("--debug" in words[:1])
        print(f"ncclean: error: cannot start: {type(error).__name__}: {error} (a dependency "
              "is missing or of another version: reinstall ncclean; rerun with --debug for "
              "the traceback)", file=sys.stderr)
        return EXIT_INTERNAL

    state.debug = "--debug" in words[:1]
    state.argv = ("ncclean", *words)
    _finish_run(succeeded=True)  # an earlier run in this process planned nothing for this one
    try:
        result = app(args=words, prog_name="ncclean", standalone_mode=False)
        if _SIGNALLED or result == 130:  # typer turns an interrupt into a return value of 130
            raise KeyboardInterrupt
        _finish_run(succeeded=True)
        return result if isinstance(result, int) else EXIT_OK
    except typer.Exit as done:
        return done.exit_code
    except _usage_error_type() as error:  # unknown option, bad value, missing argument, ...
        error_line(f"{error.format_message()} (see '{_command_of(words)} --help')")
        return EXIT_BAD_INPUT
    except (KeyboardInterrupt, typer.Abort):
        _traceback(state.debug)
        kept = _finish_run(succeeded=False)
        error_line(f"interrupted: {_command_of(words)} {_what_was_kept(*kept)}")
        # typer swallows the interrupt's type; the handler noted which signal it was
        return 128 + signal.SIGTERM if signal.SIGTERM in _SIGNALLED else 130
    except Exception as error:
        _traceback(state.debug)  # --debug adds the traceback; the line and the code stay
        _finish_run(succeeded=False)
        if isinstance(error, NcCleanError):
            error_line(str(error))
            return EXIT_BAD_INPUT
        if _is_write_error(error):  # a full disk or a permission problem: the user's to fix
            error_line(f"cannot write: {error}")
            return EXIT_BAD_INPUT
        return _internal(error, error_line)  # a bug: one line, the traceback under --debug
    finally:
        _finish_run(succeeded=True)  # nothing of this run's plan outlives it


def _finish_run(succeeded: bool) -> tuple[list, int]:
    """End the run through :func:`ncclean.api.finish_run`: ``(kept, planned)``. A command that
    never loaded the library (``--help``, ``--version``) made nothing to end, and stays light."""
    api = sys.modules.get("ncclean.api")
    return api.finish_run(succeeded) if api is not None else ([], 0)


def _is_write_error(error: BaseException) -> bool:
    from ncclean import api

    return api.is_write_error(error)


def _what_was_kept(kept: list, planned: int) -> str:
    """How an interrupt's line ends: what it wrote, which is nothing unless a sharded run
    had completed shards (kept on purpose, so that the same command finishes the rest)."""
    if not kept:
        return "wrote nothing; partial files removed"
    folders = sorted({str(path.parent) for path in kept})
    return (f"kept {len(kept)} of {planned} shards complete in {', '.join(folders)}/ (the "
            "same command finishes the rest; partial files removed)")


def _traceback(debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)


def _internal(error: BaseException, error_line) -> int:
    error_line(f"internal error: {type(error).__name__}: {error} "
               "(rerun with --debug for the traceback, and please report it)")
    return EXIT_INTERNAL


def _debug_first(words: list[str]) -> list[str]:
    """``--debug`` is accepted anywhere before a ``--``: it is moved to the front, where the
    application's own option reads it."""
    end = words.index("--") if "--" in words else len(words)
    if "--debug" not in words[:end]:
        return words
    rest = [w for w in words[:end] if w != "--debug"] + words[end:]
    return ["--debug", *rest]


def _wide_help() -> None:
    """Help at least 120 columns wide when the width is not known (not a terminal, no COLUMNS):
    rich's default of 80 cuts option names."""
    if os.environ.get("COLUMNS") or os.environ.get("TERMINAL_WIDTH") or sys.stdout.isatty():
        return
    try:
        import typer.rich_utils as rich_utils
    except ImportError:  # the run that follows says so in one line
        return
    if rich_utils.MAX_WIDTH is None:
        rich_utils.MAX_WIDTH = 120


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _usage_error_type() -> type[Exception]:
    """click's ``ClickException``, the base of every usage error; recent typer versions vendor
    click, so it is found through a class typer re-exports rather than imported from click."""
    from typer import BadParameter

    return next(c for c in BadParameter.__mro__ if c.__name__ == "ClickException")


def _command_of(words: list[str]) -> str:
    command = next((w for w in words if not w.startswith("-")), None)
    return f"ncclean {command}" if command else "ncclean"


def run() -> None:
    """Console-script entry point. Once :func:`main` has returned the run is over: a signal
    arriving while the interpreter shuts down is ignored rather than shown as a traceback."""
    code = main()
    if _main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)
