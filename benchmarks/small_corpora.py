"""How small a corpus each method still works on: AUROC against injected noise by corpus size.

    python benchmarks/small_corpora.py [--ratio 0.3] [--sizes 300 600 1200 2400] [--seeds 0 1]

Clip art (``../shared/data/clipart/``) with ``--ratio`` of its captions moved
(``inject-noise``, categories kept with the images), embedded once with the default towers
(``embed --half``); for each size, seeded random subsets of that many pairs, scored by each
method at its defaults on the vectors (``--image-emb-col image_emb --text-emb-col text_emb``).
Prints one JSON line per (method, size, seed): AUROC of ``clean_prob`` against ``noisy_gt`` and
the share of valid pairs called noisy.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ncclean import api

HERE = Path(__file__).resolve().parent
CLIPART = HERE.parent.parent / "shared" / "data" / "clipart" / "clipart.parquet"
METHODS = ("clip", "gmm", "pc2", "crcl", "sdd", "disncl", "bicro")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratio", type=float, default=0.3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[300, 600, 1200, 2400])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ncclean-small-"))
    noisy, vectors = work / "noisy.parquet", work / "vectors.parquet"
    if not vectors.exists():
        api.inject_noise(CLIPART, noisy, ratio=args.ratio, seed=0, move_with_image=("category",))
        api.embed(noisy, vectors, half=True)
    table = pq.read_table(vectors)
    print(f"command: python benchmarks/small_corpora.py {' '.join(sys.argv[1:])}", flush=True)
    for size in args.sizes:
        for seed in args.seeds:
            rows = np.sort(np.random.default_rng([seed, size]).choice(table.num_rows, size,
                                                                      replace=False))
            subset = work / f"subset-{size}-{seed}.parquet"
            pq.write_table(table.take(rows), subset)
            for method in args.methods:
                out = work / f"{method}-{size}-{seed}.parquet"
                summary = api.score(subset, out, method, seed=seed, cache_dir=False,
                                    image_emb_col="image_emb", text_emb_col="text_emb",
                                    overwrite=True)
                scored = pq.read_table(out, columns=["clean_prob", "partition", "noisy_gt"])
                valid = np.array(scored["partition"].to_pylist()) != "invalid"
                prob = np.asarray(scored["clean_prob"].to_pylist(), dtype=float)[valid]
                truth = np.asarray(scored["noisy_gt"].to_pylist(), dtype=bool)[valid]
                metrics = api.detection_metrics(truth, prob)
                noisy_share = float((np.array(scored["partition"].to_pylist())[valid]
                                     == "noisy").mean())
                print(json.dumps({"method": method, "size": size, "seed": seed,
                                  "auroc": round(float(metrics.auroc), 4),
                                  "called_noisy": round(noisy_share, 3),
                                  "true_noise": round(float(truth.mean()), 3),
                                  "seconds": round(summary.seconds.get("total", 0), 1)}),
                      flush=True)


if __name__ == "__main__":
    main()
