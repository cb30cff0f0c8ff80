"""``ncclean synth``: write the synthetic shapes corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ncclean.cli.options import Json


def synth(
    output: Annotated[Path, typer.Option("-o", "--output", help="Parquet file to write.")],
    n_images: Annotated[int, typer.Option(min=1, help="Number of images.")] = 500,
    captions_per_image: Annotated[int, typer.Option(min=1, help="Captions per image.")] = 5,
    lang: Annotated[Literal["en", "zh", "mixed"], typer.Option(
        help="Caption language: English, Chinese, or both (also within one caption).")] = "en",
    seed: Annotated[int, typer.Option(help="Random seed: the same seed writes the same file.")] = 0,
    json_: Json = False,
) -> None:
    """Write a corpus of 64 px coloured-shape pictures with generated captions and ground truth
    (columns id, image_id, image, caption, scene)."""
    from ncclean import api
    from ncclean.cli.render import console, print_json

    summary = api.synth(output, n_images=n_images, captions_per_image=captions_per_image,
                        lang=lang, seed=seed)
    if json_:
        print_json(summary.as_dict())
        return
    console().print(f"wrote {summary.n_pairs:,} pairs ({summary.n_images:,} images, "
                    f"{lang} captions, seed {seed}) to {summary.output}")
