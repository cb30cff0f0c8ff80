"""How long the default review queue is, against injected noise: issue 62's fourth bar.

Scores each corpus once with the default command (``clip`` on the ImageNet + e5 towers, or on
their vectors already in the corpus with ``--vectors``) and reads, from the same scores, the
partitions of two cuts: the thresholds widened by the recall bands (``--queue-by-thresholds``,
the cut before issue 62) and the default, which cuts the queue back to the lower end of the noise
estimate's interval where the thresholds flag more pairs than the estimate. Prints one row per
corpus: the valid pairs, the injected noise, the estimate with its 95% interval, AUROC, and for
each cut the share of truly clean pairs in the clean partitions, ``(vague + noisy) / true
noise``, the share of the noise in ``vague`` and ``noisy``, and the precision of ``noisy``
(against ``noisy_gt``, over valid pairs)::

    ncclean inject-noise examples/clipart-300.parquet -o noisy300.parquet --ratio 0.3 \\
        --seed 0 --move-with-image category
    python benchmarks/review_queue.py noisy300.parquet --seed 0 --cache-dir cache
    python benchmarks/review_queue.py ee1000-0.3.parquet ... --vectors --json rows.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from rule_variants import cut_partitions

from ncclean import api
from ncclean.api import Columns, Cut, RunOptions, StageOptions


def queue_metrics(parts: np.ndarray, truth: np.ndarray) -> dict:
    """Clean kept, queue over true noise, the share of the noise queued and ``noisy``'s
    precision of partition names ``parts`` against ``truth`` (both over the valid pairs)."""
    clean = np.char.startswith(parts.astype(str), "clean")
    noisy = parts == "noisy"
    return {"clean_kept": float((clean & ~truth).sum() / max((~truth).sum(), 1)),
            "queue_over_noise": float((~clean).sum() / max(truth.sum(), 1)),
            "noise_queued": float((~clean & truth).sum() / max(truth.sum(), 1)),
            "noisy_precision": float(truth[noisy].mean()) if noisy.any() else float("nan"),
            "queue": int((~clean).sum()), "noisy": int(noisy.sum())}


def measure(path: Path, seed: int, vectors: bool, cache_dir: str | None) -> dict:
    """Score ``path`` with the default and measure both cuts on its scores."""
    columns = Columns(image_emb="image_emb", text_emb="text_emb") if vectors else Columns()
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "scored.parquet"
        summary = api.score(path, out, columns=columns,
                            run=RunOptions(seed=seed, cache_dir=cache_dir or True),
                            stages=StageOptions(significance="off", pseudo_captions=False))
        record = json.loads(Path(f"{out}.json").read_text())
        table = pq.read_table(out, columns=["clean_prob", "partition", "noisy_gt"]).to_pydict()
    parts = np.array(table["partition"], dtype=object)
    valid = parts != "invalid"
    clean_prob = np.array(table["clean_prob"], dtype=np.float64)[valid]
    truth = np.array(table["noisy_gt"], dtype=bool)[valid]
    resolved = Cut.from_record(record["cut"])
    before = cut_partitions(clean_prob, replace(resolved, queue_by_estimate=False))
    return {"corpus": path.name, "pairs": int(valid.sum()), "true_noise": float(truth.mean()),
            "estimate": record["estimated_noise_rate"],
            "ci95": record.get("estimated_noise_ci95"),
            "auroc": summary.detection["auroc"], "cut": record["cut"],
            "before": queue_metrics(before, truth), "after": queue_metrics(parts[valid], truth)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", type=Path, nargs="+", help="noisy corpora with noisy_gt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vectors", action="store_true",
                        help="read image_emb and text_emb columns instead of the images")
    parser.add_argument("--cache-dir", help="the embedding cache (default: ncclean's)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    print("| corpus | pairs | true noise | estimate (95% CI) | AUROC | clean kept before / after "
          "| (vague+noisy)/noise before / after | noise queued before / after "
          "| noisy precision before / after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.corpora:
        row = measure(path, args.seed, args.vectors, args.cache_dir)
        rows.append(row)
        lo, hi = row["ci95"] or (float("nan"), float("nan"))
        b, a = row["before"], row["after"]
        print(f"| {row['corpus']} | {row['pairs']:,} | {row['true_noise']:.1%} | "
              f"{row['estimate']:.1%} ({lo:.1%} - {hi:.1%}) | {row['auroc']:.3f} | "
              f"{b['clean_kept']:.3f} / **{a['clean_kept']:.3f}** | "
              f"{b['queue_over_noise']:.2f} / **{a['queue_over_noise']:.2f}** | "
              f"{b['noise_queued']:.3f} / {a['noise_queued']:.3f} | "
              f"{b['noisy_precision']:.3f} / {a['noisy_precision']:.3f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
