"""Scoring a corpus stored as a folder of Parquet shards.

``ncclean score`` accepts a folder of shards as its input and reads them as one corpus; here
the output is one Parquet file holding every input row once. Written to a folder (``-o DIR``),
the run fits once on a sample and applies the fit shard by shard, one output shard per input
shard (``docs/scaling.md``).

    python examples/sharded.py --out /tmp/ncclean-shards [--tiny]

The same on the command line: ``ncclean score shards/ -o scored.parquet``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow.parquet as pq

from ncclean import api


def write_shards(corpus: Path, folder: Path, n_shards: int) -> list[Path]:
    """``corpus`` cut into ``n_shards`` Parquet files of consecutive rows in ``folder``."""
    table = pq.read_table(corpus)
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-table.num_rows // n_shards)
    paths = []
    for k in range(n_shards):
        path = folder / f"part-{k:05d}.parquet"
        pq.write_table(table.slice(k * size, size), path)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> api.ScoreSummary:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    api.synth(out / "clean.parquet", n_images=30 if args.tiny else 300, captions_per_image=3,
              seed=0)
    api.inject_noise(out / "clean.parquet", out / "noisy.parquet", ratio=0.3, seed=0)
    shards = write_shards(out / "noisy.parquet", out / "shards", n_shards=3)
    print(f"wrote {len(shards)} shards in {out / 'shards'}")
    params = {"warmup_epochs": 1, "epochs": 2, "batch_size": 32, "pool_size": 64} \
        if args.tiny else {}
    size = {"embed_dim": 32, "image_size": 32} if args.tiny else {}
    summary = api.score(out / "shards", out / "scored.parquet", params=params, seed=0,
                        cache_dir=out / "cache", **size)
    print(f"scored {summary.n_pairs} pairs from {len(shards)} shards into {summary.output}")
    return summary


if __name__ == "__main__":
    main()
