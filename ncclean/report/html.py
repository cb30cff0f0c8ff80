"""The HTML report of a scored corpus: one self-contained file (charts as inline SVG, thumbnails
as data URIs, no network), sampled so that its size does not grow with the corpus.

The review queue comes first: a bar with the partitions' counts as links, then a gallery per
partition, ``noisy`` and ``vague`` first, each worst first (thumbnail, caption, score, the
suggested caption with its score, and where ``noisy_gt`` exists whether the pair was truly
mismatched). Each pair is labelled from the keyboard (the page's one script,
:mod:`ncclean.report.labels`: kept in the browser, exported as the ``labels.csv``
that ``ncclean audit --labels`` reads). Then the run (method, thresholds, counts, noise
estimates); the partitions' shares by writing system where the captions use several; the
distribution of ``clean_prob`` coloured by partition with the cut thresholds;
the method's per-pair loss with the fitted mixture (when the sidecar has one); against
``noisy_gt`` when present, the ROC curve and a partition-by-truth table.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

import numpy as np

from ncclean.data.results import PARTITIONS
from ncclean.data.scored import Scored, fetch_rows
from ncclean.data.scripts import NAMES, OTHER, writing_systems
from ncclean.report.images import SampledImages, image_columns
from ncclean.report.noise import describe as describe_noise
from ncclean.report.noise import noise_estimate
from ncclean.report.svg import Chart

COLOURS = {"clean_significant": "#2a9d8f", "clean_insignificant": "#8ab17d",
           "vague": "#e9c46a", "noisy": "#e76f51", "invalid": "#9e9e9e"}
MAX_CAPTION = 300
QUEUE = ("noisy", "vague", "clean_significant", "clean_insignificant", "invalid")
IMAGE_BUDGET = 12_000_000  # bytes of inlined thumbnails, whatever the corpus size
SYSTEM_SAMPLE = 20_000  # captions read for the table by writing system
SYSTEM_PAIRS = 20  # sampled pairs a writing system needs to be shown

_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
.gallery{display:grid;grid-template-columns:repeat(auto-fill,minmax(180px,1fr));gap:10px}
.card{border:1px solid #ddd;border-radius:4px;padding:6px;font-size:12px;overflow-wrap:anywhere}
.card img{width:100%;height:150px;object-fit:contain;background:#fff}
.noimg{height:120px;display:flex;align-items:center;justify-content:center;background:#eee}
.score{color:#555}.pseudo{color:#1d6b3a}.truth{font-size:11px}.truth.bad{color:#b23a1e}
.truth.good{color:#1d6b3a}.card{border-width:2px}.swatch{display:inline-block;width:10px;height:10px}
"""


def sample_rows(scored: Scored, per_partition: int, seed: int) -> dict[str, np.ndarray]:
    """Up to ``per_partition`` rows of each partition, drawn by seed, in ``clean_prob`` order
    (the most confidently noisy first)."""
    rng = np.random.default_rng([seed, 7])
    out = {}
    for name in PARTITIONS:
        rows = scored.rows_in(name)
        if len(rows) > per_partition:
            rows = np.sort(rng.choice(rows, per_partition, replace=False))
        prob = np.nan_to_num(scored.clean_prob[rows], nan=2.0)
        out[name] = rows[np.argsort(prob, kind="stable")]
    return out


def html_report(scored: Scored, *, image_col: str = "image", caption_col: str = "caption",
                per_partition: int = 40, thumb_size: int = 128, seed: int = 0) -> str:
    """The report as one HTML string."""
    counts = scored.counts()
    n = scored.n_rows
    side = scored.sidecar
    estimate = noise_estimate(scored, seed)
    from ncclean.report.labels import LABEL_STYLE, label_bar, label_script

    links = "".join(f" · <a href='#{name}'>{name} {counts[name]:,}</a>" for name in QUEUE
                    if counts.get(name)) + " · <a href='#run'>the run</a>"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>ncclean report: {escape(scored.source.path.name)}</title>"
             f"<style>{_STYLE}{LABEL_STYLE}</style></head><body>",
             label_bar(f"ncclean report: {scored.source.path.name}", n, links),
             f"<h1>Review queue: {escape(str(scored.source.path))}</h1>"]
    if scored.scores_only:  # score --write scores: no captions or images to show
        parts.append("<p>This file holds ncclean's columns only (score --write "
                     "scores): the pairs below show ids and scores, not captions or images; "
                     "score with --write all to see them.</p>")
    parts.append(_galleries(scored, image_col, caption_col, per_partition, thumb_size, seed))
    parts.append("<h2 id='run'>The run</h2>" + _run_table(side, counts, n, estimate))
    systems = _by_writing_system(scored, caption_col, seed)
    if systems:
        parts.append("<h2>By writing system</h2>" + systems)
    parts.append("<h2>Clean probability by partition</h2>" + _probability_chart(scored, side))
    mixture = _mixture_chart(scored, side)
    if mixture:
        parts.append("<h2>Per-pair loss and the fitted mixture</h2>" + mixture)
    if scored.noisy_gt is not None:
        parts.append("<h2>Against the injected noise (noisy_gt)</h2>" + _truth_section(scored))
    parts.append(label_script("report:" + str(scored.source.path.name)))
    parts.append("</body></html>")
    return "\n".join(parts)


