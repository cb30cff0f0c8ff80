"""Retrain on each method's own ``clean_significant`` selection, and evaluate its own matcher.

Issue 39's retrain bar, in one command, on the retrain split with both towers' pretrained vectors
(``benchmarks/retrain_corpus.py WORK --towers pretrained --noise 0.5``)::

    python benchmarks/disncl_retrain.py WORK --run

scores ``WORK/noisy-0.5.parquet`` once per method (seed 0, ``--save-matcher``), then per retrain
seed runs ``ncclean retrain M.parquet --test WORK/test.parquet --keep significant --seed S --steps
3200 --eval-every 100 --baseline --matcher M.safetensors --json``, one child at a time, skipping
outputs already there (``WORK/retrain-M-S.json``). Without ``--run`` it only summarises: per
method and seed the share of the gap between the ``noisy`` and ``oracle`` arms that the
``cleaned`` arm recovers on the mean strict rSum over steps (2,400, 3,200] (as
``retrain_curves.py``), and the saved matcher's strict rSum with its share of the same gap.

The second table varies the scoring seed too (``--pipeline``): seed ``S`` scores into
``M-sS.parquet`` (seed 0 is ``M.parquet``) and retrains with seed ``S`` without ``--baseline``;
its gaps use the ``noisy`` and ``oracle`` arms of ``retrain-M-S.json``, which depend on the
retrain seed only (the same valid pairs and ``noisy_gt`` in every scored file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from retrain_curves import window_mean  # noqa: E402

METHODS = ("disncl", "gmm", "crcl")


def _run(command: list[str], out: Path) -> None:
    print("+", " ".join(command), ">", out.name, flush=True)
    began = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": os.environ.get(
                                "OMP_NUM_THREADS", "1")})
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {result.returncode}\n{result.stderr}")
    out.write_text(result.stdout)
    print(f"  {time.perf_counter() - began:.0f} s", flush=True)


def _name(method: str, score_seed: int) -> str:
    return method if score_seed == 0 else f"{method}-s{score_seed}"


def _score_and_retrain(work: Path, method: str, score_seed: int, seed: int, noise: str,
                       baseline: bool) -> Path:
    """Score with ``score_seed`` (once), retrain with ``seed``; outputs already there are kept.
    Returns the retrain JSON."""
    ncclean = [sys.executable, "-m", "ncclean"]
    name = _name(method, score_seed)
    scored, saved = work / f"{name}.parquet", work / f"{name}.safetensors"
    if not (work / f"score-{name}.json").exists():
        _run(ncclean + ["score", str(work / f"noisy-{noise}.parquet"), "-o", str(scored),
                        "--method", method, "--image-emb-col", "image_emb",
                        "--text-emb-col", "text_emb", "--seed", str(score_seed),
                        "--save-matcher", str(saved), "--json"], work / f"score-{name}.json")
    out = work / (f"retrain-{method}-{seed}.json" if baseline else
                  f"retrain-{name}-{seed}.json")
    if not out.exists():
        _run(ncclean + ["retrain", str(scored), "--test", str(work / "test.parquet"),
                        "--keep", "significant", "--seed", str(seed), "--steps", "3200",
                        "--eval-every", "100", "--matcher", str(saved), "--json"]
             + (["--baseline"] if baseline else []), out)
    return out


def run(work: Path, methods: list[str], seeds: list[int], noise: str, pipeline: bool) -> None:
    """Score once per method (seed 0), retrain once per seed with the baseline arms; with
    ``pipeline``, score again with each other seed and retrain that seed's selection."""
    for method in methods:
        for seed in seeds:
            _score_and_retrain(work, method, 0, seed, noise, baseline=True)
        for seed in (seeds if pipeline else []):
            if seed != 0:
                _score_and_retrain(work, method, seed, seed, noise, baseline=False)


def noise_share(scored: Path) -> str:
    """The share of injected (``noisy_gt``) pairs in ``clean_significant``."""
    import pyarrow.parquet as pq

    table = pq.read_table(scored, columns=["partition", "noisy_gt"]).to_pydict()
    chosen = [gt for part, gt in zip(table["partition"], table["noisy_gt"])
              if part == "clean_significant"]
    return f"{sum(chosen) / len(chosen):.1%}" if chosen else "-"


