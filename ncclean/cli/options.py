"""Options shared by several commands, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

_COLUMNS = "Columns"
METHOD_METAVAR = "METHOD"
"""The metavar of ``--method``; the help shows the registered methods in its place."""

CaptionCol = Annotated[str, typer.Option(
    "--caption-col", help="Column holding the caption text.", rich_help_panel=_COLUMNS)]
ImageCol = Annotated[str, typer.Option(
    "--image-col", help="Column holding images: bytes, a path relative to the Parquet file, or a "
    "{bytes, path} struct.", rich_help_panel=_COLUMNS)]
RecordedCaptionCol = Annotated[str | None, typer.Option(
    "--caption-col", help="Column holding the caption text [default: the scoring run's].",
    show_default=False, rich_help_panel=_COLUMNS)]
RecordedImageCol = Annotated[str | None, typer.Option(
    "--image-col", help="Column holding images [default: the scoring run's].",
    show_default=False, rich_help_panel=_COLUMNS)]
IdCol = Annotated[str | None, typer.Option(
    "--id-col", help="Column with a stable pair id [default: 'id' if present, else the row "
    "number].", show_default=False, rich_help_panel=_COLUMNS)]
ImageIdCol = Annotated[str | None, typer.Option(
    "--image-id-col", help="Column grouping the captions of one image [default: 'image_id' if "
    "present, else equal image bytes].", show_default=False, rich_help_panel=_COLUMNS)]
ImageEmbCol = Annotated[str | None, typer.Option(
    "--image-emb-col", help="Column of precomputed image embeddings (used instead of images).",
    rich_help_panel=_COLUMNS)]
TextEmbCol = Annotated[str | None, typer.Option(
    "--text-emb-col", help="Column of precomputed caption embeddings.", rich_help_panel=_COLUMNS)]
AllowAbsolutePaths = Annotated[bool, typer.Option(
    "--allow-absolute-paths", help="Let image paths point outside the Parquet file's folder "
    "(absolute, or out with ..); by default such rows are invalid and never opened.",
    rich_help_panel=_COLUMNS)]

_CLIP = "CLIP"
ClipModel = Annotated[str, typer.Option(
    "--clip-model", help="open_clip model name, or a model config .json.",
    rich_help_panel=_CLIP)]
ClipPretrained = Annotated[str | None, typer.Option(
    "--clip-pretrained", help="open_clip pretrained tag (downloaded once; needs the network).",
    rich_help_panel=_CLIP)]
ClipCheckpoint = Annotated[Path | None, typer.Option(
    "--clip-checkpoint", help="Local CLIP weights (.safetensors or a torch state dict).",
    rich_help_panel=_CLIP)]

Json = Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")]
Overwrite = Annotated[bool, typer.Option(
    "--overwrite", help="Replace an output file that ncclean did not write (refused otherwise, "
    "so that -o never replaces a corpus by accident).")]
Strict = Annotated[bool, typer.Option(
    "--strict", help="Fail on invalid rows instead of keeping them marked in invalid_reason.")]


def columns(caption_col: str, image_col: str, id_col: str | None, image_id_col: str | None,
            image_emb_col: str | None, text_emb_col: str | None,
            allow_absolute_paths: bool = False):
    """The :class:`ncclean.data.schema.Columns` these options ask for."""
    from ncclean.api import Columns

    return Columns(caption=caption_col, image=image_col, id=id_col, image_id=image_id_col,
                   image_emb=image_emb_col, text_emb=text_emb_col,
                   allow_absolute_paths=allow_absolute_paths)


def given(ctx, names: tuple[str, ...]) -> frozenset[str]:
    """Which of the parameters ``names`` the command line (or the environment) set, as opposed
    to their defaults."""
    def source(name: str) -> str:
        found = ctx.get_parameter_source(name)
        return found.name if found is not None else ""

    return frozenset(n for n in names if source(n) in ("COMMANDLINE", "ENVIRONMENT"))


def folder_asked(argv: tuple[str, ...]) -> bool:
    """Whether the command line's ``-o``/``--output`` ends in a path separator (``-o scored/``):
    a folder is asked for, which the value as a :class:`~pathlib.Path` no longer says."""
    import os

    value = None
    for k, token in enumerate(argv):
        if token in ("-o", "--output") and k + 1 < len(argv):
            value = argv[k + 1]
        elif token.startswith("--output="):
            value = token.removeprefix("--output=")
        elif token.startswith("-o") and not token.startswith("--") and len(token) > 2:
            value = token[2:].removeprefix("=")
    return value is not None and value.endswith(("/", os.sep))


def scored_input(given, command: str, quiet: bool = False):
    """``given``, or else the last file ``score`` wrote from this folder, saying so on stdout
    (on stderr when ``quiet``: the command prints JSON)."""
    import sys

    from ncclean import api

    path, note = api.scored_input(given, command)
    if note:
        print(note, file=sys.stderr if quiet else sys.stdout)
    return path
