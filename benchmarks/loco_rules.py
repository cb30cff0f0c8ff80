"""Leave-one-corpus-out tables of the default's automatic rules, from ``rule_variants.py``'s runs.

For each rule, every corpus in turn is held out: the rule's variant with the best mean score on
the other corpora is chosen, and its score on the held-out corpus is set beside the best variant
there and the default's. A corpus's smaller copies (``--sizes`` of ``rule_variants.py``) are held
out with it, each its own row, so that a size rule is never chosen on a copy of the corpus it is
scored on. Scores are means over the noise ratios and seeds measured (AUROC of ``clean_prob``
against ``noisy_gt``; for the cut, the balanced accuracy of the review queue, the mean of the
share of clean pairs kept clean and the share of the noise queued, which its order does not
decide).

    python benchmarks/loco_rules.py benchmarks/results/rule-variants.jsonl > tables.md
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: The summed width of the default's two vectors (ImageNet EfficientNet-Lite0 1,280 + e5 384),
#: the unit of ``rank=auto``'s threshold (``CROSS_FIT_WIDTHS`` in ``ncclean/methods/clip.py``).
WIDTH = 1280 + 384
DEFAULT_CUT = "0.5/0.9/True"

Row = dict
Score = Callable[[list[Row], str], float | None]  # an instance's runs, a variant -> its score


def instances(rows: list[Row]) -> dict[tuple[str, int], list[Row]]:
    """The runs of each (corpus, size) instance."""
    out: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for row in rows:
        out[(row["corpus"], row["size"])].append(row)
    return out


def mean_of(runs: list[Row], variant: str, read: Callable[[Row], float]) -> float | None:
    """The mean of ``read`` over ``runs`` of ``variant``, ``None`` when there is none."""
    values = [read(row) for row in runs if row["variant"] == variant]
    return float(np.mean(values)) if values else None


def auroc_of(variant: str) -> Score:
    return lambda runs, _: mean_of(runs, variant, lambda row: row["auroc"])


def cross_fits(rule: str, entries: dict) -> bool:
    """Whether ``rank`` rule ``rule`` cross-fits a corpus of ``entries`` (its pairs, distinct
    captions and distinct images): ``in-sample``, ``cross-fitted``, ``pairs<k`` (below ``k``
    times the summed width in pairs: the rule of ``3be1c53``'s default) or ``entries<k`` (below
    ``k`` times the width in its fewer distinct captions or images)."""
    if rule in ("in-sample", "cross-fitted"):
        return rule == "cross-fitted"
    signal, k = rule.split("<")
    count = entries["pairs"] if signal == "pairs" else min(entries["captions"], entries["images"])
    return count < float(k) * WIDTH


def ranked(rule: str, conventions: str, runs: list[Row], entries: dict) -> float | None:
    """The mean AUROC of ``runs`` ranked by ``rule`` with ``conventions``. A cross-fitted pair
    has nothing of its own to discount, so there ``repeated`` is ``discount``'s run."""
    if cross_fits(rule, entries):
        held = "discount" if conventions == "repeated" else conventions
        return mean_of(runs, f"cross-fitted/{held}", lambda row: row["auroc"])
    return mean_of(runs, f"in-sample/{conventions}", lambda row: row["auroc"])


def rank_variant(rule: str, conventions: str, entries: dict) -> Score:
    return lambda runs, _: ranked(rule, conventions, runs, entries[(runs[0]["corpus"],
                                                                     runs[0]["size"])])


def conventions_variant(name: str, rule: str, entries: dict) -> Score:
    """``conventions`` ``name`` under the rank ``rule`` picks."""
    return rank_variant(rule, name, entries)


def cut_variant(name: str) -> Score:
    """A cut of :data:`rule_variants.CUTS` read from the default's runs: balanced accuracy."""
    def score(runs: list[Row], _: str) -> float | None:
        def balanced(row: Row) -> float:
            cut = row["cuts"][name]
            return (cut["clean_kept"] + cut["noise_queued"]) / 2
        return mean_of(runs, "default", balanced)
    return score


def loco_table(data: dict[tuple[str, int], list[Row]], variants: dict[str, Score],
               default: str) -> tuple[list[str], list[dict]]:
    """The rows of one rule's table (module docstring) and the variant chosen on all corpora."""
    def score(instance, name) -> float | None:
        return variants[name](data[instance], name)

    def chosen(on: list) -> str:
        means = {name: np.mean([score(i, name) for i in on]) for name in variants
                 if on and all(score(i, name) is not None for i in on)}
        return max(means, key=lambda name: (means[name], name == default)) if means else "-"

    out = []
    for instance in sorted(data, key=lambda i: (i[0], -i[1] if i[1] else -10**9)):
        others = [i for i in data if i[0] != instance[0]]
        pick = chosen(others)
        here = {name: score(instance, name) for name in variants}
        here = {name: value for name, value in here.items() if value is not None}
        if not here:
            continue
        best = max(here, key=lambda name: (here[name], name == default))
        out.append({"corpus": instance[0], "size": instance[1], "pairs":
                    data[instance][0]["pairs"], "chosen": pick, "chosen_score": here.get(pick),
                    "best": best, "best_score": here[best], "default_score": here.get(default),
                    "all": here})
    return [chosen(list(data))], out