def _run_table(side: dict, counts: dict[str, int], n: int, estimate) -> str:
    cut = side.get("cut") or {}
    clean_above, noisy_below = _thresholds(cut)
    rows = [("method", side.get("method", "?")), ("seed", side.get("seed", "?")),
            ("clean at or above", _digits(clean_above)), ("noisy below", _digits(noisy_below)),
            ("the recall bands", _bands(cut)),
            ("cut by noise rate", cut.get("noise_rate")),
            ("clean at or above, captions seen at most "
             f"{cut.get('rare_count')} times", cut.get("rare_clean_above"))]
    rows.append((f"estimated noise rate ({estimate.source})",
                 describe_noise(estimate.as_dict())))
    run = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(str(v))}</td></tr>"
                  for k, v in rows if v is not None)
    part = "".join(
        f"<tr><td><span class='swatch' style='background:{COLOURS[name]}'></span> {name}</td>"
        f"<td>{count:,}</td><td>{100 * count / max(n, 1):.1f}%</td></tr>"
        for name, count in counts.items())
    return (f"<table>{run}</table><h2>Partitions</h2><table><tr><th>partition</th><th>pairs</th>"
            f"<th>share</th></tr>{part}<tr><td>total</td><td>{n:,}</td><td>100%</td></tr></table>")


def _by_writing_system(scored: Scored, caption_col: str, seed: int) -> str | None:
    """Where the captions are written in two or more systems (:mod:`ncclean.data.scripts`) with
    :data:`SYSTEM_PAIRS` valid pairs each, in a seeded sample of :data:`SYSTEM_SAMPLE`: each
    one's shares of the partitions, so that a language the matcher reads worse shows."""
    if scored.scores_only or caption_col not in scored.source.schema.names:
        return None
    valid = np.flatnonzero(scored.valid)
    rows = valid if len(valid) <= SYSTEM_SAMPLE else np.sort(
        np.random.default_rng([seed, 11]).choice(valid, SYSTEM_SAMPLE, replace=False))
    captions = fetch_rows(scored.source, rows, [caption_col])
    codes = writing_systems([captions[int(r)].get(caption_col) for r in rows])
    found, sizes = np.unique(codes, return_counts=True)
    shown = [code for code, size in sorted(zip(found, sizes, strict=True), key=lambda c: -c[1])
             if code != OTHER and size >= SYSTEM_PAIRS]  # the largest first
    if len(shown) < 2:
        return None
    partition = scored.partition[rows]
    groups = (("clean", ("clean_significant", "clean_insignificant")), ("vague", ("vague",)),
              ("noisy", ("noisy",)))
    partition_codes = [[PARTITIONS.index(p) for p in names] for _, names in groups]
    truth = None if scored.noisy_gt is None else scored.noisy_gt[rows]
    head = "".join(f"<th>{name}</th>" for name, _ in groups) + (
        "" if truth is None else "<th>truly noisy</th><th>AUROC</th>")
    body = ""
    for code in shown:
        mine = codes == code
        cells = "".join(f"<td>{100 * np.isin(partition[mine], codes_of).mean():.1f}%</td>"
                        for codes_of in partition_codes)
        if truth is not None:
            auroc = _auroc(truth[mine], scored.clean_prob[rows][mine])
            cells += f"<td>{100 * truth[mine].mean():.1f}%</td><td>{auroc}</td>"
        body += f"<tr><td>{NAMES[code]}</td><td>{int(mine.sum()):,}</td>{cells}</tr>"
    sampled = f" (a seeded sample of {len(rows):,} valid pairs)" if len(rows) < len(valid) \
        else ""
    return (f"<p>Captions by the script most of their letters are written in{sampled}.</p>"
            f"<table><tr><th>writing system</th><th>pairs</th>{head}</tr>{body}</table>")


