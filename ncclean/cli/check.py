"""``ncclean check``: a data-quality gate for CI, exit 0 (pass) or 1 (fail), 2 for bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ncclean.cli import options


def check(
    input: Annotated[Path | None, typer.Argument(
        help="A file written by 'ncclean score' [default: the last one it wrote from this "
        "folder].", show_default=False)] = None,
    max_noisy: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Fail when more than this share of valid pairs is noisy "
        "[default: 0.5 when no other bound and no --against is given].",
        show_default=False)] = None,
    max_vague: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Fail when more than this share of valid pairs is vague.")] = None,
    max_invalid: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Fail when more than this share of rows is invalid.")] = None,
    against: Annotated[Path | None, typer.Option(
        help="A previous run's summary (scored .json sidecar, split's summary.json, or check "
        "--json output): fail when the noisy share grew by more than --max-increase.")] = None,
    max_increase: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Allowed growth of the noisy share against --against.")] = 0.01,
    labels: Annotated[Path | None, typer.Option(
        help="Labels from 'ncclean audit' (CSV: id,label): fail when the labelled precision of "
        "clean_significant is below --min-precision.", show_default=False)] = None,
    min_precision: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="With --labels: the least precision of clean_significant.")]
    = 0.9,
    json_: options.Json = False,
) -> int:
    """Exit 0 when the scored corpus is within the bounds, 1 when it is not, with a one-line
    verdict; bad input is exit 2. With no bound given, the noisy share of valid pairs must be at
    most 0.5."""
    from ncclean import api
    from ncclean.cli.options import scored_input
    from ncclean.cli.render import print_json, warning_line

    input = scored_input(input, "check", quiet=json_)
    result = api.check(input, max_noisy=max_noisy, max_vague=max_vague, max_invalid=max_invalid,
                       against=against, max_increase=max_increase, labels=labels,
                       min_precision=min_precision)
    if json_:
        print_json(result.as_dict())
    else:
        for warning in result.warnings:
            warning_line(warning)
        typer.echo(result.verdict)
    return 0 if result.passed else 1
