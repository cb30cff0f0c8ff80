"""The neighbours' agreement ``clip`` adds to its CCA cosine: its count and weight chosen
leave-one-corpus-out (``benchmarks/results/neighbours.md``).

    python benchmarks/neighbours.py run mdi=/work/corpora/mdi/mdi-emb.parquet ... \\
        --sizes 1000 2000 0 --ratios 0.3 0.5 --seeds 0 --work /tmp/nb --out nb.jsonl
    python benchmarks/neighbours.py table nb.jsonl

``run`` scores each embedded corpus (``ncclean embed`` wrote ``image_emb`` / ``text_emb``; 0 in
``--sizes`` is the whole corpus, any other a seeded subset of that many rows) with
``ratio`` of its images moved by ``inject-noise`` (category and view move with the image where
the corpus has both, as Wesnoth's do), under every variant of :data:`VARIANTS`: ``api.score``
with ``clip``'s parameters set explicitly, so that no row depends on the rules of the day
(significance and pseudo-captions off: they change neither ``clean_prob`` nor the partition).
One JSON line per run, appended; a rerun skips the lines already there.

``table`` prints, per corpus family (the part of the name before the first ``-``: Wesnoth's
languages are one family), each variant's mean AUROC over its runs; the leave-one-family-out
choice: the variant with the best mean over the other families (each family's mean counting
once, however many runs it has), and what it scores on the family left out against the best
variant there; and per corpus and size (ratios and seeds averaged) the default's AUROC against
the best variant's (``--default``, and ``--conventions-default`` for the ``--conventions``
families, where the default counts ``a`` alone: clip art's).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from rule_variants import VECTORS, checkout_commit, done_runs, subset

from ncclean import api
from ncclean.api import RunOptions, StageOptions

# kN: N neighbours, both sides, weights read from shuffled pairs (k7: the default); kNa: the
# same with a alone (k5a: the default in a corpus of conventions); kNwW: both sides at a fixed
# weight W (each side half W times the cosines' spread)
BOTH = {"neighbour_sides": "both"}
VARIANTS: dict[str, dict] = {
    "k0": {"neighbours": 0},
    "k5": {"neighbours": 5, **BOTH},
    "k7": {"neighbours": 7, **BOTH},
    "k10": {"neighbours": 10, **BOTH},
    "k3a": {"neighbours": 3, "neighbour_sides": "a"},
    "k5a": {"neighbours": 5, "neighbour_sides": "a"},
    "k7a": {"neighbours": 7, "neighbour_sides": "a"},
    "k10a": {"neighbours": 10, "neighbour_sides": "a"},
    "k5w0.5": {"neighbours": 5, "neighbour_weight": 0.5, **BOTH},
    "k10w0.5": {"neighbours": 10, "neighbour_weight": 0.5, **BOTH},
    "k20w0.5": {"neighbours": 20, "neighbour_weight": 0.5, **BOTH},
    "k10w0.25": {"neighbours": 10, "neighbour_weight": 0.25, **BOTH},
    "k10w1": {"neighbours": 10, "neighbour_weight": 1.0, **BOTH},
}


def noisy(clean: Path, ratio: float, seed: int, work: Path) -> Path:
    """``clean`` with ``ratio`` of its images moved (seed ``seed``), vectors with them."""
    path = work / f"{clean.stem}-{ratio}-s{seed}.parquet"
    if not path.exists():
        names = pq.read_schema(clean).names
        moved = tuple(c for c in ("category", "view") if c in names)
        api.inject_noise(clean, path, ratio=ratio, seed=seed, columns=VECTORS,
                         move_with_image=moved if len(moved) == 2 else (), overwrite=True)
    return path


def run(args: argparse.Namespace) -> None:
    args.work.mkdir(parents=True, exist_ok=True)
    done = done_runs(args.out)
    commit = checkout_commit()
    for spec in args.corpora:
        name, corpus = spec.split("=", 1)
        for size in args.sizes:
            clean = subset(Path(corpus), size, args.work, name)
            for ratio in args.ratios:
                for seed in args.seeds:
                    path = noisy(clean, ratio, seed, args.work)
                    for variant in args.variants:
                        if (name, size, ratio, seed, variant) in done:
                            continue
                        summary = api.score(
                            path, args.work / "scored.parquet", method="clip",
                            params=VARIANTS[variant], columns=VECTORS,
                            run=RunOptions(seed=seed, overwrite=True),
                            stages=StageOptions(significance="off", pseudo_captions=False))
                        row = {"corpus": name, "size": size, "pairs": summary.n_pairs,
                               "ratio": ratio, "seed": seed, "variant": variant,
                               "auroc": round(summary.detection["auroc"], 4),
                               "ap": round(summary.detection["ap"], 4), "commit": commit}
                        with open(args.out, "a") as handle:
                            handle.write(json.dumps(row) + "\n")
                        print(json.dumps(row), flush=True)


def table(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for line in args.jsonl.read_text().splitlines()]
    runs: dict[tuple, dict[str, float]] = defaultdict(dict)
    for row in rows:
        runs[(row["corpus"], row["size"], row["ratio"], row["seed"])][row["variant"]] = row["auroc"]
    variants = [v for v in VARIANTS if all(v in r for r in runs.values())]
    family = {key: key[0].split("-")[0] for key in runs}
    families = sorted(set(family.values()))
    print("| family | runs | " + " | ".join(variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    mean = {}
    for fam in families:
        keys = [k for k in runs if family[k] == fam]
        mean[fam] = {v: float(np.mean([runs[k][v] for k in keys])) for v in variants}
        print(f"| {fam} | {len(keys)} | " + " | ".join(f"{mean[fam][v]:.4f}" for v in variants)
              + " |")
    print()
    print("| family left out | chosen on the others | its AUROC there | best there | "
          "chosen - best | chosen - k0 |")
    print("|---|---|---|---|---|---|")
    for fam in families:
        others = [f for f in families if f != fam]
        chosen = max(variants, key=lambda v: np.mean([mean[f][v] for f in others]))
        best = max(variants, key=lambda v: mean[fam][v])
        print(f"| {fam} | {chosen} | {mean[fam][chosen]:.4f} | {best} {mean[fam][best]:.4f} | "
              f"{mean[fam][chosen] - mean[fam][best]:+.4f} | "
              f"{mean[fam][chosen] - mean[fam]['k0']:+.4f} |")
    print()
    print("| corpus | size | runs | default | its AUROC | best variant | default - best |")
    print("|---|---|---|---|---|---|---|")
    for corpus, size in sorted({k[:2] for k in runs}):
        keys = [k for k in runs if k[:2] == (corpus, size)]
        default = args.conventions_default if corpus.split("-")[0] in args.conventions \
            else args.default
        means = {v: float(np.mean([runs[k][v] for k in keys])) for v in variants}
        best = max(variants, key=means.get)
        print(f"| {corpus} | {size or 'all'} | {len(keys)} | {default} | {means[default]:.4f} | "
              f"{best} {means[best]:.4f} | {means[default] - means[best]:+.4f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    runner = sub.add_parser("run")
    runner.add_argument("corpora", nargs="+", help="NAME=embedded.parquet")
    runner.add_argument("--sizes", type=int, nargs="+", default=[0])
    runner.add_argument("--ratios", type=float, nargs="+", default=[0.5])
    runner.add_argument("--seeds", type=int, nargs="+", default=[0])
    runner.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    runner.add_argument("--work", type=Path, required=True)
    runner.add_argument("--out", type=Path, required=True)
    shower = sub.add_parser("table")
    shower.add_argument("jsonl", type=Path)
    shower.add_argument("--default", default="k7", help="the default's variant")
    shower.add_argument("--conventions", nargs="*", default=["clipart"],
                        help="families of conventions, where the default is --conventions-default")
    shower.add_argument("--conventions-default", default="k5a",
                        help="the default's variant in a corpus of conventions")
    args = parser.parse_args(argv)
    print(f"command: python benchmarks/neighbours.py {' '.join(sys.argv[1:])}", flush=True)
    (run if args.command == "run" else table)(args)


if __name__ == "__main__":
    main()
