"""``ncclean score``: score every pair with a method and write the output contract."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ncclean.cli import options


def _params(values: list[str] | None) -> dict[str, str]:
    from ncclean.errors import BadOptionError

    params = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadOptionError(f"--param takes KEY=VALUE, got {item!r}")
        params[key.strip()] = value.strip()
    return params


# Options a saved fit fixes: with --fit, one named on the command line must equal the fit's
FIXED_BY_FIT = ("seed", "clean_above", "noisy_below", "noise_rate", "rare_clean_above",
                "rare_count", "noisy_recall", "review_recall", "queue_by_estimate", "preset",
                "donors")


def score(
    ctx: typer.Context,
    input: Annotated[Path, typer.Argument(help="Parquet file or folder of shards.",
                                          show_default=False)],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Parquet file to write [default: INPUT's name with .scored.parquet, "
        "beside it; never over a file 'score' did not write].", show_default=False)] = None,
    method: Annotated[str, typer.Option(
        metavar=options.METHOD_METAVAR,
        help="Method name ('ncclean methods' describes them); auto: clip on pretrained towers, "
        "gmm on towers trained from scratch.")] = "auto",
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="A method parameter as KEY=VALUE (repeatable), e.g. -p epochs=10; "
        "'ncclean methods NAME' lists them.")] = None,
    epochs: Annotated[int | None, typer.Option(
        min=1, help="Shortcut for -p epochs=N [default: the method's rule for the corpus "
        "size].", show_default=False)] = None,
    image_encoder: Annotated[Literal["auto", "pixels", "column", "clip", "imagenet"], typer.Option(
        help="pixels: a CNN trained on the images; column: --image-emb-col vectors; clip: "
        "frozen CLIP features (extra 'clip'); imagenet: frozen EfficientNet-Lite0 features "
        "(extra 'imagenet').")] = "auto",
    text_encoder: Annotated[Literal["auto", "tokens", "e5", "column", "clip"], typer.Option(
        help="tokens: a GRU over words; e5: frozen multilingual-e5-small (extra 'e5'); "
        "column: --text-emb-col vectors; clip: frozen CLIP features.")] = "auto",
    image_size: Annotated[int, typer.Option(
        min=8, help="Side of the decoded images (pixels encoder).", rich_help_panel="Matcher")]
    = 64,
    embed_dim: Annotated[int, typer.Option(
        min=2, help="Width of the joint embedding.", rich_help_panel="Matcher")] = 256,
    seed: Annotated[int, typer.Option(help="Random seed: the same seed writes the same file.")]
    = 0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    clean_above: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="clean_prob at or above this is clean, below it never: the "
        "review-recall band may raise it, and score says so. Given, it turns "
        "--queue-by-estimate off unless that is given too [default: 0.8].",
        rich_help_panel="Partition", show_default=False)] = None,
    noisy_below: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="clean_prob below this is noisy; between the two is vague. The "
        "noisy-recall band may raise it (score says so); given, it turns --queue-by-estimate "
        "off unless that is given too [default: 0.5].", rich_help_panel="Partition",
        show_default=False)] = None,
    noise_rate: Annotated[str | None, typer.Option(
        help="Cut by a noise rate instead of the thresholds (not with them): the lowest RATE "
        "share is noisy. A number, or 'auto' for the method's estimate.",
        rich_help_panel="Partition")] = None,
    rare_clean_above: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="A lower clean threshold for pairs whose caption is rare (occurs "
        "at most --rare-count times): a cut for training sets, which lose most through the rare "
        "clean pairs a high threshold drops.", rich_help_panel="Partition",
        show_default=False)] = None,
    noisy_recall: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Widen noisy to at least the lowest pairs that hold this share "
        "of the noise the scores expect (0: off) [default: 0.5].", rich_help_panel="Partition",
        show_default=False)] = None,
    review_recall: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Widen vague so that noisy and vague hold at least this share of "
        "the noise the scores expect (0: off) [default: 0.9].", rich_help_panel="Partition",
        show_default=False)] = None,
    queue_by_estimate: Annotated[bool, typer.Option(
        "--queue-by-estimate/--queue-by-thresholds", help="Where the thresholds flag more pairs "
        "than the upper end of the 95% interval of the method's noise estimate, cut noisy and "
        "vague back to its lower end (methods that give one: clip); with --clean-above or "
        "--noisy-below it moves them, and score says so [default: by estimate, by thresholds "
        "where --clean-above or --noisy-below is given].",
        rich_help_panel="Partition", show_default=False)] = True,
    preset: Annotated[Literal["review", "gate", "train"] | None, typer.Option(
        help="What the output is for; sets the cut (not with the options above) and what "
        "'retrain' trains on: review = the thresholds and recall bands [default]; gate = the "
        "noisy partition is the method's estimated share, for 'check'; train = rare captions "
        "clean from 0.3, retrain on clean_significant (docs/thresholds.md).",
        rich_help_panel="Partition",
        show_default=False)] = None,
    rare_count: Annotated[int, typer.Option(
        min=1, help="How many times a caption may occur among the valid pairs and still count "
        "as rare (--rare-clean-above; a rare clean caption is always significant under "
        "--significance specificity).", rich_help_panel="Partition")] = 2,
    significance: Annotated[Literal["specificity", "update", "off"] | None, typer.Option(
        help="How clean pairs split into significant and insignificant: specificity (does the "
        "caption single out its image; rare captions stay significant), update (SDD's "
        "memory-bank ratio), or off. Default: update for sdd, specificity otherwise.",
        rich_help_panel="Partition", show_default=False)] = None,
    significance_passes: Annotated[int, typer.Option(
        min=1, help="Shuffled passes averaged by --significance update.",
        rich_help_panel="Partition")] = 3,
    pseudo_captions: Annotated[bool, typer.Option(
        help="Suggest a caption for every noisy pair.", rich_help_panel="Partition")]
    = True,
    donors: Annotated[Literal["clean", "corpus"], typer.Option(
        help="Where suggestions come from: the clean pairs' captions (clean), or every caption "
        "of the corpus but the generic ones (corpus: fewer collection labels, fewer right "
        "suggestions on clip art).", rich_help_panel="Partition")] = "clean",
    load_matcher: Annotated[Path | None, typer.Option(
        help="Start from a saved matcher (.safetensors) instead of training from scratch.",
        rich_help_panel="Matcher")] = None,
    save_matcher: Annotated[Path | None, typer.Option(
        help="Save the trained matcher here (.safetensors + .json).",
        rich_help_panel="Matcher")] = None,
    checkpoint_dir: Annotated[Path | None, typer.Option(
        help="Save the training state here after every epoch.", rich_help_panel="Matcher")]
    = None,
    resume: Annotated[bool, typer.Option(
        help="Continue from the state in --checkpoint-dir.", rich_help_panel="Matcher")] = False,
    cache_dir: Annotated[Path | None, typer.Option(
        help="Where decoded images and frozen text vectors are cached [default: "
        "$NCCLEAN_CACHE or ~/.cache/ncclean].", show_default=False)] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the cache.")]
    = False,
    max_image_pixels: Annotated[int | None, typer.Option(
        min=1, help="Images with more pixels are invalid [default: 89,478,485].",
        show_default=False)] = None,
    caption_col: options.CaptionCol = "caption",
    image_col: options.ImageCol = "image",
    id_col: options.IdCol = None,
    image_id_col: options.ImageIdCol = None,
    image_emb_col: options.ImageEmbCol = None,
    text_emb_col: options.TextEmbCol = None,
    allow_absolute_paths: options.AllowAbsolutePaths = False,
    clip_model: options.ClipModel = "ViT-B-32",
    clip_pretrained: options.ClipPretrained = None,
    clip_checkpoint: options.ClipCheckpoint = None,
    finetune: Annotated[Literal["heads", "full"], typer.Option(
        help="With CLIP: train small heads on its frozen features, or the whole model (meant "
        "for a GPU).", rich_help_panel="CLIP")] = "heads",
    strict: options.Strict = False,
    json_: options.Json = False,
    # scaling (ncclean/pipeline/sharded.py, docs/scaling.md)
    fit_sample: Annotated[str, typer.Option(
        metavar="N|auto|all",
        help="Fit on every pair up to N and a sample (by id hash) beyond; apply to all. auto: "
        "250,000 for a corpus of vector columns larger than that; all: every pair.",
        rich_help_panel="Scaling")] = "auto",
    write: Annotated[Literal["all", "scores"], typer.Option(
        help="What the output holds: every input column, then ncclean's (all); or the id "
        "column and ncclean's columns only (scores), to join on the id, when rewriting every "
        "input column is the cost. split, check and split --report read either; retrain needs "
        "all.", rich_help_panel="Scaling")] = "all",
    overwrite: options.Overwrite = False,
    save_fit: Annotated[Path | None, typer.Option(
        help="Save the fit (a folder) to apply later with --fit.",
        rich_help_panel="Scaling")] = None,
    fit: Annotated[Path | None, typer.Option(
        help="Apply this saved fit: no training.", rich_help_panel="Scaling")] = None,
    engine: Annotated[Literal["local", "ray"], typer.Option(
        help="Apply shard by shard here (local) or on Ray Data (ray).",
        rich_help_panel="Scaling")] = "local",
    ray_address: Annotated[str | None, typer.Option(
        help="Ray cluster to use with --engine ray [default: a local one].",
        rich_help_panel="Scaling")] = None,
) -> None:
    """Score every pair and write the input's rows back with clean_prob, partition and the
    method's columns (plus OUTPUT.json); later split, retrain and check without an input read
    this file."""
    from ncclean import api
    from ncclean.cli.render import console, print_json, progress_bars, render_score, warning_line
    from ncclean.cli.state import state
    from ncclean.errors import BadOptionError
    from ncclean.options import (
        DEFAULT_CUT,
        MatcherOptions,
        RunOptions,
        ScaleOptions,
        StageOptions,
        preset_cut,
    )

    given = options.given(ctx, FIXED_BY_FIT)
    if noise_rate is not None and (clean_above is not None or noisy_below is not None):
        threshold = "--clean-above" if clean_above is not None else "--noisy-below"
        raise BadOptionError(f"--noise-rate cuts by a share and wins over {threshold}, which "
                             "would be ignored; give one of them")
    params = _params(param)
    if epochs is not None:
        if params.get("epochs", str(epochs)) != str(epochs):
            from ncclean.errors import BadOptionError

            raise BadOptionError(f"--epochs {epochs} and -p epochs={params['epochs']} disagree; "
                                 "give one of them")
        params["epochs"] = str(epochs)
    rate: float | str | None = noise_rate
    if noise_rate is not None and noise_rate != "auto":
        try:
            rate = float(noise_rate)
        except ValueError:
            rate = noise_rate  # the library says what is wrong with it
    columns = options.columns(caption_col, image_col, id_col, image_id_col, image_emb_col,
                              text_emb_col, allow_absolute_paths)
    matcher = MatcherOptions(
        image_encoder=image_encoder, text_encoder=text_encoder, embed_dim=embed_dim,
        image_size=image_size, clip_model=clip_model, clip_pretrained=clip_pretrained,
        clip_checkpoint=clip_checkpoint, finetune=finetune, load_matcher=load_matcher)
    if preset is not None:
        cut_options = (("--clean-above", clean_above), ("--noisy-below", noisy_below),
                       ("--noise-rate", noise_rate), ("--rare-clean-above", rare_clean_above),
                       ("--noisy-recall", noisy_recall), ("--review-recall", review_recall))
        named_options = [name for name, value in cut_options if value is not None] + (
            [f"--queue-by-{'estimate' if queue_by_estimate else 'thresholds'}"]
            if "queue_by_estimate" in given else [])
        if named_options:
            raise BadOptionError(f"--preset {preset} sets the cut, so {named_options[0]} would "
                                 "be ignored; give either --preset or the cut options")
        cut = preset_cut(preset, rare_count)
    else:
        other = "--noise-rate" if noise_rate is not None else (
            "--rare-clean-above" if rare_clean_above is not None else None)
        bands = [("--noisy-recall", noisy_recall), ("--review-recall", review_recall)]
        given_bands = [name for name, value in bands if value]
        if other and given_bands:
            raise BadOptionError(f"{given_bands[0]} widens the review cut's thresholds; {other} "
                                 "makes another cut, so give one or the other")

        def recall(value: float | None, default: float | None) -> float | None:
            # 0 turns a band off; Cut drops the default's with a share or training cut
            return default if value is None else (value or None)

        # the thresholds given turn the queue by the estimate off unless it is given too
        # (Cut.with_options): the thresholds typed are the thresholds applied
        named = {name: value for name, value in (("clean_above", clean_above),
                                                 ("noisy_below", noisy_below)) if value is not None}
        if "queue_by_estimate" in given:
            named["queue_by_estimate"] = queue_by_estimate
        cut = DEFAULT_CUT.with_options(
            noise_rate=rate, rare_clean_above=rare_clean_above, rare_count=rare_count,
            noisy_recall=recall(noisy_recall, DEFAULT_CUT.noisy_recall),
            review_recall=recall(review_recall, DEFAULT_CUT.review_recall), **named)
    stages = StageOptions(significance=significance, significance_passes=significance_passes,
                          pseudo_captions=pseudo_captions, donors=donors)
    run = RunOptions(seed=seed, device=device, cache_dir=False if no_cache else (cache_dir or True),
                     checkpoint_dir=checkpoint_dir, resume=resume, strict=strict,
                     max_image_pixels=max_image_pixels, save_matcher=save_matcher,
                     write=write, overwrite=overwrite)
    scale = ScaleOptions(fit_sample=int(fit_sample) if fit_sample.strip().isdigit() else fit_sample,
                         save_fit=save_fit, fit=fit, engine=engine,
                         ray_address=ray_address)
    if output is not None and options.folder_asked(state.argv):
        output = f"{output}/"  # -o DIR/, which the Path dropped: a folder (api.score)
    early = api.resume_warning(input, output, run, scale)
    if early:
        warning_line(early)
    with progress_bars(not json_) as progress:
        summary = api.score(input, output, method, params, columns=columns, matcher=matcher,
                            cut=cut, stages=stages, run=run, scale=scale, progress=progress,
                            given=given, argv=state.argv)
    api.remember_scored(summary.output)
    if json_:
        print_json(summary.as_dict())
        return
    render_score(console(), summary)
