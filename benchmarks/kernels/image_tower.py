"""Throughput of the imagenet image tower (EfficientNet-Lite) on clip art, each stage as a share
of the machine's fp32 matmul ceiling measured in the same process, with the same thread count,
right before it.

For each variant asked for (``--variants``, default Lite0; Lite1/Lite2 need their weight
packages), on ``--n`` clip-art images drawn with a fixed seed:

- *network, before*: timm's network as the tower ran it until the fused form (batches of 32,
  channels-last, inference mode, all torch threads inside each operator), on decoded images;
- *network*: the tower's forward pass now (:mod:`ncclean.models.imagenet_fused`, batches of
  ``imagenet._CHUNK``, a batch per thread), on the same images, at each arithmetic of
  ``--precisions`` (``NCCLEAN_IMAGE_PRECISION``: fp32, bf16, int8), and fp32's largest
  difference from *before*;
- *decode*: reading the bytes and decoding + padding to the input side on the shared pool
  (:func:`ncclean.data.corpus.map_images` with the tower's ``prepare``), no network;
- *vectors*: :func:`ncclean.models.imagenet.imagenet_image_vectors` with no cache, as ``score``
  computes them (decode, then the network, record batch by record batch);
- *embed*: ``ncclean embed --encoder imagenet`` on the sample, in this process (network already
  loaded), writing the parquet file.

*vectors* and *embed* run once per precision too; each precision's vectors are compared with
fp32's (cosine per image: smallest and mean). ``--calibrate`` prints int8's residual-stream
ranges (:data:`ncclean.models.imagenet_int8.RANGES`) from the first 128 images of the sample.

FLOP per image are counted by ``torch.utils.flop_counter.FlopCounterMode`` on one forward pass of
timm's network at the variant's input side: 2 per multiply-add of every convolution (depthwise
included) and matmul; batch norm, activations, padding and pooling are not counted; the fused
form's zero-padded stride-2 kernels are not counted either (the count is of the network, not of
how it runs). "% of ceiling" = images/s x FLOP/image / ceiling. The ceiling is the best of five
2048 x 2048 fp32 ``torch.mm`` (issue 64's bar), and beside it the faster of that and oneDNN's
dense kernel; with ``--cpu-time`` every time, the ceilings' included, is the process's CPU time. A
cheap quality proxy: leave-one-out nearest-neighbour accuracy (cosine) of the vectors on the
images' top-level category. Results:
``benchmarks/results/image-tower.md``. The lead's rerun, alone on the machine::

    OMP_NUM_THREADS=2 python benchmarks/kernels/image_tower.py \\
        /work/shared/data/clipart/clipart.parquet

On a loaded machine, one thread timed by CPU time says what the code does without the load:
``OMP_NUM_THREADS=1 python benchmarks/kernels/image_tower.py ... --cpu-time``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

# What "seconds" are: wall-clock, or with --cpu-time the process's CPU time (with one thread, a
# measure that other processes' load does not stretch).
clock = time.perf_counter


def matmul_ceiling() -> tuple[float, float]:
    """GFLOP/s of a 2048 x 2048 fp32 product, best of five, timed by ``clock`` (CPU time with
    ``--cpu-time``): ``torch.mm``'s (MKL; issue 64's bar) and the faster of it and oneDNN's dense
    kernel (``benchmarks/speed.py``'s ceiling; on this project's AMD machine about twice MKL's)."""
    from ncclean.models import linear

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    products = {"mm": lambda: a @ b}
    if linear.kernel_available():
        products["onednn"] = lambda: torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [],
                                                                        "")
    rates = {}
    for name, product in products.items():
        product()
        best = float("inf")
        for _ in range(5):
            began = clock()
            product()
            best = min(best, clock() - began)
        rates[name] = 2 * 2048**3 / best / 1e9
    return rates["mm"], max(rates.values())


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


def load() -> str:
    return open("/proc/loadavg").read().split()[0] if Path("/proc/loadavg").exists() else "?"


def timed(stage: str, n: int, flop: float, run: Callable[[], object], repeats: int = 1):
    """Measure the ceiling, then ``run`` (best of ``repeats``); print one table row."""
    ceiling, best_ceiling = matmul_ceiling()
    began_load = load()
    best, result = float("inf"), None
    for _ in range(repeats):
        began = clock()
        result = run()
        best = min(best, clock() - began)
    rate = n / best
    share = (f"{100 * rate * flop / 1e9 / ceiling:.0f}% / "
             f"{100 * rate * flop / 1e9 / best_ceiling:.0f}%") if flop else "-"
    gflops = f"{rate * flop / 1e9:.1f}" if flop else "-"
    print(f"| {stage} | {began_load}/{load()} | {ceiling:.0f} / {best_ceiling:.0f} | {best:.1f} | "
          f"{rate:.1f} | {gflops} | {share} |", flush=True)
    return result


