"""The significance stage's pool search by block size: candidates against a pool, as
``pipeline/apply.py`` computes specificity, timed for several block sizes, with a check that
every row's value is the same whatever its block.

    OMP_NUM_THREADS=2 python benchmarks/kernels/pool_blocks.py \\
        [--candidates 60000 --pool 2551 --dim 512]

A million-pair fit (250,000 sampled) keeps a pool of 2,551 images; the default is that case.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from ncclean.stages.significance import largest_norm, own_log_softmax


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=60_000)
    parser.add_argument("--pool", type=int, default=2551)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--blocks", type=int, nargs="+", default=[512, 2048, 4096, 8192])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n, m, d = args.candidates, args.pool, args.dim
    texts = unit(rng.standard_normal((n, d))).astype(np.float16)
    images = unit(rng.standard_normal((n, d))).astype(np.float16)
    pool = torch.from_numpy(unit(rng.standard_normal((m, d))).astype(np.float32))
    none = np.zeros(0, np.int64)

    def search(block: int) -> np.ndarray:
        norm, out = largest_norm(pool), np.empty(n)
        for start in range(0, n, block):
            t = torch.from_numpy(texts[start:start + block]).float()
            own = (t * torch.from_numpy(images[start:start + block]).float()).sum(1)
            out[start:start + block] = own_log_softmax(own, t, pool, 0.02, none, none,
                                                       norm).numpy()
        return out

    reference = None
    for block in args.blocks:
        began = time.perf_counter()
        values = search(block)
        seconds = time.perf_counter() - began
        reference = values if reference is None else reference
        print(f"block {block:5d}: {seconds:6.2f} s, {n * m * d * 2 / seconds / 1e9:6.1f} GFLOP/s,"
              f" same values as block {args.blocks[0]}: {np.array_equal(values, reference)}")


if __name__ == "__main__":
    main()
