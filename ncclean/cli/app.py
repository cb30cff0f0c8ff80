"""The Typer application: global options and the list of commands.

Command modules import :mod:`ncclean.api` inside their function bodies, so that ``ncclean
--help`` loads neither torch nor pyarrow.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ncclean import __version__
from ncclean.cli import (
    audit,
    check,
    embed,
    inspect,
    methods,
    noise,
    retrain,
    score,
    split,
    synth,
)
from ncclean.cli.exits import EXIT_CODES
from ncclean.cli.options import METHOD_METAVAR


def _display_type(self, ctx) -> str | None:
    """The type shown beside an option in --help: nothing for a plain flag (``--json``, not
    ``--json <bool>``), the registered methods for ``--method`` (found when the help is drawn,
    so that starting the command line imports no method), otherwise typer's own."""
    if getattr(self, "is_flag", False):
        return None
    if self.metavar == METHOD_METAVAR:
        from ncclean.api import method_names

        return "<" + "|".join(["auto", *method_names()]) + ">"
    return _typer_display_type(self, ctx)


# typer 0.29 draws an option's type through this method; older typers have none and show their
# own types (the command line works the same).
_typer_display_type = getattr(typer.core.TyperOption, "display_type_rich", None)
if _typer_display_type is not None:
    typer.core.TyperOption.display_type_rich = _display_type


from ncclean.cli.state import state  # noqa: E402 (the run's flags, set by main)

app = typer.Typer(
    name="ncclean",
    help="Find and fix mismatched pairs in image-caption corpora.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ncclean {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors (also accepted "
                                        "after the command).")] = False,
) -> None:
    """Find and fix mismatched pairs in image-caption corpora."""
    state.debug = debug


app.command("score", epilog=EXIT_CODES)(score.score)
app.command("methods", epilog=EXIT_CODES)(methods.methods)
app.command("synth", epilog=EXIT_CODES)(synth.synth)
app.command("inject-noise", epilog=EXIT_CODES)(noise.inject_noise)
app.command("inspect", epilog=EXIT_CODES)(inspect.inspect)
app.command("split", epilog=EXIT_CODES)(split.split)
app.command("check", epilog=EXIT_CODES)(check.check)
app.command("audit", epilog=EXIT_CODES)(audit.audit)
app.command("retrain", epilog=EXIT_CODES)(retrain.retrain)
app.command("embed", epilog=EXIT_CODES)(embed.embed)