def summarise(work: Path, methods: list[str], seeds: list[int], low: int, high: int) -> None:
    """Print the results page's table (Markdown) from ``WORK/retrain-M-S.json``."""
    print("| method | AUROC | selection (pairs, noise in it) | seeds | cleaned gap share per "
          "seed | mean | matcher strict rSum | matcher gap share per seed | mean |")
    print("|---" * 9 + "|")
    for method in methods:
        shares, matcher_shares, rsum, selected = [], [], None, None
        auroc = json.loads((work / f"score-{method}.json").read_text())["detection_vs_noisy_gt"][
            "auroc"]
        auroc = f"{auroc:.4f}"
        for seed in seeds:
            path = work / f"retrain-{method}-{seed}.json"
            try:
                arms = json.loads(path.read_text())["arms"]
            except (OSError, json.JSONDecodeError):  # not run yet, or still running
                continue
            mean = {arm: window_mean([(p["step"], p["rsum"]) for p in arms[arm]["curve"]],
                                     low, high) for arm in ("cleaned", "noisy", "oracle")}
            gap = mean["oracle"] - mean["noisy"]
            shares.append((seed, (mean["cleaned"] - mean["noisy"]) / gap))
            selected = arms["cleaned"]["n_pairs"]
            if "matcher" in arms:
                rsum = arms["matcher"]["strict"]["rsum"]
                matcher_shares.append((seed, (rsum - mean["noisy"]) / gap))
        if not shares:
            continue

        def cells(values: list[tuple[int, float]]) -> tuple[str, str]:
            if not values:
                return "-", "-"
            per = ", ".join(f"{share:.0%} (seed {seed})" for seed, share in values)
            return per, f"**{sum(v for _, v in values) / len(values):.0%}**"

        print(f"| {method} | {auroc} | {selected} ({noise_share(work / f'{method}.parquet')}) | "
              f"{len(shares)} | {' | '.join(cells(shares))} | "
              f"{'-' if rsum is None else f'{rsum:.1f}'} | {' | '.join(cells(matcher_shares))} |")


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):  # not run yet, or still running
        return None


def summarise_pipeline(work: Path, methods: list[str], seeds: list[int], low: int,
                       high: int) -> None:
    """The second table: scoring and retrain seed ``S`` together (``--pipeline``)."""
    print("| method | seeds | AUROC per seed | selection per seed | gap share per seed | mean | "
          "matcher rSum per seed | mean | matcher gap share per seed | mean |")
    print("|---" * 10 + "|")

    def row(values: list[float], form: str) -> list[str]:
        return [" / ".join(form.format(v) for v in values),
                f"**{form.format(sum(values) / len(values))}**"]

    for method in methods:
        cells: dict[str, list[float]] = {k: [] for k in ("auroc", "n", "gap", "rsum", "mgap")}
        done = []
        for seed in seeds:
            name = _name(method, seed)
            base = _load(work / f"retrain-{method}-{seed}.json")
            own = base if seed == 0 else _load(work / f"retrain-{name}-{seed}.json")
            score = _load(work / f"score-{name}.json")
            if base is None or own is None or score is None:
                continue
            mean = {arm: window_mean([(p["step"], p["rsum"]) for p in arms[arm]["curve"]],
                                     low, high)
                    for arm, arms in (("cleaned", own["arms"]), ("noisy", base["arms"]),
                                      ("oracle", base["arms"]))}
            gap = mean["oracle"] - mean["noisy"]
            rsum = own["arms"]["matcher"]["strict"]["rsum"]
            for key, value in (("auroc", score["detection_vs_noisy_gt"]["auroc"]),
                               ("n", own["arms"]["cleaned"]["n_pairs"]),
                               ("gap", (mean["cleaned"] - mean["noisy"]) / gap),
                               ("rsum", rsum), ("mgap", (rsum - mean["noisy"]) / gap)):
                cells[key].append(value)
            done.append(seed)
        if not done:
            continue
        print(f"| {method} | {', '.join(map(str, done))} | "
              f"{' / '.join(f'{v:.4f}' for v in cells['auroc'])} | "
              f"{' / '.join(f'{v:,.0f}' for v in cells['n'])} | "
              + " | ".join(row(cells["gap"], "{:.0%}") + row(cells["rsum"], "{:.1f}")
                           + row(cells["mgap"], "{:.0%}")) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="the retrain split's folder")
    parser.add_argument("--run", action="store_true", help="score and retrain what is missing")
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--noise", default="0.5")
    parser.add_argument("--window", type=int, nargs=2, default=[2400, 3200])
    parser.add_argument("--pipeline", action="store_true",
                        help="also score with each seed and retrain that seed's selection")
    args = parser.parse_args(argv)
    if args.run:
        run(args.work, args.methods, args.seeds, args.noise, args.pipeline)
    summarise(args.work, args.methods, args.seeds, *args.window)
    if args.pipeline:
        print()
        summarise_pipeline(args.work, args.methods, args.seeds, *args.window)


if __name__ == "__main__":
    main()
