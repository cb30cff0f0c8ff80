"""The default pipeline on a GPU against the CPU: the same command, both devices, one machine.

    python benchmarks/gpu_pipeline.py CORPUS --captions-cache CACHE [--reference CPU.parquet]

``CORPUS`` is a Parquet corpus with ``noisy_gt`` (``ncclean inject-noise``). Runs the default
``ncclean score`` twice in child processes, ``--device cpu`` and ``--device cuda``, each with a
fresh vector cache that holds only the caption vectors copied from ``CACHE`` (the e5 caption
tower is a CPU engine on both devices, so its vectors need not be computed twice: the image tower
and everything after it run on the device named). Then times the image tower alone on the GPU:
decoding and padding on the decoding pool, the network in batches, end to end and each part.
``--reference``: a scored file from another machine (say the 2-core machine the project is
measured on), whose partitions are compared too.

Prints one JSON object: each run's wall time, AUROC against ``noisy_gt`` and partition counts;
the share of pairs with the same partition on both devices; the tower's images/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]


def score(corpus: Path, device: str, captions_cache: Path, work: Path) -> dict:
    """One default ``score`` on ``device``; its output's columns and the wall time."""
    cache = work / f"cache-{device}"
    shutil.copytree(captions_cache / "e5", cache / "e5")
    out = work / f"scored-{device}.parquet"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ncclean", "score", str(corpus), "-o", str(out),
                           "--device", device, "--cache-dir", str(cache), "--json"],
                          capture_output=True, text=True, env={**os.environ})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"score --device {device} failed ({done.returncode}): "
                         f"{done.stderr.strip()[-2000:]}")
    table = pq.read_table(out, columns=["id", "partition", "clean_prob", "noisy_gt"])
    phases = {k: round(v, 2) for k, v in json.loads(done.stdout)["seconds"].items()}
    return {"seconds": round(seconds, 2), "phases": phases, "table": table}


def auroc(table) -> float:
    from sklearn.metrics import roc_auc_score

    truth = np.asarray(table.column("noisy_gt").to_pylist(), dtype=bool)
    prob = np.asarray(table.column("clean_prob").to_pylist(), dtype=np.float64)
    keep = ~np.isnan(prob)
    return round(float(roc_auc_score(truth[keep], -prob[keep])), 4)


def agreement(a, b) -> float:
    """Share of ids with the same partition in two scored tables."""
    left = dict(zip(a.column("id").to_pylist(), a.column("partition").to_pylist(), strict=True))
    right = dict(zip(b.column("id").to_pylist(), b.column("partition").to_pylist(), strict=True))
    same = sum(left[key] == right.get(key) for key in left)
    return round(same / len(left), 4)


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
    parser.add_argument("--captions-cache", type=Path, required=True)
    parser.add_argument("--reference", type=Path)
    args = parser.parse_args()
    import torch

    report: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                    "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as work:
        runs = {device: score(args.corpus, device, args.captions_cache, Path(work))
                for device in ("cuda", "cpu")}
        for device, run in runs.items():
            counts = run["table"].column("partition").value_counts().to_pylist()
            report[device] = {"seconds": run["seconds"], "phases": run["phases"],
                              "auroc": auroc(run["table"]),
                              "partitions": {c["values"]: c["counts"] for c in counts}}
        report["same_partition_cuda_cpu"] = agreement(runs["cuda"]["table"], runs["cpu"]["table"])
        if args.reference:
            reference = pq.read_table(args.reference, columns=["id", "partition", "clean_prob",
                                                               "noisy_gt"])
            report["reference_auroc"] = auroc(reference)
            report["same_partition_cuda_reference"] = agreement(runs["cuda"]["table"], reference)
            report["same_partition_cpu_reference"] = agreement(runs["cpu"]["table"], reference)
    report["tower"] = tower(args.corpus)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
