"""Issue 37's time bar: today's default against the old one, end to end, cold cache, one run.

Both arms run ``ncclean score IN -o OUT --json`` with no encoder or method option, each in a
child process with an empty cache folder (``NCCLEAN_CACHE``), so images are decoded and embedded
from scratch:

- ``default``: what a user gets now (the pretrained towers, ImageNet EfficientNet-Lite0 images
  and e5 captions, with ``--method auto``: ``clip``);
- ``old default``: the towers trained from scratch (``NCCLEAN_TOWERS=scratch``: a 64 px CNN and
  a word GRU, ``--method auto``: ``gmm``), the default before issue 37.

Prints one JSON line per arm (wall seconds, the run's phases, peak RSS, AUROC against
``noisy_gt``, the load average before and after) and the ratio of the two wall times::

    python benchmarks/default_time.py noisy-0.5.parquet
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from quality import run_child

ARMS = {"default": {}, "old default": {"NCCLEAN_TOWERS": "scratch"}}


def load() -> float:
    return os.getloadavg()[0]


def run_arm(name: str, corpus: Path, work: Path, seed: int) -> dict:
    out = work / f"{name.replace(' ', '-')}.parquet"
    cache = work / f"cache-{name.replace(' ', '-')}"
    env = {**os.environ, "NCCLEAN_CACHE": str(cache), **ARMS[name]}
    if "NCCLEAN_TOWERS" not in ARMS[name]:
        env.pop("NCCLEAN_TOWERS", None)
    before = load()
    command = [sys.executable, "-m", "ncclean", "score", str(corpus), "-o", str(out),
               "--seed", str(seed), "--json"]
    stdout, seconds, peak = run_child(command, env)
    summary = json.loads(stdout)
    return {"arm": name, "seconds": round(seconds, 1), "phases": summary["seconds"],
            "method": summary["method"], "peak_mb": round(peak),
            "auroc": (summary.get("detection_vs_noisy_gt") or {}).get("auroc"),
            "load_before": before, "load_after": load()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="a noisy corpus with images and noisy_gt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ncclean-default-time-") as work:
        for name in args.arms:
            rows.append(run_arm(name, args.corpus, Path(work), args.seed))
            print(json.dumps(rows[-1]), flush=True)
    if len(rows) == 2:
        print(json.dumps({"default / old default": round(rows[0]["seconds"] / rows[1]["seconds"],
                                                           3)}))


if __name__ == "__main__":
    main()
