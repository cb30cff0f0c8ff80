"""The default on seeded subsets of an embedded noisy corpus, by size: how small a corpus `clip`
still ranks.

    python benchmarks/subset_sizes.py NOISY.parquet --sizes 100 150 200 250 300 --seeds 0 1 2 3

``NOISY.parquet``: a corpus with ``noisy_gt`` and the default towers' vectors (``image_emb``,
``text_emb``; ``ncclean inject-noise`` then ``ncclean embed``, or ``embed`` then
``inject-noise --image-emb-col image_emb``). Each subset is drawn as
``benchmarks/small_corpora.py`` draws its own (``numpy.random.default_rng([seed, size])``,
rows in order) and scored with ``seed``; one JSON line per (size, seed): valid pairs, AUROC,
the noise estimate and the true noise among the valid pairs.

A corpus of images with no noise yet, the noise injected into each subset (``--inject RATIO``:
``inject-noise --ratio RATIO --seed SEED --move-with-image category``) and scored from its
images by ``--method`` (the towers from scratch where ``NCCLEAN_TOWERS=scratch`` is set):

    NCCLEAN_TOWERS=scratch python benchmarks/subset_sizes.py shared/data/clipart/clipart.parquet \
        --inject 0.3 --method clip --sizes 600 1200 2400 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ncclean import api


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("noisy", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 150, 200, 250, 300])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--inject", type=float, default=None,
                        help="inject this share of noise into each subset (a corpus of images)")
    parser.add_argument("--method", default="auto")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ncclean-subsets-"))
    table = pq.read_table(args.noisy)
    for size in args.sizes:
        for seed in args.seeds:
            rows = np.sort(np.random.default_rng([seed, size]).choice(table.num_rows, size,
                                                                      replace=False))
            subset = work / f"subset-{size}-{seed}.parquet"
            out = work / f"out-{size}-{seed}.parquet"
            vectors = dict(image_emb_col="image_emb", text_emb_col="text_emb")
            if args.inject is None:
                pq.write_table(table.take(rows), subset)
            else:
                clean = work / f"clean-{size}-{seed}.parquet"
                pq.write_table(table.take(rows), clean)
                api.inject_noise(clean, subset, ratio=args.inject, seed=seed,
                                 move_with_image=["category"], overwrite=True, progress=False)
                vectors = {}
            summary = api.score(subset, out, args.method, seed=seed, cache_dir=False,
                                overwrite=True, progress=False, **vectors)
            scored = pq.read_table(out, columns=["partition", "noisy_gt"]).to_pydict()
            valid = np.array(scored["partition"]) != "invalid"
            truth = np.array(scored["noisy_gt"], dtype=bool)[valid]
            print(json.dumps({"size": size, "seed": seed, "valid": int(valid.sum()),
                              "auroc": round(float(summary.detection["auroc"]), 4),
                              "noise_rate": round(float(summary.noise_rate), 3),
                              "true_noise": round(float(truth.mean()), 3)}), flush=True)


if __name__ == "__main__":
    main()
