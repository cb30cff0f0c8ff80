"""``ncclean audit``: measure precision on your own data (``docs/audit.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ncclean.cli import options


def audit(
    input: Annotated[Path | None, typer.Argument(
        help="A file written by 'ncclean score' [default: the last one it wrote from this "
        "folder].", show_default=False)] = None,
    sample: Annotated[int | None, typer.Option(
        min=1, help="Draw this many pairs, the same number from each partition, into a "
        "labelling sheet (-o).", show_default=False)] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="The labelling sheet to write (HTML).", show_default=False)]
    = None,
    labels: Annotated[Path | None, typer.Option(
        help="The sheet's exported labels (CSV: id,label; match, mismatch, generic, partial): "
        "estimate each partition's precision and the noise rate.", show_default=False)] = None,
    target_precision: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="With --labels: suggest the clean_prob cut above which pairs are "
        "this share truly clean.")] = 0.95,
    seed: Annotated[int, typer.Option(help="Seed of the sample.")] = 0,
    caption_col: options.RecordedCaptionCol = None,
    image_col: options.RecordedImageCol = None,
    json_: options.Json = False,
) -> None:
    """Write a labelling sheet drawn by partition (--sample N -o sheet.html), or estimate each
    partition's precision and the corpus's noise rate, with 95% intervals, from its labels
    (--labels labels.csv)."""
    from ncclean import api
    from ncclean.cli.options import scored_input
    from ncclean.cli.render import console, pct, print_json

    input = scored_input(input, "audit", quiet=json_)
    summary = api.audit(input, sample=sample, output=output, labels=labels, seed=seed,
                        target_precision=target_precision, caption_col=caption_col,
                        image_col=image_col)
    if json_:
        print_json({k: v for k, v in summary.as_dict().items() if v is not None})
        return
    out = console()
    if summary.sheet is not None:
        drawn = ", ".join(f"{name} {n}" for name, n in summary.sampled.items())
        out.print(f"wrote {summary.sheet}: {sum(summary.sampled.values())} pairs ({drawn}); "
                  "label with m / x / g / p, then Export labels.csv")
        return
    for name, found in summary.partitions.items():
        if found["labelled"]:
            low, high = found["ci"]
            out.print(f"  {name:<20} precision {pct(found['precision'], 1)} "
                      f"[{pct(low, 1)}, {pct(high, 1)}] from {found['labelled']} labelled")
    noise = summary.noise_rate
    out.print(f"  noise rate {pct(noise['estimate'], 1)} [{pct(noise['ci'][0], 1)}, "
              f"{pct(noise['ci'][1], 1)}] ({summary.labelled} labelled pairs)")
    if summary.unmatched:
        out.print(f"  {summary.unmatched} labels ignored: their ids are not pairs of {input}")
    cut = summary.cut
    if cut["clean_prob_at_least"] is not None:
        out.print(f"  for {pct(cut['target'], 1)} precision: keep clean_prob >= "
                  f"{cut['clean_prob_at_least']:.3f} ({pct(cut['kept_share'], 1)} of valid pairs)")
    else:
        out.print(f"  no clean_prob cut reaches {pct(cut['target'], 1)} precision on these labels")
