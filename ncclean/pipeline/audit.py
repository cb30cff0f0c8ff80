"""``ncclean audit``: a labelling sheet drawn from a scored corpus, or the estimates its labels
give (:mod:`ncclean.report.audit`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ncclean.records import Summary

PathLike = str | os.PathLike


@dataclass(frozen=True)
class AuditSummary(Summary):
    """What ``audit`` did: the sheet it wrote (``sheet``, its pairs per partition), or the
    estimates from the labels (``partitions``, ``noise_rate``, ``cut``)."""

    input: Path
    sheet: Path | None = None
    sampled: dict | None = None
    partitions: dict | None = None
    noise_rate: dict | None = None
    cut: dict | None = None
    labelled: int | None = None
    unmatched: int | None = None


def audit_scored(input: PathLike, *, sample: int | None = None, output: PathLike | None = None,
                 labels: PathLike | None = None, seed: int = 0, target: float = 0.95,
                 caption_col: str | None = None, image_col: str | None = None
                 ) -> AuditSummary:
    """With ``sample`` and ``output``: write the labelling sheet of ``sample`` pairs drawn by
    partition; with ``labels``: estimate each partition's precision, the noise rate and the cut
    for ``target`` precision. Exactly one of the two."""
    from ncclean.data.scored import open_scored
    from ncclean.errors import BadOptionError
    from ncclean.pipeline.split import recorded_columns
    from ncclean.report.audit import audit_sheet, estimate, read_labels, stratified_sample
    from ncclean.report.html import write_html

    if (labels is None) == (sample is None):
        raise BadOptionError("give --sample N -o SHEET.html to draw a labelling sheet, or "
                             "--labels LABELS.csv to estimate precision from its labels")
    if sample is not None and output is None:
        raise BadOptionError("--sample needs -o SHEET.html, where the sheet is written")
    scored = open_scored(input)
    if labels is not None:
        found = estimate(scored, read_labels(labels), target, labels_file=labels)
        return AuditSummary(input=Path(input), **found)
    caption, image = recorded_columns(scored, caption_col, image_col)
    drawn = stratified_sample(scored, sample, seed)
    text = audit_sheet(scored, drawn, caption, image, title=Path(input).name)
    out = write_html(output, text)
    return AuditSummary(input=Path(input), sheet=out,
                        sampled={name: len(rows) for name, rows in drawn.items()})
