"""Every method fitted on half of a real corpus and applied to the other half.

    python benchmarks/applied_methods.py [--ratio 0.5] [--seed 0] [--methods clip gmm ...]

Clip art (``../shared/data/clipart/``) with ``--ratio`` of its captions moved
(``ncclean inject-noise``, categories kept with their images), embedded once with the default
towers (``ncclean embed``, ImageNet EfficientNet-Lite0 + e5, float16), written as two shards;
then for each method ``ncclean score SHARDS -o OUT --fit-sample N/2 --save-fit FIT`` with the
method's defaults, and the AUROC of ``clean_prob`` against the moved captions on the pairs the
fit trained on (the one pass over the sample) and on the pairs it was applied to (never seen),
as :mod:`fit_halves` reads them. Prints one JSON line per method.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from ncclean import api

HERE = Path(__file__).resolve().parent
CLIPART = HERE.parent.parent / "shared" / "data" / "clipart" / "clipart.parquet"
METHODS = ("clip", "gmm", "pc2", "crcl", "sdd", "disncl", "bicro")


def corpus(work: Path, ratio: float, seed: int) -> Path:
    """The noisy clip art with vectors, as two shards in ``work/in``."""
    noisy, vectors = work / "noisy.parquet", work / "vectors.parquet"
    api.inject_noise(CLIPART, noisy, ratio=ratio, seed=seed, move_with_image=("category",))
    api.embed(noisy, vectors, half=True)
    table = pq.read_table(vectors)
    folder = work / "in"
    folder.mkdir()
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), folder / "part-0.parquet")
    pq.write_table(table.slice(half), folder / "part-1.parquet")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ncclean-applied-"))
    folder = corpus(work, args.ratio, args.seed)
    n = sum(pq.ParquetFile(p).metadata.num_rows for p in folder.glob("*.parquet"))
    sys.path.insert(0, str(HERE))
    from fit_halves import halves

    print(f"command: python benchmarks/applied_methods.py {' '.join(sys.argv[1:])}")
    for method in args.methods:
        out, fit = work / f"out-{method}", work / f"fit-{method}"
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ncclean", "score", str(folder), "-o", str(out),
                        "--method", method, "--image-emb-col", "image_emb", "--text-emb-col",
                        "text_emb", "--id-col", "id", "--fit-sample", str(n // 2),
                        "--save-fit", str(fit), "--seed", str(args.seed), "--json"],
                       check=True, capture_output=True)
        row = halves(str(out), str(fit))
        print(json.dumps({"method": method, "pairs": n, "ratio": args.ratio, "seed": args.seed,
                          "seconds": round(time.perf_counter() - began, 1),
                          "fitted": row["fitted"], "applied": row["applied"]}), flush=True)


if __name__ == "__main__":
    main()
