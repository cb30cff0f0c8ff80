"""Each of the default's automatic rules flipped one at a time, at the code of the day: is the
default within 0.005 of every variant on each noisy corpus (``benchmarks/results/rules.md``,
"Every rule flipped at ...")?

    python benchmarks/rule_flips.py run NAME=NOISY.parquet[@SEED] ... --out flips.jsonl
    python benchmarks/rule_flips.py table flips.jsonl

``run`` scores each noisy embedded corpus (``inject-noise`` wrote ``noisy_gt``; ``image_emb`` /
``text_emb``) with ``clip``'s defaults, reads from the run record what the rules chose (rank,
trust or discount, ridge, directions), then once per other value of each rule: ``rank``,
``conventions``, ``align_ridge`` (10, 30, 100, 300), ``align_dims`` (32, 64, 128, 256, or
``four``: the four widths' ``clean_prob`` averaged, ``align_widths``) and ``prior`` (``off``;
``benchmarks/kernels/prior_space.py flips`` runs this with a prior that did not see the corpus's
own family, for the prior's own corpora); significance and
pseudo-captions off. One JSON line per corpus file (``--flips``: only those named). ``table``
averages the lines of each ``NAME`` and prints the default against the best variant.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from rule_variants import VECTORS, checkout_commit

from ncclean import api
from ncclean.api import RunOptions, StageOptions

FLIPS = {"rank": ("in-sample", "cross-fitted"), "conventions": ("trust", "discount"),
         "align_ridge": (10.0, 30.0, 100.0, 300.0), "align_dims": (32, 64, 128, 256, "four"),
         "prior": ("auto", "off")}


def flipped(rule: str, value) -> dict:
    """``clip``'s parameters for one flip: ``align_dims=four`` is ``align_widths=four``."""
    return {"align_widths": "four"} if value == "four" else {rule: value}


def score(path: Path, seed: int, params: dict, work: Path) -> tuple[float, dict]:
    out = work / "flip.parquet"
    summary = api.score(path, out, method="clip", params=params, columns=VECTORS,
                        run=RunOptions(seed=seed, overwrite=True),
                        stages=StageOptions(significance="off", pseudo_captions=False))
    report = json.loads(Path(f"{out}.json").read_text())["report"]
    trusted = "trusted" in report.get("conventions", {})
    chosen = {"rank": "cross-fitted" if "cross" in report.get("rank", "") else "in-sample",
              "conventions": "trust" if trusted else "discount",
              "align_ridge": report["alignment"]["ridge"],
              "align_dims": "four" if "widths" in report else report["alignment"]["dims"],
              "prior": params.get("prior", "auto")}
    return round(summary.detection["auroc"], 4), chosen


def run(args: argparse.Namespace) -> None:
    args.work.mkdir(parents=True, exist_ok=True)
    commit = checkout_commit()
    for spec in args.corpora:
        name, rest = spec.split("=", 1)
        path, _, given = rest.partition("@")
        seed = int(given or 0)
        auroc, chosen = score(Path(path), seed, {}, args.work)
        row = {"corpus": name, "file": path, "seed": seed, "default": auroc, "chosen": chosen,
               "commit": commit}
        for rule, values in FLIPS.items():
            for value in values:
                key = f"{rule}={value:g}" if isinstance(value, float) else f"{rule}={value}"
                if value != chosen[rule] and (not args.flips or key in args.flips):
                    row[key] = score(Path(path), seed, flipped(rule, value), args.work)[0]
        with open(args.out, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def table(args: argparse.Namespace) -> None:
    runs: dict[str, list[dict]] = defaultdict(list)
    for line in args.jsonl.read_text().splitlines():
        row = json.loads(line)
        runs[row["corpus"]].append(row)
    print("| corpus | runs | the default's choice | default | best variant | its AUROC | "
          "default - best |")
    print("|---|---|---|---|---|---|---|")
    for corpus, rows in runs.items():
        shared = {k for k in set.intersection(*(set(r) for r in rows))
                  if k == "default" or "=" in k}
        means = {k: float(np.mean([r[k] for r in rows])) for k in shared}
        best = max(means, key=means.get)
        chosen = rows[0]["chosen"]
        width = ("four widths averaged" if chosen["align_dims"] == "four"
                 else f"{chosen['align_dims']} directions")
        choice = (f"{chosen['rank']}, {chosen['conventions']}, "
                  f"ridge {chosen['align_ridge']:g}, {width}")
        gap = means["default"] - means[best]
        mark = "**" if gap < -0.005 else ""
        print(f"| {corpus} | {len(rows)} | {choice} | {means['default']:.4f} | {best} | "
              f"{means[best]:.4f} | {mark}{gap:+.4f}{mark} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    runner = sub.add_parser("run")
    runner.add_argument("corpora", nargs="+", help="NAME=NOISY.parquet[@SEED]")
    runner.add_argument("--work", type=Path, default=Path("rule-flips-work"))
    runner.add_argument("--out", type=Path, required=True)
    runner.add_argument("--flips", nargs="+", help="only these flips (RULE=VALUE, as the table "
                        "names them), over more seeds")
    shower = sub.add_parser("table")
    shower.add_argument("jsonl", type=Path)
    args = parser.parse_args(argv)
    run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    main()