def _auroc(truth: np.ndarray, prob: np.ndarray) -> str:
    """``clean_prob``'s AUROC for ``noisy_gt``, or a dash where one class is missing."""
    from sklearn.metrics import roc_auc_score

    scored = np.isfinite(prob)
    truth, prob = truth[scored], prob[scored]
    return f"{roc_auc_score(truth, -prob):.3f}" if 0 < truth.sum() < len(truth) else "-"


def _probability_chart(scored: Scored, side: dict) -> str:
    edges = np.linspace(0, 1, 51)
    layers = []
    for name in PARTITIONS[:-1]:
        values = scored.clean_prob[scored.rows_in(name)]
        layers.append((name, COLOURS[name], np.histogram(values, edges)[0].astype(float)))
    top = max(1.0, float(np.sum([c for _, _, c in layers], axis=0).max()))
    chart = Chart(0, 1, top * 1.05, "clean_prob", "pairs")
    chart.stacked_bars(edges, layers)
    clean_above, noisy_below = _thresholds(side.get("cut") or {})
    for key, value in (("noisy_below", noisy_below), ("clean_above", clean_above)):
        if value is not None:
            chart.marker(value, f"{key} {value:.4g}")
    return chart.svg()


def _bands(cut: dict) -> str | None:
    """The recall bands of a sidecar's cut in words, ``None`` where there were none."""
    from ncclean.options import Cut

    if cut.get("recall_clean_above") is None and cut.get("recall_noisy_below") is None:
        return None
    return Cut.from_record(cut).describe_bands()


def _digits(value: float | None) -> str | None:
    return None if value is None else f"{value:.6g}"


def _thresholds(cut: dict) -> tuple[float | None, float | None]:
    """``(clean_above, noisy_below)`` in force for a sidecar's cut (the recall bands
    included), ``(None, None)`` for a noise-rate cut or none."""
    from ncclean.options import Cut

    if not isinstance(cut.get("clean_above"), (int, float)) or cut.get("noise_rate") is not None:
        return None, None
    return Cut.from_record(cut).thresholds()


def _gaussian(x: np.ndarray, mean: float, var: float) -> np.ndarray:
    return np.exp(-(x - mean) ** 2 / (2 * var)) / math.sqrt(2 * math.pi * var)


def _mixture_chart(scored: Scored, side: dict) -> str | None:
    method = side.get("method")
    mixtures = (side.get("report") or {}).get("mixtures") or []
    column = f"{method}_loss"
    if not mixtures or column not in scored.source.schema.names:
        return None
    fit = mixtures[0]
    loss = scored.source.read_columns([column]).column(0).to_numpy(zero_copy_only=False)
    loss = loss[np.isfinite(loss)].astype(np.float64)
    if len(loss) == 0 or fit["high"] <= fit["low"]:
        return None
    normal = np.clip((loss - fit["low"]) / (fit["high"] - fit["low"]), 0, 1)
    edges = np.linspace(0, 1, 51)
    density = np.histogram(normal, edges, density=True)[0]
    xs = np.linspace(0, 1, 200)
    clean = fit["clean_weight"] * _gaussian(xs, fit["clean_mean"], fit["clean_var"])
    noisy = fit["noisy_weight"] * _gaussian(xs, fit["noisy_mean"], fit["noisy_var"])
    chart = Chart(0, 1, float(max(density.max(), (clean + noisy).max())) * 1.05,
                  "per-pair loss, min-max normalised", "density")
    chart.stacked_bars(edges, [("pairs", "#b0bec5", density)])
    chart.curve(xs, clean, COLOURS["clean_significant"], "clean component")
    chart.curve(xs, noisy, COLOURS["noisy"], "noisy component")
    chart.curve(xs, clean + noisy, "#333", "mixture", dashed=True)
    return (chart.svg() + f"<p>The first network's mixture (clean mean {fit['clean_mean']:.3f}, "
            f"noisy mean {fit['noisy_mean']:.3f}, noisy weight {fit['noisy_weight']:.1%}); the "
            f"histogram is the loss averaged over the networks.</p>")


