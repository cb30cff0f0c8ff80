"""The image tower alone on a GPU: decoding and padding on the decoding pool, the network in
batches, end to end and each part; the network by arithmetic and batch size; host-to-GPU copies.

    python benchmarks/kernels/gpu_tower.py CORPUS

Prints one JSON object. Calls the tower's internals (:mod:`ncclean.models.imagenet`,
:mod:`ncclean.data.corpus`), so it may break when they change (``README.md`` in this folder);
the default command on a GPU against the CPU is ``benchmarks/gpu_pipeline.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def tower(corpus: Path) -> dict:
    """The image tower on the GPU: decode + pad on the pool, the network, and both together."""
    import torch

    from ncclean.data.corpus import map_images, read_corpus
    from ncclean.data.pool import decode_workers
    from ncclean.models.imagenet import imagenet_encoder, imagenet_image_vectors

    loaded = read_corpus(corpus)
    encoder = imagenet_encoder(device="cuda")
    n = loaded.n_images
    start = time.perf_counter()
    prepared = []
    for results in map_images(loaded, lambda data: encoder.prepare(data, 10**8), "decode",
                              lambda *a, **k: None):
        prepared.extend(r for _, r in results if not isinstance(r, str))
    decode = time.perf_counter() - start
    encoder.images(prepared[:256])  # warm-up: cuDNN's kernels chosen, weights on the device
    torch.cuda.synchronize()
    start = time.perf_counter()
    encoder.images(prepared)
    torch.cuda.synchronize()
    network = time.perf_counter() - start
    start = time.perf_counter()
    imagenet_image_vectors(loaded, max_pixels=10**8, device="cuda")
    torch.cuda.synchronize()
    whole = time.perf_counter() - start
    rates = network_rates(encoder.network, prepared)
    rates |= copy_rates(prepared)
    return {"images": n, "decoded": len(prepared), "network_variants": rates,
            "decode_images_per_s": round(len(prepared) / decode, 1),
            "network_images_per_s": round(len(prepared) / network, 1),
            "tower_images_per_s": round(n / whole, 1),
            "decode_workers": decode_workers()}


def network_rates(network, prepared: list) -> dict:
    """Images/s of the network alone on the GPU, the pixels already there, by arithmetic
    (fp32, TF32 matrix units, bf16 autocast) and batch size: what the tower could reach."""
    import torch

    pixels = torch.from_numpy(np.stack(prepared)).cuda().permute(0, 3, 1, 2)
    rates = {}
    for arithmetic in ("fp32", "tf32", "bf16"):
        torch.backends.cudnn.allow_tf32 = arithmetic == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = arithmetic == "tf32"
        for batch in (256, 1024):
            def once(arithmetic=arithmetic, batch=batch):
                with torch.inference_mode(), torch.autocast(
                        "cuda", torch.bfloat16, enabled=arithmetic == "bf16"):
                    for start in range(0, len(pixels) - batch + 1, batch):
                        x = pixels[start:start + batch].float().sub_(127.0).div_(128.0)
                        network(x.contiguous(memory_format=torch.channels_last))
                torch.cuda.synchronize()
            once()
            start = time.perf_counter()
            once()
            done = (len(pixels) // batch) * batch
            rates[f"{arithmetic}/{batch}"] = round(done / (time.perf_counter() - start), 1)
    torch.backends.cudnn.allow_tf32 = True
    return rates


def copy_rates(prepared: list) -> dict:
    """GB/s of the decoded pixels from host memory to the GPU, pageable and pinned."""
    import torch

    pixels = torch.from_numpy(np.stack(prepared))
    rates = {}
    for name, source in (("pageable", pixels), ("pinned", pixels.pin_memory())):
        source.cuda()
        torch.cuda.synchronize()
        start = time.perf_counter()
        source.cuda()
        torch.cuda.synchronize()
        rates[f"copy_{name}_GBps"] = round(pixels.nbytes / 1e9 / (time.perf_counter() - start), 2)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    args = parser.parse_args()
    print(json.dumps(tower(args.corpus)))


if __name__ == "__main__":
    main()
