"""``ncclean methods``: the methods this installation knows, or one method's parameters."""

from __future__ import annotations

from typing import Annotated

import typer


def methods(
    name: Annotated[str | None, typer.Argument(help="Show this method's parameters.",
                                               show_default=False)] = None,
) -> None:
    """List the methods (built in and from plugins), one line each; with NAME, its parameters
    and their defaults."""
    import dataclasses

    from ncclean.cli.render import console
    from ncclean.methods.base import available_methods, get_method

    out = console()
    if name is None:
        for method_name, target in available_methods().items():
            if target.startswith("clash"):
                out.print(f"  {method_name:<8} [red]{target}[/red]")
                continue
            summary = getattr(get_method(method_name), "summary", "")
            out.print(f"  {method_name:<8} {summary}")
        return
    cls = get_method(name)
    out.print(f"[bold]{name}[/bold]: {cls.summary}")
    rules = getattr(cls, "default_rules", {})
    for field in dataclasses.fields(cls):
        default = field.default if field.default is not dataclasses.MISSING else "(required)"
        shown = rules.get(field.name, "rule for the corpus size") if default is None \
            else repr(default)
        out.print(f"  -p {field.name}=...   default {shown}")
