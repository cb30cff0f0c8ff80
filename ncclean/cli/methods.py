"""``ncclean methods``: the methods this installation knows, or one method's parameters and where
it departs from its paper."""

from __future__ import annotations

from typing import Annotated

import typer

from ncclean.cli import options

AUTO = "auto"
AUTO_SUMMARY = ("score's default: clip on pretrained towers (the default towers, or two vector "
                "columns), gmm on towers trained from scratch; 'ncclean methods clip' for its "
                "parameters")


def methods(
    name: Annotated[str | None, typer.Argument(help="Show this method's parameters.",
                                               show_default=False)] = None,
    json_: options.Json = False,
) -> None:
    """List the methods (built in and from plugins), one line each; with NAME, each parameter
    with its default, allowed values and meaning, then where the method departs from its
    paper."""
    from rich.markup import escape

    from ncclean import api
    from ncclean.cli.render import console, print_json

    if name == AUTO:
        if json_:
            print_json({"name": AUTO, "summary": AUTO_SUMMARY})
        else:
            console().print(f"[bold]{AUTO}[/bold]: {escape(AUTO_SUMMARY)}")
        return
    described = api.methods(name)
    if json_:
        print_json(described)
        return
    out = console()
    if name is None:
        out.print(f"  {AUTO:<8} {escape(AUTO_SUMMARY)}")
        for method in described:
            if method["error"]:
                out.print(f"  {method['name']:<8} [red]{escape(method['error'])}[/red]")
                continue
            out.print(f"  {method['name']:<8} {escape(method['summary'])}")
        return
    method = described[0]
    out.print(f"[bold]{name}[/bold]: {escape(method['summary'])}")
    out.print("parameters (-p NAME=VALUE):")
    for spec in method["params"]:
        if spec["default"] is None:
            default = f"auto ({spec['rule']})" if spec["rule"] else "auto"
        else:
            default = str(spec["default"]).lower() if isinstance(spec["default"], bool) \
                else str(spec["default"])
        out.print(f"  {escape(spec['name'])} = {escape(default)}    "
                  f"[dim]allowed: {escape(spec['allowed'])}[/dim]")
        if spec["help"]:
            out.print(f"      {escape(spec['help'])}")
    if method.get("min_pairs"):
        where = f" {method['min_pairs_where']}" if method.get("min_pairs_where") else ""
        out.print(escape(f"measured to need at least {method['min_pairs']:,} pairs{where} "
                         "(score warns below; benchmarks/results/small-corpora.md)"))
    if method["departures"]:
        out.print("departures from the paper:")
        for sentence in method["departures"]:
            out.print(f"  - {escape(sentence)}")
