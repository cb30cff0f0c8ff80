"""Splitting a scored file: one Parquet file per partition, a summary, and the HTML report."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ncclean.records import Summary

PathLike = str | os.PathLike


@dataclass(frozen=True)
class SplitSummary(Summary):
    """What :func:`split_scored` wrote: one file per partition with its row count (they add up to
    the input's), the noise estimates, the most confidently noisy pairs (for ``--report``) and the
    HTML report's path if one was asked for."""

    input: Path
    out_dir: Path
    n_rows: int
    partition_counts: dict[str, int]
    files: dict[str, str]
    noise: dict
    method: str | None
    cut: dict | None
    most_noisy: list[dict]
    html: Path | None = None
    html_bytes: int | None = None


def default_split_dir(input: PathLike) -> Path:
    """``pairs.scored.parquet`` -> ``pairs.scored.split/`` beside it (a folder input: its name
    with ``.split``)."""
    input = Path(input)
    name = input.name[:-len(".parquet")] if input.name.endswith(".parquet") else input.name
    return input.with_name(name + ".split")


def recorded_columns(scored, caption_col: str | None, image_col: str | None
                     ) -> tuple[str, str | None]:
    """The caption and image columns of a scored file: those named, else the scoring run's (its
    record's options), else ``caption`` and ``image``. A named or recorded caption column the
    file lacks is a :class:`~ncclean.errors.SchemaError`; an image column it lacks is ``None``
    (a scores-only output, or one scored from vectors)."""
    from ncclean.errors import SchemaError

    recorded = (scored.sidecar.get("options") or {}).get("columns") or {}
    names = scored.source.schema.names
    caption = caption_col or recorded.get("caption") or "caption"
    if caption not in names and (caption_col or "caption" in names or
                                 scored.sidecar.get("write") != "scores"):
        named = " (the scoring run named it)" if recorded.get("caption") and not caption_col \
            else ""
        raise SchemaError(f"{scored.source.path}: no caption column {caption!r}{named}; "
                          f"columns: {', '.join(names[:12])}; name one with --caption-col")
    image = image_col or recorded.get("image") or "image"
    if image_col and image not in names:
        raise SchemaError(f"{scored.source.path}: no image column {image!r}; columns: "
                          f"{', '.join(names[:12])}")
    return caption, image if image in names else None


def split_scored(input: PathLike, out_dir: PathLike | None, *, html: PathLike | None = None,
                 image_col: str | None = None, caption_col: str | None = None,
                 per_partition: int = 40, top: int = 10, seed: int = 0) -> SplitSummary:
    """Split the scored file ``input`` into ``out_dir/<partition>.parquet`` (every partition,
    ``invalid`` included) and write ``out_dir/summary.json``; with ``html``, also the HTML report
    (:mod:`ncclean.report.html`). The files' row counts are read back and must add up to the
    input's."""
    import numpy as np
    import pyarrow.parquet as pq

    from ncclean.data.parquet import write_json
    from ncclean.data.results import NOISY
    from ncclean.data.scored import fetch_rows, open_scored
    from ncclean.data.split import split_by_partition
    from ncclean.report.noise import noise_estimate

    scored = open_scored(input)
    caption_col, image_col = recorded_columns(scored, caption_col, image_col)
    out_dir = default_split_dir(input) if out_dir is None else Path(out_dir)
    paths = split_by_partition(scored.source, out_dir)
    written = {name: pq.ParquetFile(path).metadata.num_rows for name, path in paths.items()}
    if sum(written.values()) != scored.n_rows or written != scored.counts():
        raise RuntimeError(f"split wrote {sum(written.values())} rows for {scored.n_rows} input "
                           f"rows ({written} against {scored.counts()})")
    noisy = scored.rows_in(NOISY)
    noisy = noisy[np.argsort(scored.clean_prob[noisy], kind="stable")[:top]]
    id_col = ((scored.sidecar.get("options") or {}).get("columns") or {}).get("id") or "id"
    values = fetch_rows(scored.source, noisy, list(dict.fromkeys(
        [id_col, caption_col, "pseudo_caption", "pseudo_caption_score", "clean_prob"])))
    most_noisy = [{"row": int(r), **values.get(int(r), {})} for r in noisy]
    for item in most_noisy:  # named as the summary names them, whatever the columns' names
        for column, name in ((id_col, "id"), (caption_col, "caption")):
            if column != name and column in item:
                item[name] = item.pop(column)
    html_path = html_size = None
    if html is not None:
        from ncclean.report.html import html_report, write_html

        text = html_report(scored, image_col=image_col, caption_col=caption_col,
                           per_partition=per_partition, seed=seed)
        html_path = write_html(html, text)
        html_size = html_path.stat().st_size
    summary = SplitSummary(
        input=Path(input), out_dir=out_dir, n_rows=scored.n_rows, partition_counts=written,
        files={name: str(path) for name, path in paths.items()},
        noise=noise_estimate(scored, seed).as_dict(), method=scored.sidecar.get("method"),
        cut=scored.sidecar.get("cut"), most_noisy=most_noisy, html=html_path,
        html_bytes=html_size)
    write_json(out_dir / "summary.json", summary.as_dict() | {"scoring": scored.sidecar})
    return summary
