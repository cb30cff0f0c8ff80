"""The CCA's width over many seeds: is a width's gain on a small corpus real or one seed's luck,
and does averaging the widths' clean probabilities hold on every corpus
(``benchmarks/results/rules.md``, "The width over many seeds")?

    python benchmarks/width_seeds.py NAME=EMBEDDED.parquet[:SIZE] ... --seeds 0 1 2 \\
        --work W --out widths.jsonl
    python benchmarks/width_seeds.py NAME=NOISY.parquet@SEED ... --work W --out widths.jsonl
    python benchmarks/width_seeds.py --table widths.jsonl [--only NAME ...]

The first form draws ``SIZE`` rows of an embedded corpus (``rule_variants.py``'s seeded subset;
all of it without ``:SIZE``) and moves 30% and 50% of its captions' images at each seed
(``inject-noise``, as ``rule_variants.py``); the second scores noisy files made elsewhere
(Wesnoth's, moved with ``--move-with-image category,view``). Each noisy file is scored by
``clip``'s defaults with ``align_dims`` 32, 64, 128 and 256 (significance and pseudo-captions
off), and one JSON line holds each width's AUROC and two averages of the four: of the pairs'
``clean_prob`` (``mean_prob``) and of their ranks (``mean_rank``). A rerun skips the lines
already in ``--out``. ``--table`` prints each corpus's mean and the gain over 128 with its
standard error across runs, then the choice left one corpus out: the option (a width or an
average) with the least mean shortfall from the best option on the corpora of other families
(``loco.py``: a corpus's subsets and the corpora sharing its images are held out with it), and
its shortfall on the one left out (``--only``: these corpora alone).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from loco import family
from rule_flips import score
from rule_variants import noisy, subset
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

WIDTHS = (32, 64, 128, 256)


def measure(path: Path, seed: int, work: Path) -> dict:
    """Each width's AUROC on the noisy file ``path`` and the two averages' AUROC."""
    row, probs = {}, []
    for width in WIDTHS:
        row[str(width)] = score(path, seed, {"align_dims": width}, work)[0]
        table = pq.read_table(work / "flip.parquet",
                              columns=["clean_prob", "partition", "noisy_gt"]).to_pydict()
        valid = np.array(table["partition"], dtype=object) != "invalid"
        truth = np.array(table["noisy_gt"], dtype=bool)[valid]
        probs.append(np.array(table["clean_prob"], dtype=np.float64)[valid])
    row["mean_prob"] = round(float(roc_auc_score(~truth, np.mean(probs, 0))), 4)
    row["mean_rank"] = round(float(roc_auc_score(~truth, np.mean([rankdata(p) for p in probs],
                                                                     0))), 4)
    return row


def noisy_files(spec: str, seeds: list[int], work: Path) -> list[tuple[str, Path, float, int]]:
    """``(name, noisy file, ratio, seed)`` for one corpus argument."""
    name, rest = spec.split("=", 1)
    if "@" in rest:
        path, seed = rest.rsplit("@", 1)
        ratio = float(Path(path).stem.rsplit("-s", 1)[0].rsplit("-", 1)[1])
        return [(name, Path(path), ratio, int(seed))]
    path, _, size = rest.partition(":")
    clean = subset(Path(path), int(size or 0), work, name)
    return [(name, noisy(clean, ratio, seed, work), ratio, seed)
            for seed in seeds for ratio in (0.3, 0.5)]


def run(args: argparse.Namespace) -> None:
    args.work.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.out.exists():
        done = {(r["corpus"], r["ratio"], r["seed"])
                for r in map(json.loads, args.out.read_text().splitlines())}
    for spec in args.corpora:
        for name, path, ratio, seed in noisy_files(spec, args.seeds, args.work):
            if (name, ratio, seed) in done:
                continue
            row = {"corpus": name, "file": str(path), "ratio": ratio, "seed": seed,
                   **measure(path, seed, args.work)}
            with open(args.out, "a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


def table(path: Path, only: list[str] | None = None) -> None:
    runs: dict[str, list[dict]] = defaultdict(list)
    for row in map(json.loads, path.read_text().splitlines()):
        if not only or row["corpus"] in only:
            runs[row["corpus"]].append(row)
    keys = [str(w) for w in WIDTHS] + ["mean_prob", "mean_rank"]  # mean_prob may be missing
    print("| corpus | runs | " + " | ".join(keys) + " | best width - 128 | mean_rank - best |")
    print("|---|---|" + "---|" * (len(keys) + 2))
    shortfall = {}
    for corpus, rows in runs.items():
        means = {k: float(np.mean([r[k] for r in rows if k in r] or [np.nan])) for k in keys}
        best = max((str(w) for w in WIDTHS), key=means.get)
        gain = np.array([r[best] - r["128"] for r in rows])
        error = gain.std(ddof=1) / np.sqrt(len(gain)) if len(gain) > 1 else float("nan")
        print(f"| {corpus} | {len(rows)} | "
              + " | ".join("-" if np.isnan(means[k]) else f"{means[k]:.4f}" for k in keys)
              + f" | {best}: {gain.mean():+.4f} ± {error:.4f} | "
              f"{means['mean_rank'] - means[best]:+.4f} |")
        options = [k for k in keys if not np.isnan(means[k])]
        top = max(means[k] for k in options)
        shortfall[corpus] = {k: means[k] - top for k in options}
    print("\n| left out | chosen on the others | its shortfall there |")
    print("|---|---|---|")
    for corpus, own in shortfall.items():
        others = [shortfall[c] for c in shortfall if family(c) != family(corpus)]
        chosen = max(own, key=lambda k: mean_over(others, k))
        print(f"| {corpus} | {chosen} | {own[chosen]:+.4f} |")


def mean_over(shortfalls: list[dict], option: str) -> float:
    """``option``'s mean shortfall over the corpora that ran it; ``-inf`` where none did."""
    values = [own[option] for own in shortfalls if option in own]
    return float(np.mean(values)) if values else -np.inf


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="*",
                        help="NAME=EMBEDDED.parquet[:SIZE] or NAME=NOISY.parquet@SEED")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--work", type=Path, default=Path("width-seeds-work"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--table", type=Path, help="print the table of these runs")
    parser.add_argument("--only", nargs="+", help="with --table: these corpora alone")
    args = parser.parse_args(argv)
    if args.table:
        table(args.table, args.only)
    elif args.out and args.corpora:
        run(args)
    else:
        parser.error("give corpora and --out, or --table")


if __name__ == "__main__":
    main()
