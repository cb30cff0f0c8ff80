"""The Typer application: global options and the list of commands.

Command modules import :mod:`ncclean.api` inside their function bodies, so that ``ncclean
--help`` loads neither torch nor pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from ncclean import __version__
from ncclean.cli import check, embed, inspect, methods, noise, retrain, score, split, synth


@dataclass
class State:
    debug: bool = False


state = State()

app = typer.Typer(
    name="ncclean",
    help="Find and fix mismatched pairs in image-caption corpora.",
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
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    """Find and fix mismatched pairs in image-caption corpora."""
    state.debug = debug


app.command("score")(score.score)
app.command("methods")(methods.methods)
app.command("synth")(synth.synth)
app.command("inject-noise")(noise.inject_noise)
app.command("inspect")(inspect.inspect)
app.command("split")(split.split)
app.command("check")(check.check)
app.command("retrain")(retrain.retrain)
app.command("embed")(embed.embed)
