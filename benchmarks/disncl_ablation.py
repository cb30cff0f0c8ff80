"""DisNCL's ablation in the paper's Table V order (L_align only, + L_Dis, + L_soft, + L_reg) beside
``gmm``, as detection AUROC on a clip-art subset with injected noise.

    OMP_NUM_THREADS=1 python benchmarks/disncl_ablation.py --work /tmp/disncl-bench \
        [--pairs 2000] [--ratio 0.5] [--protocol per-caption] [--seeds 0] [--extra]

It draws ``--pairs`` rows of ``clipart.parquet`` (seeded), injects noise with
``ncclean inject-noise``, then runs ``ncclean score`` once per row of the table (towers trained
from scratch: the pixel CNN and the word GRU, named, since ``auto`` now picks pretrained towers;
significance and pseudo-captions off, which do not change ``clean_prob``) and reads
``detection_vs_noisy_gt`` from each sidecar. ``--extra`` adds the defaults as first built and
as of ``a308435``, ``soft_loss=reverse`` and ``robust_loss=hardest``. Prints every command and
a Markdown table; writes ``results.json`` in ``--work``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

CLIPART = Path("/work/shared/data/clipart/clipart.parquet")
ROWS = [
    ("gmm", "gmm", []),
    ("L_align only", "disncl", ["terms=align"]),
    ("+ L_Dis", "disncl", ["terms=align+dis"]),
    ("+ L_soft", "disncl", ["terms=align+dis+soft"]),
    ("+ L_reg (full)", "disncl", ["terms=full"]),
]
BEFORE_UNION = ["soft_loss=reverse", "margin_from=cosine", "clean_set=batch"]
EXTRA = [
    # the defaults before a308435: Eq. 2's clean set, plain MLP heads at half the 256-d joint
    # width, soft targets over every candidate, clean_prob on the last epoch's loss
    ("full, as first built", "disncl", ["clean_rank=1", "heads=mlp", "head_dim=128",
                                        "soft_columns=all", "score=loss", "final=last",
                                        *BEFORE_UNION]),
    ("full, the defaults of a308435", "disncl", BEFORE_UNION),
    ("full, reverse CE", "disncl", ["soft_loss=reverse"]),
    ("full, hardest negative", "disncl", ["robust_loss=hardest"]),
]


def run(command: list[str]) -> float:
    print("$", shlex.join(command), flush=True)
    began = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def subset(source: Path, out: Path, pairs: int, seed: int) -> None:
    table = pq.read_table(source)
    rows = np.sort(np.random.default_rng(seed).choice(table.num_rows, size=pairs, replace=False))
    pq.write_table(table.take(rows), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=CLIPART)
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--protocol", default="per-caption")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--extra", action="store_true")
    parser.add_argument("--only", nargs="*", help="run only these rows (by label), in this order")
    args = parser.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    python = [sys.executable, "-m", "ncclean"]
    clean = args.work / f"clipart-{args.pairs}.parquet"
    noisy = args.work / f"noisy-{args.protocol}-{args.ratio:g}.parquet"
    if not clean.exists():
        subset(args.data, clean, args.pairs, seed=0)
    if not noisy.exists():
        run([*python, "inject-noise", str(clean), "-o", str(noisy), "--ratio", str(args.ratio),
             "--protocol", args.protocol, "--seed", "0"])
    rows = ROWS + (EXTRA if args.extra else [])
    if args.only:
        rows = [row for label in args.only for row in rows if row[0] == label]
    results_path = args.work / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else []
    for label, method, params in rows:
        for seed in args.seeds:
            name = f"{method}-{'-'.join(p.replace('=', '_') for p in params) or 'default'}-{seed}"
            out = args.work / f"{noisy.stem}-{name}.parquet"
            command = [*python, "score", str(noisy), "-o", str(out), "--method", method,
                       "--image-encoder", "pixels", "--text-encoder", "tokens",
                       "--seed", str(seed), "--significance", "off", "--no-pseudo-captions"]
            for p in params:
                command += ["-p", p]
            seconds = run(command)
            sidecar = json.loads(Path(f"{out}.json").read_text())
            detection = sidecar["detection_vs_noisy_gt"]
            history = sidecar["report"].get("history", [])
            results.append({"label": label, "method": method, "params": params, "seed": seed,
                            "noise": f"{args.protocol} {args.ratio:g}", "pairs": args.pairs,
                            "auroc": detection["auroc"], "seconds": round(seconds, 1),
                            "command": shlex.join(command),
                            "last_epoch": history[-1] if history else None})
            results_path.write_text(json.dumps(results, indent=1))
            print(f"| {label} | {seed} | {detection['auroc']:.4f} | {seconds:.0f} s |",
                  flush=True)


if __name__ == "__main__":
    main()