def _truth_section(scored: Scored) -> str:
    from sklearn.metrics import roc_curve

    valid = scored.valid & np.isfinite(scored.clean_prob)
    truth, prob = scored.noisy_gt[valid], scored.clean_prob[valid]
    out = []
    if 0 < truth.sum() < len(truth):
        fpr, tpr, _ = roc_curve(truth, -prob)
        keep = np.unique(np.linspace(0, len(fpr) - 1, min(len(fpr), 400)).astype(int))
        chart = Chart(0, 1, 1, "false positive rate", "true positive rate")
        chart.curve(np.array([0, 1]), np.array([0, 1]), "#bbb", dashed=True)
        chart.curve(fpr[keep], tpr[keep], COLOURS["noisy"],
                    f"AUROC {_auroc(truth, prob)}")
        out.append(chart.svg())
    rows = []
    for name in PARTITIONS:
        members = scored.partition == PARTITIONS.index(name)
        noisy = int((members & scored.noisy_gt).sum())
        total = int(members.sum())
        rows.append(f"<tr><td>{name}</td><td>{total - noisy:,}</td><td>{noisy:,}</td>"
                    f"<td>{100 * noisy / total if total else 0:.1f}%</td></tr>")
    out.append("<table><tr><th>partition</th><th>truly clean</th><th>truly noisy</th>"
               "<th>noisy share</th></tr>" + "".join(rows) + "</table>")
    return "".join(out)


def _galleries(scored: Scored, image_col: str, caption_col: str, per_partition: int,
               thumb_size: int, seed: int) -> str:
    samples = sample_rows(scored, per_partition, seed)
    wanted = np.concatenate(list(samples.values())) if samples else np.array([], dtype=np.int64)
    columns = [caption_col, "id", "clean_prob", "significance", "pseudo_caption",
               "pseudo_caption_score", "invalid_reason"] + image_columns(image_col)
    values = fetch_rows(scored.source, wanted, columns)
    images = SampledImages(scored, values, image_col)
    spent = 0
    out = []
    for name in QUEUE:
        rows = samples[name]
        total = int((scored.partition == PARTITIONS.index(name)).sum())
        out.append(f"<h2 id='{name}'>{name}: {len(rows)} of {total:,} pairs</h2>")
        if not len(rows):
            out.append("<p>none</p>")
            continue
        cards = []
        for row in rows:
            row_values = values.get(int(row), {})
            uri = None
            if spent < IMAGE_BUDGET:  # a row without a usable image shows a placeholder
                uri = images.thumbnail(int(row), thumb_size)
                spent += len(uri or "")
            truth = None if scored.noisy_gt is None else bool(scored.noisy_gt[row])
            cards.append(_card(row, row_values, uri, caption_col, truth))
        out.append("<div class='gallery'>" + "".join(cards) + "</div>")
    return "\n".join(out)


def _card(row: int, values: dict, uri: str | None, caption_col: str,
          truth: bool | None = None) -> str:
    def short(text) -> str:
        text = "" if text is None else str(text)
        return escape(text if len(text) <= MAX_CAPTION else text[:MAX_CAPTION] + "...")

    image = f"<img src='{uri}' alt='row {row}'>" if uri else "<div class='noimg'>no image</div>"
    lines = [image, f"<div>{short(values.get(caption_col))}</div>"]
    prob = values.get("clean_prob")
    detail = f"row {row}" + (f", id {escape(str(values['id']))}" if values.get("id") else "")
    if prob is not None:
        detail += f", clean_prob {prob:.3f}"
    if values.get("significance") is not None:
        detail += f", significance {values['significance']:.2f}"
    lines.append(f"<div class='score'>{detail}</div>")
    if values.get("pseudo_caption") is not None:
        lines.append(f"<div class='pseudo'>suggested: {short(values['pseudo_caption'])} "
                     f"({values.get('pseudo_caption_score') or 0:.2f})</div>")
    if values.get("invalid_reason"):
        lines.append(f"<div class='score'>{short(values['invalid_reason'])}</div>")
    if truth is not None:
        lines.append(f"<div class='truth {'bad' if truth else 'good'}'>truly "
                     f"{'mismatched' if truth else 'matched'} (noisy_gt)</div>")
    lines.append("<div class='label'></div>")
    pair_id = escape(str(values["id"]) if values.get("id") is not None else f"row {row}")
    return (f"<div class='card pair' tabindex='0' data-id='{pair_id}'>" + "".join(lines)
            + "</div>")


def write_html(path: str | Path, text: str) -> Path:
    from ncclean.data.parquet import atomic_path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
