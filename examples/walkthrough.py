"""A walk-through that saves the plots a person would look at after scoring a corpus.

Notebook-style: each step prints what it found. It scores the bundled 300 clip-art pairs
(``examples/clipart-300.parquet``) with 30% injected noise, splits them with the HTML report,
and saves the plots: PNG files drawn with matplotlib when it is installed (the ``clean_prob``
histogram by ground truth, and the ROC curve), otherwise the SVG charts the report itself
draws, one file each. Then open ``report.html`` in a browser for the thumbnails::

    python examples/walkthrough.py --out /tmp/ncclean-walkthrough
    python examples/walkthrough.py --out /tmp/ncclean-walkthrough --tiny   # synthetic, seconds
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ncclean import api

HERE = Path(__file__).resolve().parent


def save_report_svgs(report: Path, out: Path) -> list[Path]:
    """Every ``<svg>`` chart of the HTML report as its own file, ``plot-1.svg``, ... (named by the
    heading above it where there is one)."""
    text = report.read_text()
    paths = []
    for number, match in enumerate(re.finditer(r"<svg\b.*?</svg>", text, re.S), start=1):
        heading = re.findall(r"<h[23][^>]*>(.*?)</h[23]>", text[:match.start()], re.S)
        slug = re.sub(r"[^a-z0-9]+", "-", re.sub(r"<[^>]+>", "", heading[-1]).lower()).strip("-") \
            if heading else ""
        path = out / f"plot-{number}{'-' + slug[:40] if slug else ''}.svg"
        path.write_text(match.group(0))
        paths.append(path)
    return paths


def save_matplotlib_plots(scored: Path, out: Path) -> list[Path]:
    """The ``clean_prob`` histogram by ground truth and the ROC curve, as PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = pq.read_table(scored, columns=["clean_prob", "noisy_gt", "partition"])
    valid = np.array(table.column("partition").to_pylist()) != "invalid"
    prob = np.array(table.column("clean_prob").to_pylist(), dtype=float)[valid]
    noisy = np.array(table.column("noisy_gt").to_pylist(), dtype=bool)[valid]
    figure, axis = plt.subplots(figsize=(6, 3.5))
    bins = np.linspace(0, 1, 26)
    axis.hist(prob[~noisy], bins=bins, alpha=0.7, label="truly clean")
    axis.hist(prob[noisy], bins=bins, alpha=0.7, label="injected noise")
    axis.set_xlabel("clean_prob")
    axis.set_ylabel("pairs")
    axis.legend()
    histogram = out / "clean_prob.png"
    figure.savefig(histogram, dpi=100, bbox_inches="tight")
    plt.close(figure)

    order = np.argsort(prob, kind="stable")  # most suspicious first
    true_positive = np.cumsum(noisy[order]) / max(1, noisy.sum())
    false_positive = np.cumsum(~noisy[order]) / max(1, (~noisy).sum())
    figure, axis = plt.subplots(figsize=(4, 4))
    axis.plot(np.r_[0, false_positive], np.r_[0, true_positive])
    axis.plot([0, 1], [0, 1], linestyle=":")
    axis.set_xlabel("clean pairs flagged")
    axis.set_ylabel("noisy pairs flagged")
    roc = out / "roc.png"
    figure.savefig(roc, dpi=100, bbox_inches="tight")
    plt.close(figure)
    return [histogram, roc]


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="a tiny synthetic corpus instead")
    args = parser.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    print("1. The corpus, with 30% of its captions moved to other images (the truth is kept).")
    if args.tiny:
        api.synth(out / "corpus.parquet", n_images=30, captions_per_image=3, seed=0)
        source, move, params, size = out / "corpus.parquet", (), {
            "warmup_epochs": 1, "epochs": 2, "batch_size": 32, "pool_size": 64}, {
            "method": "gmm", "embed_dim": 32, "image_size": 32}  # gmm: these are its epochs
    else:
        source, move, params, size = HERE / "clipart-300.parquet", ("category",), {}, {}
    noise = api.inject_noise(source, out / "noisy.parquet", ratio=0.3, seed=0,
                             move_with_image=move)
    print(f"   {noise.realised_ratio:.1%} of the pairs are now mismatched")

    print("2. Score every pair.")
    scored = api.score(out / "noisy.parquet", out / "scored.parquet", params=params, seed=0,
                       cache_dir=out / "cache", **size)
    print(f"   partitions {scored.partition_counts}")
    print(f"   AUROC against the truth {scored.detection['auroc']:.3f}")

    print("3. Split, and write the HTML report (thumbnails of every partition).")
    api.split(out / "scored.parquet", out / "split", html=out / "report.html")
    print(f"   open {out / 'report.html'}")

    print("4. Save the plots.")
    try:
        plots = save_matplotlib_plots(out / "scored.parquet", out)
    except ImportError:
        print("   matplotlib is not installed: saving the report's own SVG charts instead")
        plots = save_report_svgs(out / "report.html", out)
    for path in plots:
        print(f"   {path}")
    return plots


if __name__ == "__main__":
    main()
