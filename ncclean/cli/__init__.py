"""The ``ncclean`` command line: a thin layer over :mod:`ncclean.api`.

:func:`main` is the one place where errors become exit codes: a :class:`NcCleanError` (bad input)
or a usage error is one line on stderr and exit code 2; anything else is reported as an internal
error in one line, exit code 1, with the traceback only under ``--debug``.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    import typer

    from ncclean.cli.app import app, state
    from ncclean.cli.render import error_line
    from ncclean.errors import NcCleanError

    try:
        result = app(args=argv, prog_name="ncclean", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except NcCleanError as error:
        if state.debug:
            raise
        error_line(str(error))
        return 2
    except typer.Exit as done:
        return done.exit_code
    except _usage_error_type() as error:  # unknown option, bad value, missing argument, ...
        error_line(f"{error.format_message()} (see '{_command_of(argv)} --help')")
        return error.exit_code
    except (KeyboardInterrupt, typer.Abort):
        error_line("interrupted")
        return 130
    except Exception as error:  # a bug: say so in one line, keep the traceback for --debug
        if state.debug:
            raise
        error_line(f"internal error: {type(error).__name__}: {error} "
                   "(rerun with --debug for the traceback, and please report it)")
        return 1


def _usage_error_type() -> type[Exception]:
    """click's ``ClickException``, the base of every usage error; recent typer versions vendor
    click, so it is found through a class typer re-exports rather than imported from click."""
    from typer import BadParameter

    return next(c for c in BadParameter.__mro__ if c.__name__ == "ClickException")


def _command_of(argv: list[str] | None) -> str:
    words = sys.argv[1:] if argv is None else argv
    command = next((w for w in words if not w.startswith("-")), None)
    return f"ncclean {command}" if command else "ncclean"


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
