"""The default pipeline on a GPU against the CPU: the same command, both devices, one machine.

    python benchmarks/gpu_pipeline.py CORPUS --captions-cache CACHE [--reference CPU.parquet]

``CORPUS`` is a Parquet corpus with ``noisy_gt`` (``ncclean inject-noise``). Runs the default
``ncclean score`` twice in child processes, ``--device cpu`` and ``--device cuda``, each with a
fresh vector cache that holds only the caption vectors copied from ``CACHE`` (the e5 caption
tower is a CPU engine on both devices, so its vectors need not be computed twice: the image tower
and everything after it run on the device named). ``--reference``: a scored file from another
machine (say the 2-core machine the project is measured on), whose partitions are compared too.
The image tower alone on the GPU, part by part: ``benchmarks/kernels/gpu_tower.py``.

Prints one JSON object: each run's wall time, AUROC against ``noisy_gt``, partition counts and
the prior space's weight in ``clip``'s neighbours' term (``null`` where it is left out);
the share of pairs with the same partition on both devices.
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
    record = json.loads(Path(f"{out}.json").read_text())
    prior = record.get("report", {}).get("neighbours", {}).get("prior")
    return {"seconds": round(seconds, 2), "phases": phases, "prior_weight": prior,
            "table": table}


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
                              "auroc": auroc(run["table"]), "prior_weight": run["prior_weight"],
                              "partitions": {c["values"]: c["counts"] for c in counts}}
        report["same_partition_cuda_cpu"] = agreement(runs["cuda"]["table"], runs["cpu"]["table"])
        if args.reference:
            reference = pq.read_table(args.reference, columns=["id", "partition", "clean_prob",
                                                               "noisy_gt"])
            report["reference_auroc"] = auroc(reference)
            report["same_partition_cuda_reference"] = agreement(runs["cuda"]["table"], reference)
            report["same_partition_cpu_reference"] = agreement(runs["cpu"]["table"], reference)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
