"""``ncclean split``: one Parquet file per partition, a summary, and the reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ncclean.cli import options


def split(
    input: Annotated[Path | None, typer.Argument(
        help="A file written by 'ncclean score' [default: the last one it wrote from this "
        "folder].", show_default=False)] = None,
    out_dir: Annotated[Path | None, typer.Option(
        "-o", "--out-dir", help="Folder for <partition>.parquet and summary.json [default: "
        "INPUT's name with .split, beside it].", show_default=False)] = None,
    report: Annotated[bool, typer.Option(
        "--report", help="Print counts, the noise estimate and the most confidently noisy "
        "pairs.")] = False,
    html: Annotated[Path | None, typer.Option(
        help="Also write a self-contained HTML report with charts and thumbnails.")] = None,
    per_partition: Annotated[int, typer.Option(
        min=1, max=500, help="Pairs shown per partition in the HTML report.")] = 40,
    caption_col: options.RecordedCaptionCol = None,
    image_col: options.RecordedImageCol = None,
    seed: Annotated[int, typer.Option(help="Seed of the report's samples and bootstrap.")] = 0,
    json_: options.Json = False,
) -> None:
    """Split a scored corpus into one Parquet file per partition; row counts are checked to add
    up to the input."""
    from ncclean import api
    from ncclean.cli.options import scored_input
    from ncclean.cli.render import print_json, render_split

    input = scored_input(input, "split", quiet=json_)
    summary = api.split(input, out_dir, html=html, image_col=image_col, caption_col=caption_col,
                        per_partition=per_partition, seed=seed)
    if json_:
        print_json(summary.as_dict())
        return
    render_split(summary, report)