def render(title: str, rows: list[dict], on_all: str, default: str) -> str:
    """One rule's table in Markdown."""
    lines = [f"### {title}", "", f"Chosen on all corpora: **{on_all}** (default: {default}).",
             "", "| held-out corpus | pairs | chosen on the others | its score | best here "
             "| best's score | default's score | default - best |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        name = row["corpus"] + ("" if not row["size"] else f" ({row['size']:,} subset)")
        gap = (row["default_score"] - row["best_score"]) if row["default_score"] is not None \
            else float("nan")
        lines.append(f"| {name} | {row['pairs']:,} | {row['chosen']} | "
                     f"{_num(row['chosen_score'])} | {row['best']} | {_num(row['best_score'])} | "
                     f"{_num(row['default_score'])} | {gap:+.4f} |")
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def rules(data, entries: dict, rank_rule: str, conventions: str) \
        -> list[tuple[str, dict[str, Score], str]]:
    """Every rule: its title, its variants as scores and the current default's name among
    them; ``rank_rule`` and ``conventions`` the proposed default's, held fixed while the other
    is chosen."""
    rank = {name: rank_variant(name, conventions, entries) for name in
            ["in-sample", "cross-fitted", *(f"pairs<{k}" for k in (1, 2, 3, 4, 5)),
             *(f"entries<{k}" for k in (0.5, 1, 1.5, 2, 3))]}
    cuts = sorted({name for runs in data.values() for row in runs
                   if row["variant"] == "default" for name in row["cuts"]})
    return [
        (f"rank: which corpora are cross-fitted (conventions={conventions})", rank, "pairs<3"),
        (f"conventions (rank by {rank_rule})",
         {name: conventions_variant(name, rank_rule, entries)
          for name in ("discount", "repeated", "trust")}, "discount"),
        ("align_dims (on the current default)", {
            "64": auroc_of("dims=64"), "128": auroc_of("default"), "256": auroc_of("dims=256")},
         "128"),
        ("align_ridge (on the current default)", {
            "30": auroc_of("ridge=30"), "100": auroc_of("default"),
            "300": auroc_of("ridge=300")}, "100"),
        ("cut: noisy_recall / review_recall / queue_by_estimate (balanced accuracy of the "
         "queue, on the current default's scores)",
         {name: cut_variant(name) for name in cuts}, DEFAULT_CUT),
    ]


def summary(data, entries: dict, rank_rule: str, conventions: str) -> str:
    """Per corpus: the current default, the proposed one, and the best variant measured."""
    lines = ["### The default against the best variant measured", "",
             f"Proposed: rank by {rank_rule}, conventions={conventions}.", "",
             "| corpus | pairs | distinct captions / images | current default | proposed "
             "| best variant measured | its AUROC | proposed - best |",
             "|---|---|---|---|---|---|---|---|"]
    for instance in sorted(data, key=lambda i: (i[0], -i[1] if i[1] else -10**9)):
        runs, counts = data[instance], entries[instance]
        means = {v: mean_of(runs, v, lambda row: row["auroc"])
                 for v in {row["variant"] for row in runs}}
        current = means.get("default")
        proposed = ranked(rank_rule, conventions, runs, counts)
        best = max(means, key=means.get)
        name = instance[0] + ("" if not instance[1] else f" ({instance[1]:,} subset)")
        gap = f"{proposed - means[best]:+.4f}" if proposed is not None else "-"
        lines.append(f"| {name} | {counts['pairs']:,} | {counts['captions']:,} / "
                     f"{counts['images']:,} | {_num(current)} | {_num(proposed)} | {best} | "
                     f"{means[best]:.4f} | {gap} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="rule_variants.py's JSON lines")
    parser.add_argument("--rank-rule", default="entries<1")
    parser.add_argument("--conventions", default="repeated")
    parser.add_argument("--json", type=Path, help="also write the tables' rows here")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.runs.read_text().splitlines()]
    described = json.loads(args.runs.with_suffix(".entries.json").read_text())
    data = instances(rows)
    entries = {instance: described[f"{instance[0]}/{instance[1]}"] for instance in data}
    tables = {}
    print(summary(data, entries, args.rank_rule, args.conventions))
    for title, variants, default in rules(data, entries, args.rank_rule, args.conventions):
        (on_all,), table = loco_table(data, variants, default)
        tables[title] = {"chosen_on_all": on_all, "rows": table}
        print(render(title, table, on_all, default))
    if args.json:
        args.json.write_text(json.dumps(tables, indent=1))


if __name__ == "__main__":
    main()
