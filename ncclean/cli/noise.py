"""``ncclean inject-noise``: mismatch a known share of pairs, for measuring detectors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ncclean.cli import options


def inject_noise(
    input: Annotated[Path, typer.Argument(help="Parquet file or folder of shards.",
                                          show_default=False)],
    output: Annotated[Path, typer.Option("-o", "--output", help="Parquet file to write.")],
    ratio: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Share of captions (per-caption) or images (per-image) to move.")]
    = 0.5,
    protocol: Annotated[Literal["per-caption", "per-image"], typer.Option(
        help="per-caption: NCR's shuffle of single captions; per-image: DECL/RCL's shuffle of "
        "whole images with all their captions.")] = "per-caption",
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    index: Annotated[Path | None, typer.Option(
        help="Re-apply a saved noise index instead of drawing one: ncclean's own .npz (rows "
        "matched by id), or a published NCR/BiCro/PC2 caption-to-image or RCL image-permutation "
        ".npy (by position; refused when rows look reordered).")] = None,
    move_with_image: Annotated[list[str] | None, typer.Option(
        help="More columns that describe the image and move with it (repeat the option or "
        "separate names with commas), e.g. category.")] = None,
    caption_col: options.CaptionCol = "caption",
    image_col: options.ImageCol = "image",
    id_col: options.IdCol = None,
    image_id_col: options.ImageIdCol = None,
    image_emb_col: options.ImageEmbCol = None,
    text_emb_col: options.TextEmbCol = None,
    overwrite: options.Overwrite = False,
    json_: options.Json = False,
) -> None:
    """Mismatch a share of the pairs: captions stay in their rows, images move. Writes the
    columns noisy_gt and original_image_id, the index as OUTPUT.noise.npz and a JSON sidecar."""
    from ncclean import api
    from ncclean.cli.render import console, pct, print_json, progress_bars

    move = [name.strip() for value in move_with_image or [] for name in value.split(",")
            if name.strip()]
    columns = options.columns(caption_col, image_col, id_col, image_id_col, image_emb_col,
                              text_emb_col)
    with progress_bars(not json_) as progress:
        s = api.inject_noise(input, output, ratio=ratio, protocol=protocol, seed=seed,
                             index=index, columns=columns, move_with_image=move,
                             overwrite=overwrite, progress=progress)
    if json_:
        print_json(s.as_dict())
        return
    out = console()
    how = f"index {s.applied_index}" if s.applied_index else f"{s.protocol}, seed {s.seed}"
    out.print(f"[bold]inject-noise[/bold] ({how}): {s.n_pairs:,} pairs, {s.n_images:,} images")
    if not s.applied_index:
        out.print(f"  requested  {s.ratio:.1%} of {s.unit} = {s.requested:,} {s.unit}")
    out.print(f"  moved      {s.moved:,} captions to another image ({pct(s.moved, s.n_pairs)})")
    kept = s.moved - s.noisy
    note = f"; {kept:,} landed on an identical caption and stay clean" if kept else ""
    out.print(f"  realised   {pct(s.noisy, s.n_pairs)} noisy ({s.noisy:,} pairs{note})")
    out.print(f"  image side {', '.join(s.image_columns)} (moved together)")
    out.print(f"  wrote      {s.output}, index {s.index_file.name}")
