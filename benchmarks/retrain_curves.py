"""Summarise the learning curves of ``ncclean retrain --eval-every N --json`` runs.

One test evaluation moves by several rSum points from one epoch to the next, so a single reading
at the last step is a noisy measure of an arm. This prints, per arm, the strict rSum at a few
step counts (the nearest evaluation at or before each) and the mean over a window of steps, and,
when the files hold a ``noisy`` and an ``oracle`` arm, the share of the gap each other arm
recovers on those window means::

    python benchmarks/retrain_curves.py baseline.json other.json --window 2400 3200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load_curves(paths: list[Path]) -> dict[str, list[tuple[int, float]]]:
    """``{label: [(step, strict rSum), ...]}``; an arm named ``cleaned`` in a file without
    baseline arms is labelled by the file's name. Only one file may hold the ``noisy`` and
    ``oracle`` arms: the gaps of every other arm are measured against them (one seed per call)."""
    curves = {}
    baseline_from = None
    for path in paths:
        payload = json.loads(path.read_text())
        alone = len(payload["arms"]) == 1
        for arm, result in payload["arms"].items():
            if arm == "matcher":  # a saved matcher (retrain --matcher), evaluated once: no curve
                continue
            if "curve" not in result:
                raise SystemExit(f"{path}: arm {arm} has no curve; run retrain with --eval-every")
            if arm in ("noisy", "oracle"):
                if baseline_from not in (None, path):
                    raise SystemExit(f"{path} and {baseline_from} both hold baseline arms; "
                                     "summarise one seed (one --baseline file) at a time")
                baseline_from, label = path, arm
            else:
                label = path.stem if alone else f"{path.stem}:{arm}"
            curves[label] = [(point["step"], point["rsum"]) for point in result["curve"]]
    return curves


def at_step(curve: list[tuple[int, float]], step: int) -> float | None:
    before = [rsum for at, rsum in curve if at <= step]
    return before[-1] if before else None


def window_mean(curve: list[tuple[int, float]], low: int, high: int) -> float | None:
    inside = [rsum for at, rsum in curve if low < at <= high]
    return sum(inside) / len(inside) if inside else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--steps", type=int, nargs="+", default=[800, 1600, 2400, 3200])
    parser.add_argument("--window", type=int, nargs=2, default=[2400, 3200],
                        metavar=("LOW", "HIGH"), help="mean over evaluations in (LOW, HIGH]")
    args = parser.parse_args()
    curves = load_curves(args.files)
    low, high = args.window
    means = {label: window_mean(curve, low, high) for label, curve in curves.items()}
    base = means.get("noisy"), means.get("oracle")
    print("| arm | " + " | ".join(f"step {s}" for s in args.steps)
          + f" | mean over ({low}, {high}] | gap recovered |")
    print("|---" * (len(args.steps) + 3) + "|")
    for label, curve in curves.items():
        cells = [at_step(curve, s) for s in args.steps] + [means[label]]
        gap = "-"
        if None not in base and means[label] is not None and label not in ("noisy", "oracle"):
            gap = f"{(means[label] - base[0]) / (base[1] - base[0]):.0%}"
        print(f"| {label} | " + " | ".join("-" if v is None else f"{v:.1f}" for v in cells)
              + f" | {gap} |")


if __name__ == "__main__":
    main()
