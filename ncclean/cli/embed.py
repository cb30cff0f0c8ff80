"""``ncclean embed``: add image and caption vectors to a corpus, once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ncclean.cli import options


def embed(
    input: Annotated[Path, typer.Argument(
        help="Parquet file, or a corpus of shards: a folder of Parquet files or webdataset "
        "tars, a tar, a saved dataset.", show_default=False)],
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="Parquet file to write; a folder for a corpus of shards (one "
        "output per input shard, a rerun redoing only what changed) or with --layout "
        "clip-retrieval.", show_default=False)],
    encoder: Annotated[Literal["imagenet+e5", "clip", "e5", "imagenet"] | None, typer.Option(
        help="imagenet+e5: the default pipeline's offline towers, images and captions in one "
        "pass (extras 'imagenet' and 'e5'); clip: open_clip, images and captions (extra "
        "'clip'); e5: multilingual-e5-small, captions only; imagenet: EfficientNet-Lite0, "
        "images only [default: clip when --clip-checkpoint or --clip-pretrained is given, "
        "else imagenet+e5].", show_default=False)] = None,
    half: Annotated[bool, typer.Option("--half", help="Store float16 vectors (half the size).")]
    = False,
    layout: Annotated[Literal["parquet", "clip-retrieval"], typer.Option(
        help="parquet: the input with vector columns added; clip-retrieval: img_emb/, "
        "text_emb/ .npy shards and row-aligned metadata/ Parquet.")] = "parquet",
    image_emb_out: Annotated[str, typer.Option(
        "--image-emb-out", help="Name of the image vector column written.")] = "image_emb",
    text_emb_out: Annotated[str, typer.Option(
        "--text-emb-out", help="Name of the caption vector column written.")] = "text_emb",
    shard_rows: Annotated[int, typer.Option(
        min=1, help="Rows per shard of the clip-retrieval layout.")] = 1_000_000,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    max_image_pixels: Annotated[int | None, typer.Option(
        min=1, help="Images with more pixels are not embedded [default: 89,478,485].",
        show_default=False)] = None,
    engine: Annotated[Literal["local", "ray"], typer.Option(
        help="Embed a corpus of shards here (local) or on Ray Data (ray: one actor per GPU "
        "where the cluster has GPUs).")] = "local",
    ray_address: Annotated[str | None, typer.Option(
        help="Ray cluster to use with --engine ray [default: a local one].")] = None,
    overwrite: options.Overwrite = False,
    caption_col: options.CaptionCol = "caption",
    image_col: options.ImageCol = "image",
    clip_model: options.ClipModel = "ViT-B-32",
    clip_pretrained: options.ClipPretrained = None,
    clip_checkpoint: options.ClipCheckpoint = None,
    json_: options.Json = False,
) -> None:
    """Embed every image and caption once, so that 'score' reads the vectors
    (--image-emb-col image_emb --text-emb-col text_emb) instead of computing them."""
    from ncclean import api
    from ncclean.cli.render import console, print_json, progress_bars

    with progress_bars(not json_) as progress:
        summary = api.embed(
            input, output, encoder=encoder, caption_col=caption_col, image_col=image_col,
            half=half, layout=layout, image_emb_col=image_emb_out, text_emb_col=text_emb_out,
            clip_model=clip_model, clip_pretrained=clip_pretrained,
            clip_checkpoint=clip_checkpoint, shard_rows=shard_rows, device=device,
            max_image_pixels=max_image_pixels, engine=engine, ray_address=ray_address,
            overwrite=overwrite, progress=progress)
    if json_:
        print_json(summary.as_dict())
        return
    out = console()
    sides = [f"{summary.image_col} ({summary.image_dim}-d)"] if summary.image_col else []
    if summary.text_col:
        sides.append(f"{summary.text_col} ({summary.text_dim}-d)")
    out.print(f"embedded {summary.n_rows:,} rows with {summary.encoder}: {', '.join(sides)}, "
              f"{summary.dtype}, in {summary.seconds:.1f} s")
    for reason, count in summary.problems.items():
        out.print(f"  {count:,} rows without a vector: {reason} (see the embed_problem column)")
    out.print(f"  wrote {summary.output} ({summary.layout})")
