"""``ncclean inspect``: read a corpus as scoring would and say what it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ncclean.cli import options


def inspect(
    input: Annotated[Path, typer.Argument(help="Parquet file or folder, webdataset .tar or "
                                          "folder of tars, or a Hugging Face save_to_disk "
                                          "folder.",
                                          show_default=False)],
    decode: Annotated[bool, typer.Option(
        help="Decode every image to find unreadable ones (--no-decode reads metadata only).")]
    = True,
    max_image_pixels: Annotated[int | None, typer.Option(
        min=1, help="Images with more pixels are invalid: a decompression-bomb guard "
        "[default: 89,478,485, PIL's limit].", show_default=False)] = None,
    caption_col: options.CaptionCol = "caption",
    image_col: options.ImageCol = "image",
    id_col: options.IdCol = None,
    image_id_col: options.ImageIdCol = None,
    image_emb_col: options.ImageEmbCol = None,
    text_emb_col: options.TextEmbCol = None,
    allow_absolute_paths: options.AllowAbsolutePaths = False,
    strict: options.Strict = False,
    json_: options.Json = False,
) -> None:
    """Count pairs, images and repeated captions, and list every kind of invalid row."""
    from ncclean import api
    from ncclean.cli.render import console, pct, print_json, progress_bars

    columns = options.columns(caption_col, image_col, id_col, image_id_col, image_emb_col,
                              text_emb_col, allow_absolute_paths)
    with progress_bars(not json_) as progress:
        s = api.inspect(input, columns, strict=strict, decode=decode,
                        max_image_pixels=max_image_pixels, progress=progress)
    if json_:
        print_json(s.as_dict())
        return
    out = console()
    used = ", ".join(f"{role}={name}" for role, name in s.columns.items() if name)
    out.print(f"[bold]{s.input}[/bold]: {s.n_pairs:,} pairs, {s.n_images:,} images, "
              f"{s.n_unique_captions:,} distinct captions ({used})")
    if s.n_shards > 1 or s.shard_kind != "parquet":
        out.print(f"  read from {s.n_shards:,} {s.shard_kind} shard"
                  f"{'s' if s.n_shards != 1 else ''}")
    if s.vector_columns:
        out.print(f"  vector columns: {', '.join(s.vector_columns)} "
                  "(--image-emb-col / --text-emb-col)")
    if set(s.writing_systems) - {"latin"}:
        found = ", ".join(f"{name} {n:,} ({pct(n, s.n_pairs)})"
                          for name, n in s.writing_systems.items())
        out.print(f"  captions by writing system: {found}")
    for text, count in s.top_captions:
        out.print(f"  repeated {count:,}x: {text[:70]!r}")
    if not s.images_decoded and s.columns.get("image"):
        out.print("  images not decoded (--no-decode): unreadable images are not counted")
    if not s.n_invalid:
        out.print("  no invalid rows")
        return
    out.print(f"  [bold]{s.n_invalid:,} invalid rows[/bold] ({pct(s.n_invalid, s.n_pairs)}), "
              "kept and marked in invalid_reason:")
    for kind, count in sorted(s.invalid.items(), key=lambda item: -item[1]):
        out.print(f"    {count:,} {kind}")
    for row, pair_id, reason in s.invalid_examples:
        out.print(f"    e.g. row {row} (id {pair_id}): {reason}")
