"""``ncclean methods``: the methods this installation knows, or one method's parameters and where
it departs from its paper."""

from __future__ import annotations

from typing import Annotated

import typer


def methods(
    name: Annotated[str | None, typer.Argument(help="Show this method's parameters.",
                                               show_default=False)] = None,
) -> None:
    """List the methods (built in and from plugins), one line each; with NAME, each parameter
    with its default, allowed values and meaning, then where the method departs from its
    paper."""
    from rich.markup import escape

    from ncclean.cli.render import console
    from ncclean.methods.base import available_methods, get_method, param_specs

    out = console()
    if name is None:
        for method_name, target in available_methods().items():
            if target.startswith("clash"):
                out.print(f"  {method_name:<8} [red]{escape(target)}[/red]")
                continue
            summary = getattr(get_method(method_name), "summary", "")
            out.print(f"  {method_name:<8} {escape(summary)}")
        return
    cls = get_method(name)
    out.print(f"[bold]{name}[/bold]: {escape(cls.summary)}")
    out.print("parameters (-p NAME=VALUE):")
    for spec in param_specs(cls).values():
        if spec.default is None:
            default = f"auto ({spec.rule})" if spec.rule else "auto"
        else:
            default = str(spec.default).lower() if isinstance(spec.default, bool) \
                else str(spec.default)
        out.print(f"  {escape(spec.name)} = {escape(default)}    "
                  f"[dim]allowed: {escape(spec.allowed())}[/dim]")
        if spec.help:
            out.print(f"      {escape(spec.help)}")
    departures = getattr(cls, "departures", ())
    if departures:
        out.print("departures from the paper:")
        for sentence in departures:
            out.print(f"  - {escape(sentence)}")