def quiet(function: Callable, *args):
    """``function(*args)`` with its standard output swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return function(*args)


def before_images(encoder, prepared: list[np.ndarray]) -> np.ndarray:
    """The tower's forward pass until ``3ba69b7``: timm's network, batches of 32, every torch
    thread inside each operator."""
    out = np.empty((len(prepared), encoder.dim), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(prepared), 32):
            pixels = torch.from_numpy(np.stack(prepared[start:start + 32]))
            x = pixels.permute(0, 3, 1, 2).float().sub_(127.0).div_(128.0)
            out[start:start + len(x)] = encoder.network(x).numpy()
    return out


def cosines(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    return (got * expected).sum(1) / np.maximum(
        np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1), 1e-12)


def measure(name: str, path: Path, folder: Path, labels: np.ndarray, before: bool,
            precisions: list[str]) -> None:
    """Print the table of one variant on the sample at ``path``."""
    import ncclean.models.imagenet as imagenet
    from ncclean.cli import main as cli
    from ncclean.data.corpus import map_images, read_corpus
    from ncclean.data.images import DEFAULT_MAX_PIXELS

    variant = imagenet.VARIANTS[name]
    if importlib.util.find_spec(variant.package) is None:
        print(f"{name}: weight package {variant.package} not installed")
        return
    encoders = {}
    for precision in precisions:
        os.environ["NCCLEAN_IMAGE_PRECISION"] = precision
        began = time.perf_counter()
        encoders[precision] = imagenet.imagenet_encoder(name)
        print(f"{name} {precision}: loaded in {time.perf_counter() - began:.1f} s "
              f"({type(encoders[precision].forward).__name__})")
    encoder = encoders[precisions[0]]
    flop = flop_per_image(encoder.network, variant.size)
    print(f"\n{name}: {variant.size} px, {flop / 1e9:.3f} GFLOP/image\n")
    print("| stage | load avg before/after | ceiling GFLOP/s (torch.mm / best) | s | images/s | "
          "GFLOP/s | % of ceiling (torch.mm / best) |")
    print("|---|---|---|---|---|---|---|")
    decoded = list(read_corpus(path, image_size=variant.size).images)
    unfused = None
    if before:
        unfused = timed("network, before (timm, batches of 32)", len(decoded), flop,
                        lambda: before_images(encoder, decoded))
    after = {}
    for precision, chosen in encoders.items():
        after[precision] = timed(f"network {precision} (fused, batches of {imagenet._CHUNK})",
                                 len(decoded), flop, lambda e=chosen: e.images(decoded), repeats=2)
    corpus = read_corpus(path)
    prepare = lambda data: encoder.prepare(data, DEFAULT_MAX_PIXELS)  # noqa: E731
    timed("decode + pad (no network)", corpus.n_images, 0.0,
          lambda: sum(len(r) for r in map_images(corpus, prepare, "decoding")))
    vectors = {}
    for precision in precisions:
        os.environ["NCCLEAN_IMAGE_PRECISION"] = precision
        vectors[precision] = timed(
            f"vectors {precision}: decode + network, no cache", corpus.n_images, flop,
            lambda: np.asarray(imagenet.imagenet_image_vectors(
                corpus, variant=name, max_pixels=DEFAULT_MAX_PIXELS)))
        if name == imagenet.DEFAULT_VARIANT:  # embed encodes every row's image
            command = ["embed", str(path), "-o", str(folder / "emb.parquet"), "--encoder",
                       "imagenet", "--json", "--overwrite"]
            timed(f"`ncclean embed --encoder imagenet`, {precision}", corpus.n_pairs, flop,
                  lambda c=command: quiet(cli, c))
    os.environ.pop("NCCLEAN_IMAGE_PRECISION")
    print()
    if unfused is not None and "fp32" in after:
        print(f"largest |fused fp32 - timm| over the features: "
              f"{np.abs(after['fp32'] - unfused).max():.2e} (features up to {unfused.max():.2f})")
    for precision, got in vectors.items():
        accuracy = nearest_neighbour_accuracy(got[corpus.image_group], labels)
        line = f"{precision}: 1-NN category accuracy {accuracy:.3f}"
        if "fp32" in vectors and precision != "fp32":
            decoded_ok = np.linalg.norm(vectors["fp32"], axis=1) > 0  # zero: not decodable
            cosine = cosines(got, vectors["fp32"])[decoded_ok]
            line += (f"; cosine to fp32 smallest {cosine.min():.4f}, mean {cosine.mean():.4f}; "
                     f"largest |difference| {np.abs(got - vectors['fp32']).max():.3f}")
        print(line)


def print_ranges(name: str, path: Path) -> None:
    """int8's residual-stream ranges calibrated on the sample's first 128 images."""
    import ncclean.models.imagenet as imagenet
    from ncclean.data.corpus import read_corpus
    from ncclean.models.imagenet_fused import fuse
    from ncclean.models.imagenet_int8 import calibrate

    variant = imagenet.VARIANTS[name]
    fused = fuse(imagenet.load_network(name), variant.size)
    images = np.stack(list(read_corpus(path, image_size=variant.size).images)[:128])
    batches = [torch.from_numpy(images[s:s + 4]).permute(0, 3, 1, 2).float().sub_(127.0)
               .div_(128.0) for s in range(0, len(images), 4)]
    print(f"{variant.weights().name}: {calibrate(fused, batches)}")


def main() -> None:
    global clock
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's ncclean
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default="lite0", help="comma-separated: lite0,lite1,lite2")
    parser.add_argument("--no-before", action="store_true", help="skip timm's unfused network")
    parser.add_argument("--precisions", default="fp32,bf16,int8",
                        help="comma-separated, fp32 first: the arithmetic of each timed row")
    parser.add_argument("--calibrate", action="store_true",
                        help="print int8's ranges (imagenet_int8.RANGES) and stop")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by the process's CPU time (meaningful with one thread)")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter

    table = pq.read_table(args.corpus)
    rows = np.sort(np.random.default_rng(args.seed).choice(table.num_rows, args.n, replace=False))
    sample = table.take(pa.array(rows))
    labels = np.array([c.split("/")[0] for c in sample.column("category").to_pylist()])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    print(f"commit {commit}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.n} pairs (seed {args.seed}), load average {load()}, "
          f"{'CPU' if args.cpu_time else 'wall-clock'} seconds")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sample.parquet"
        pq.write_table(sample, path)
        for name in args.variants.split(","):
            if args.calibrate:
                print_ranges(name, path)
                continue
            measure(name, path, Path(folder), labels, not args.no_before,
                    args.precisions.split(","))


if __name__ == "__main__":
    main()
