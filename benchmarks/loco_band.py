"""Leave-one-family-out tables of the two rules of the band of a quarter to one width of entries
(corpora without conventions ranked in sample: the CCA's ridge, and one width or the four
averaged), from the runs of ``rule_flips.py`` and ``width_seeds.py`` on its corpora
(``benchmarks/results/rules.md``, "The band's rules left out by family").

    python benchmarks/loco_band.py ridge benchmarks/results/rule-flips-in-sample.jsonl
    python benchmarks/loco_band.py width benchmarks/results/width-in-sample.jsonl

Each family of corpora (``loco.py``) in turn is held out; the option chosen on the others is the
one with the best mean AUROC (as ``loco_rules.py`` chooses) or the one whose worst gap to each
corpus's best option is smallest, and each held-out corpus gets that option's gap to its own
best. Scores are means over the noise ratios and seeds of each corpus's runs.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from loco import family

RIDGES = {10.0: "align_ridge=10", 30.0: "align_ridge=30", 100.0: "align_ridge=100",
          300.0: "align_ridge=300"}
WIDTHS = {"32": "32", "64": "64", "128": "128", "256": "256", "mean_prob": "four averaged"}


def ridge_scores(row: dict) -> dict[str, float]:
    """A ``rule_flips.py`` row's AUROC per ridge (its default's ridge under ``default``)."""
    chosen = float(row["chosen"]["align_ridge"])
    return {f"{ridge:g}": row["default"] if ridge == chosen else row[key]
            for ridge, key in RIDGES.items()}


def width_scores(row: dict) -> dict[str, float]:
    """A ``width_seeds.py`` row's AUROC per width and for the four averaged."""
    return {label: row[key] for key, label in WIDTHS.items()}


def table(scores: dict[str, dict[str, float]]) -> list[str]:
    options = list(next(iter(scores.values())))
    lines = ["| held out | chosen on the rest: best mean | fewest worst gap (its worst there) | "
             "held-out corpus | best mean's gap to its best | fewest worst gap's |",
             "|---|---|---|---|---|---|"]
    for held in sorted({family(c) for c in scores}):
        rest = [c for c in scores if family(c) != held]
        mean = {o: float(np.mean([scores[c][o] for c in rest])) for o in options}
        worst = {o: min(scores[c][o] - max(scores[c].values()) for c in rest) for o in options}
        by_mean, by_worst = max(mean, key=mean.get), max(worst, key=worst.get)
        for corpus in sorted(c for c in scores if family(c) == held):
            best = max(scores[corpus].values())
            lines.append(f"| {held} | {by_mean} | {by_worst} ({worst[by_worst]:+.4f}) | "
                         f"{corpus} | {scores[corpus][by_mean] - best:+.4f} | "
                         f"{scores[corpus][by_worst] - best:+.4f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rule", choices=["ridge", "width"])
    parser.add_argument("jsonl", type=Path)
    args = parser.parse_args(argv)
    read = ridge_scores if args.rule == "ridge" else width_scores
    runs: dict[str, list[dict[str, float]]] = defaultdict(list)
    for line in args.jsonl.read_text().splitlines():
        row = json.loads(line)
        runs[row["corpus"]].append(read(row))
    scores = {corpus: {o: float(np.mean([r[o] for r in rows])) for o in rows[0]}
              for corpus, rows in runs.items()}
    print("\n".join(table(scores)))


if __name__ == "__main__":
    main()
