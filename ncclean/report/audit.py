"""Measuring precision on one's own data: a labelling sheet drawn by partition, and estimates
from the labels.

The sheet (:func:`audit_sheet`) is one self-contained HTML page of pairs drawn at random within
each partition (:func:`stratified_sample`: the same number from each, so that every partition's
precision is measured): each pair an element with ``data-id``, labelled from the keyboard
(``m`` match, ``x`` mismatch, ``g`` generic, ``p`` partial; ``j``/``k`` to move), the labels
kept in the browser and exported as ``labels.csv`` (``id,label``).

The estimates (:func:`estimate`): a partition's precision is the share of its labelled pairs
that are truly clean (``match``) for the clean partitions and ``vague``, and truly mismatched
(``mismatch``) for ``noisy`` (``generic`` and ``partial`` are neither), with a 95% Wilson
interval. The corpus's noise rate (the share of mismatches among valid pairs) is the stratified
estimate, each partition's mismatch share weighted by its size, with a normal interval from the
stratified variance (finite-population corrected, each share shrunk as Agresti and Coull do so
that a partition with no mismatch in its sample still adds variance). The suggested cut is the
lowest ``clean_prob`` above which the labelled pairs, weighted back to their partitions' sizes,
are at least the target share truly clean.
"""

from __future__ import annotations

import csv
import math
import os
from html import escape
from pathlib import Path

import numpy as np

from ncclean.data.results import CLEAN_INSIGNIFICANT, CLEAN_SIGNIFICANT, NOISY, PARTITIONS, VAGUE
from ncclean.data.scored import Scored, fetch_rows
from ncclean.errors import BadOptionError
from ncclean.report.labels import LABEL_STYLE, label_bar, label_script

LABELS = ("match", "mismatch", "generic", "partial")
AUDITED = (CLEAN_SIGNIFICANT, CLEAN_INSIGNIFICANT, VAGUE, NOISY)
Z = 1.959964  # the normal quantile of a 95% interval
KEYS = {"m": "match", "x": "mismatch", "g": "generic", "p": "partial"}


