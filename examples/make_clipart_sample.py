"""Derive ``examples/clipart-300.parquet`` from the shared clip-art corpus (run from the repo root).

300 pairs drawn at random with seed 0, kept in corpus order, all columns. The sample keeps the
corpus's natural noise (collection names such as "gramastar", a few wrong titles) and its mix of
languages; ``make demo`` injects synthetic noise on top.

    python examples/make_clipart_sample.py [--source ../shared/data/clipart/clipart.parquet]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path,
                        default=HERE.parent.parent / "shared" / "data" / "clipart" /
                        "clipart.parquet")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    table = pq.read_table(args.source)
    rows = np.sort(np.random.default_rng(args.seed).choice(table.num_rows, args.n, replace=False))
    out = HERE / f"clipart-{args.n}.parquet"
    pq.write_table(table.take(rows), out, compression="zstd")
    print(f"wrote {args.n} pairs to {out} ({out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
