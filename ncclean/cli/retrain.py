"""``ncclean retrain``: train a plain matcher on what the cleaner kept, measure Recall@K."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ncclean.cli import options

_TEST = "Test file columns"


def retrain(
    input: Annotated[Path | None, typer.Argument(
        help="A file written by 'ncclean score' [default: the last one it wrote from this "
        "folder].", show_default=False)] = None,
    test: Annotated[Path | None, typer.Option(
        help="Held-out test pairs (Parquet), never seen by the scoring run [default: about a "
        "tenth of the valid pairs with a unique caption, chosen by id and held out of training; "
        "see the warning it prints].", show_default=False)] = None,
    keep: Annotated[Literal["clean", "significant", "clean+vague", "weighted"] | None,
                    typer.Option(
        help="What to train on: the clean partitions, clean_significant alone (no "
        "correct-but-empty captions), clean and vague, or every pair weighted by "
        "clean_prob [default: what the scoring run's --preset says, else clean].",
        show_default=False)] = None,
    pseudo_captions: Annotated[bool, typer.Option(
        "--pseudo-captions", help="Train the noisy pairs with their suggested captions.")]
    = False,
    baseline: Annotated[bool, typer.Option(
        "--baseline", help="Also train on every pair (the raw corpus) and, with noisy_gt, on "
        "the truly clean pairs (the oracle); same seed and number of steps.")] = False,
    steps: Annotated[int, typer.Option(min=1, help="Optimiser steps of every arm.")] = 1600,
    eval_every: Annotated[int | None, typer.Option(
        min=0, help="Evaluate every N steps (at epoch ends) for each arm's learning curve, and "
        "warn when an arm is still improving at the end or has fallen from its best; 0: off.  "
        "[default: steps / 16]",
        show_default=False)] = None,
    schedule: Annotated[Literal["constant", "cosine"], typer.Option(
        help="Learning rate of every arm: constant, or a cosine decay to 0 over the steps.")]
    = "constant",
    seed: Annotated[int, typer.Option(help="Random seed: the same seed gives the same numbers.")]
    = 0,
    image_encoder: Annotated[Literal["auto", "pixels", "column", "clip", "imagenet"], typer.Option(
        help="auto: the scoring run's; pixels, column, clip or imagenet replace it (as in "
        "'score').")]
    = "auto",
    text_encoder: Annotated[Literal["auto", "tokens", "e5", "column", "clip"], typer.Option(
        help="auto: the scoring run's; tokens, e5, column or clip replace it (as in 'score').")]
    = "auto",
    matcher: Annotated[Path | None, typer.Option(
        help="Also evaluate this saved matcher as it is (e.g. the scoring run's, from 'score "
        "--save-matcher'): the method's own noise-robust training, as its paper judges it.",
        show_default=False)] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    cache_dir: Annotated[Path | None, typer.Option(
        help="Cache of decoded images [default: ~/.cache/ncclean].", show_default=False)] = None,
    caption_col: options.CaptionCol = "caption",
    image_col: options.ImageCol = "image",
    id_col: options.IdCol = None,
    image_id_col: options.ImageIdCol = None,
    image_emb_col: options.ImageEmbCol = None,
    text_emb_col: options.TextEmbCol = None,
    allow_absolute_paths: options.AllowAbsolutePaths = False,
    test_caption_col: Annotated[str | None, typer.Option(
        help="The test file's caption column [default: as the scored file's].",
        show_default=False, rich_help_panel=_TEST)] = None,
    test_image_col: Annotated[str | None, typer.Option(
        help="The test file's image column [default: as the scored file's].",
        show_default=False, rich_help_panel=_TEST)] = None,
    test_image_emb_col: Annotated[str | None, typer.Option(
        help="The test file's image embedding column [default: as the scored file's].",
        show_default=False, rich_help_panel=_TEST)] = None,
    test_text_emb_col: Annotated[str | None, typer.Option(
        help="The test file's caption embedding column [default: as the scored file's].",
        show_default=False, rich_help_panel=_TEST)] = None,
    json_: options.Json = False,
) -> None:
    """Prove the cleaning helped: Recall@K of a matcher retrained on the kept pairs, beside the
    raw corpus and the oracle with --baseline."""
    from ncclean import api
    from ncclean.cli.options import scored_input
    from ncclean.cli.render import console, print_json, progress_bars, render_retrain

    input = scored_input(input, "retrain", quiet=json_)
    test_columns = {"caption": test_caption_col, "image": test_image_col,
                    "image_emb": test_image_emb_col, "text_emb": test_text_emb_col}
    columns = options.columns(caption_col, image_col, id_col, image_id_col, image_emb_col,
                              text_emb_col, allow_absolute_paths)
    with progress_bars(not json_) as progress:
        summary = api.retrain(input, test, keep=keep, pseudo_captions=pseudo_captions,
                              baseline=baseline, columns=columns, steps=steps,
                              eval_every=eval_every, schedule=schedule, seed=seed,
                              image_encoder=image_encoder, text_encoder=text_encoder,
                              matcher=matcher, device=device, cache_dir=cache_dir or True,
                              progress=progress, test_columns=test_columns)
    if json_:
        print_json(summary.as_dict())
    else:
        render_retrain(console(), summary)