def stratified_sample(scored: Scored, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Up to ``n`` rows, the same number from each valid partition (what a small partition
    cannot give goes to the others), drawn by ``seed``, in row order within each."""
    if n < 1:
        raise BadOptionError(f"--sample must be at least 1, got {n}")
    rng = np.random.default_rng([seed, 63])
    pools = {name: scored.rows_in(name) for name in AUDITED}
    quota = dict.fromkeys(AUDITED, 0)
    left = n
    while left > 0:
        open_ = [name for name in AUDITED if quota[name] < len(pools[name])]
        if not open_:
            break
        share = max(1, left // len(open_))
        for name in open_:
            take = min(share, len(pools[name]) - quota[name], left)
            quota[name] += take
            left -= take
    return {name: np.sort(rng.choice(pools[name], quota[name], replace=False))
            for name in AUDITED if quota[name]}


def audit_sheet(scored: Scored, sample: dict[str, np.ndarray], caption_col: str,
                image_col: str | None, title: str, thumb_size: int = 160) -> str:
    """The labelling sheet of ``sample`` (see the module docstring)."""
    from ncclean.report.images import SampledImages, image_columns

    id_col = _id_column(scored)
    columns = [id_col, caption_col, "pseudo_caption"] + image_columns(image_col)
    rows = np.concatenate(list(sample.values())) if sample else np.zeros(0, dtype=np.int64)
    values = fetch_rows(scored.source, rows, columns)
    images = SampledImages(scored, values, image_col)
    sections = []
    for name, picked in sample.items():
        cards = []
        for row in picked:
            value = values.get(int(row), {})
            uri = images.thumbnail(int(row), thumb_size)
            image = f'<img src="{uri}" alt="">' if uri else '<div class="noimg">no image</div>'
            caption = escape(str(value.get(caption_col) or ""))
            cards.append(
                f'<div class="pair" tabindex="0" data-id="{escape(str(value.get(id_col)))}" '
                f'data-partition="{name}">{image}<div class="caption">{caption}</div>'
                f'<div class="meta">{name} · clean_prob {scored.clean_prob[row]:.3f}</div>'
                f'<div class="label"></div></div>')
        size = scored.counts()[name]
        sections.append(f'<h2>{name} <small>({len(picked)} of {size:,})</small></h2>'
                        f'<div class="grid">{"".join(cards)}</div>')
    return _PAGE.format(title=escape(title), style=LABEL_STYLE,
                        bar=label_bar(f"Audit: {title}", len(rows)),
                        sections="".join(sections), script=label_script("audit:" + title))


def _id_column(scored: Scored) -> str:
    """The column that names a pair: ``id``, else the file's first."""
    names = scored.source.schema.names
    return "id" if "id" in names else names[0]


def read_labels(path: str | Path) -> dict[str, str]:
    """``id -> label`` from a CSV with columns ``id`` and ``label`` (the sheet's export);
    :class:`BadOptionError` (one line) for a missing file, missing columns or an unknown label."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames or not {"id", "label"} <= set(reader.fieldnames):
                raise BadOptionError(f"--labels {path}: needs the columns id and label (the "
                                     "audit sheet's export)")
            labels = {}
            for line, record in enumerate(reader, start=2):
                label = (record["label"] or "").strip().lower()
                if not label:
                    continue
                if label not in LABELS:
                    raise BadOptionError(f"--labels {path}, line {line}: label {label!r} is not "
                                         f"one of {', '.join(LABELS)}")
                labels[str(record["id"])] = label
    except OSError as error:
        raise BadOptionError(f"--labels {path}: {error.strerror or error}") from None
    if not labels:
        raise BadOptionError(f"--labels {path}: no labelled pair")
    return labels


def estimate(scored: Scored, labels: dict[str, str], target: float = 0.95,
             labels_file: str | os.PathLike = "") -> dict:
    """Each partition's precision and the corpus's noise rate with their 95% intervals, and the
    cut for ``target`` precision (see the module docstring). Labels of ids the file does not
    hold are counted in ``unmatched``; :class:`BadOptionError` where none is the file's (the
    labels of another corpus, read from ``labels_file``)."""
    ids = [str(v) for v in scored.source.read_columns([_id_column(scored)]).column(0)
           .to_pylist()]
    where = {pair_id: row for row, pair_id in enumerate(ids)}
    rows = np.array([where[i] for i in labels if i in where], dtype=np.int64)
    if not len(rows):
        raise BadOptionError(f"--labels {labels_file}: none of its {len(labels)} ids is a pair "
                             "of this file; label a sheet drawn from it (audit --sample N -o "
                             "SHEET.html)")
    label = np.array([labels[i] for i in labels if i in where], dtype=object)
    partitions, noise_terms, variance = {}, 0.0, 0.0
    valid = int(scored.valid.sum())
    sizes = scored.counts()
    for name in AUDITED:
        inside = scored.partition[rows] == PARTITIONS.index(name)
        size = sizes[name]
        n = int(inside.sum())
        right = int((label[inside] == ("mismatch" if name == NOISY else "match")).sum())
        partitions[name] = {"precision": right / n if n else None,
                            "ci": list(wilson(right, n)) if n else None, "labelled": n,
                            "pairs": size}
        if n and valid:
            weight = size / valid
            mismatches = int((label[inside] == "mismatch").sum())
            noise_terms += weight * mismatches / n
            shrunk = (mismatches + 2) / (n + 4)
            correction = max(0.0, 1 - n / size) if size else 0.0
            variance += weight ** 2 * shrunk * (1 - shrunk) / n * correction
    spread = Z * math.sqrt(variance)
    return {"partitions": partitions,
            "noise_rate": {"estimate": noise_terms,
                           "ci": [max(0.0, noise_terms - spread), min(1.0, noise_terms + spread)]},
            "cut": suggested_cut(scored, rows, label, target),
            "labelled": int(len(rows)), "unmatched": len(labels) - int(len(rows))}


def wilson(successes: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of ``successes`` in ``n``."""
    p = successes / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    return low, 1.0 if successes == n else min(1.0, centre + half)


def suggested_cut(scored: Scored, rows: np.ndarray, label: np.ndarray, target: float) -> dict:
    """The lowest ``clean_prob`` above which the labelled pairs, each weighted by its
    partition's size over its labelled count, are at least ``target`` truly clean; ``None``
    when no threshold reaches it."""
    if not 0 < target <= 1:
        raise BadOptionError(f"--target-precision must be in (0, 1], got {target}")
    weights = np.zeros(len(rows))
    sizes = scored.counts()
    for name in AUDITED:
        inside = scored.partition[rows] == PARTITIONS.index(name)
        if inside.any():
            weights[inside] = sizes[name] / inside.sum()
    prob = scored.clean_prob[rows].astype(np.float64)
    order = np.argsort(-prob, kind="stable")
    clean = (label[order] == "match") * weights[order]
    kept = np.cumsum(weights[order])
    precision = np.cumsum(clean) / np.maximum(kept, 1e-12)
    ok = np.flatnonzero(precision >= target)
    if not len(ok):
        return {"target": target, "clean_prob_at_least": None, "precision": None,
                "kept_share": 0.0}
    last = ok[-1]
    valid = max(1, int(scored.valid.sum()))
    return {"target": target, "clean_prob_at_least": float(prob[order][last]),
            "precision": float(precision[last]), "kept_share": float(kept[last] / valid)}


_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Audit: {title}</title><style>
body{{font-family:system-ui,sans-serif;margin:20px;color:#222}}
.grid{{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:10px}}
.pair{{border:2px solid #ddd;border-radius:4px;padding:6px;font-size:13px;overflow-wrap:anywhere}}
.pair img{{width:100%;height:150px;object-fit:contain}}
.noimg{{height:120px;display:flex;align-items:center;justify-content:center;background:#eee}}
.meta{{color:#666;font-size:11px}}{style}
</style></head><body>
{bar}
{sections}
{script}</body></html>
"""
