"""Scaling benchmarks (issue 38): sharded scoring's peak memory and time, local against ray, the
gmm fit on a sample against the full fit, and the quality of applying a fit instead of training
on a pair.

    python benchmarks/scale.py shards --pairs 2000000 --shards 20 --fit-sample 200000
    python benchmarks/scale.py gmm --pairs 1000000 --fit-sample 200000
    python benchmarks/scale.py quality --pairs 8000

Corpora are synthetic: unit ``--dim``-d float16 image vectors, caption vectors near their image
for clean pairs and random for the ``--noise`` share (``noisy_gt``), written shard by shard (one
shard in memory). Every ncclean run is a child process (``python -m ncclean score ...``); its
peak RSS, and that of every process it starts (Ray's workers), is read from ``/proc`` (VmHWM)
while it runs. Prints one JSON line per run and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_corpus(folder: Path, pairs: int, shards: int, dim: int, noise: float, seed: int,
                 first: int = 0, spread: float = 0.8) -> Path:
    """``pairs`` synthetic pairs in ``shards`` Parquet files (ids ``p<k>`` from ``first``); a
    clean caption vector is its image's plus ``spread`` times Gaussian noise per dimension."""
    folder.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, pairs, shards + 1).astype(int)
    for s in range(shards):
        rng = np.random.default_rng([seed, s])
        n = int(bounds[s + 1] - bounds[s])
        image = rng.normal(size=(n, dim)).astype(np.float32)
        text = image + spread * rng.normal(size=(n, dim)).astype(np.float32)
        noisy = rng.random(n) < noise
        text[noisy] = rng.normal(size=(int(noisy.sum()), dim))
        image /= np.linalg.norm(image, axis=1, keepdims=True)
        text /= np.linalg.norm(text, axis=1, keepdims=True)
        ids = np.arange(first + bounds[s], first + bounds[s + 1])
        table = pa.table({
            "id": pa.array([f"p{k}" for k in ids]),
            "caption": pa.array([f"caption {k}" for k in ids]),
            "img": pa.FixedSizeListArray.from_arrays(pa.array(image.astype(np.float16).ravel()),
                                                     dim),
            "txt": pa.FixedSizeListArray.from_arrays(pa.array(text.astype(np.float16).ravel()),
                                                     dim),
            "noisy_gt": pa.array(noisy),
        })
        pq.write_table(table, folder / f"part-{s:05d}.parquet")
    return folder


def _tree(root: int) -> list[int]:
    """``root`` and every process descended from it (from ``/proc``)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def _hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(command: list[str]) -> dict:
    """Run ``command``; its wall time, its exit code and the peak RSS of each of its processes
    (the largest, and the driver's)."""
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=os.environ | {"OMP_NUM_THREADS": os.environ.get(
                                 "OMP_NUM_THREADS", "1")})
    peaks: dict[int, int] = {}
    while child.poll() is None:
        for pid in _tree(child.pid):
            peaks[pid] = max(peaks.get(pid, 0), _hwm(pid))
        time.sleep(0.5)
    out, err = child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"failed ({child.returncode}): {' '.join(command)}\n{err[-2000:]}")
    return {"seconds": round(time.perf_counter() - began, 1),
            "peak_rss_gb": round(max(peaks.values(), default=0) / 2**30, 3),
            "driver_rss_gb": round(peaks.get(child.pid, 0) / 2**30, 3),
            "processes": len(peaks), "summary": json.loads(out) if out.strip() else None}


def score_command(input: Path, output: Path, method: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ncclean", "score", str(input), "-o", str(output),
            "--method", method, "--image-emb-col", "img", "--text-emb-col", "txt",
            "--id-col", "id", "--no-cache", "--json", *extra]


def read_partitions(folder: Path) -> pa.Table:
    files = sorted(folder.glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f, columns=["id", "partition", "clean_prob",
                                                      "noisy_gt"]) for f in files])


def shards_bench(args, work: Path) -> list[dict]:
    corpus = write_corpus(work / "in", args.pairs, args.shards, args.dim, args.noise, args.seed,
                          spread=args.spread)
    rows, tables = [], {}
    for engine in args.engines:
        out = work / f"out-{engine}"
        result = run(score_command(corpus, out, "clip", "--fit-sample", str(args.fit_sample),
                                   "--engine", engine, "--seed", str(args.seed)))
        tables[engine] = read_partitions(out)
        ids = tables[engine].column("id").to_pylist()
        result |= {"bench": "shards", "engine": engine, "pairs": args.pairs,
                   "shards": args.shards, "fit_sample": args.fit_sample,
                   "every_row_once": len(ids) == len(set(ids)) == args.pairs}
        rows.append(result)
    if len(tables) == 2:
        first, second = tables.values()
        same = first.column("partition").equals(second.column("partition")) and \
            first.column("id").equals(second.column("id"))
        rows.append({"bench": "shards", "engines_same_partition": bool(same)})
    return rows


def gmm_bench(args, work: Path) -> list[dict]:
    """Today's one pass (the whole corpus fitted, one output file) against a fit on
    ``--fit-sample`` pairs applied shard by shard, in the same benchmark run."""
    corpus = write_corpus(work / "in", args.pairs, args.shards, args.dim, args.noise, args.seed,
                          spread=args.spread)
    rows = []
    one_pass = work / "one-pass.parquet"
    result = run(score_command(corpus, one_pass, "gmm", "--seed", str(args.seed),
                               "--fit-sample", "all"))  # auto would sample a large corpus
    rows.append(result | {"bench": "gmm", "run": "one pass (full fit)", "pairs": args.pairs,
                          "auroc": auroc(pq.read_table(one_pass))})
    out = work / "sampled"
    result = run(score_command(corpus, out, "gmm", "--seed", str(args.seed), "--fit-sample",
                               str(args.fit_sample)))
    rows.append(result | {"bench": "gmm", "run": f"fit-sample {args.fit_sample}, applied",
                          "pairs": args.pairs, "auroc": auroc(read_partitions(out))})
    return rows


def auroc(table: pa.Table) -> float:
    from sklearn.metrics import roc_auc_score

    truth = ~np.asarray(table.column("noisy_gt").to_pylist(), dtype=bool)
    return round(float(roc_auc_score(truth, np.asarray(table.column("clean_prob").to_pylist(),
                                                          dtype=float))), 4)


def quality_bench(args, work: Path) -> list[dict]:
    """Fit on half the pairs (``--fit-sample`` of half: the half with the smallest id hashes),
    apply to the other half; AUROC of ``clean_prob`` against ``noisy_gt`` on each half."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ncclean
    from ncclean.api import fit_positions

    corpus = write_corpus(work / "in", args.pairs, 2, args.dim, args.noise, args.seed,
                          spread=args.spread)
    rows = []
    for method in args.methods:
        fit, out = work / f"fit-{method}", work / f"out-{method}"
        run(score_command(corpus, out, method, "--fit-sample", str(args.pairs // 2),
                          "--save-fit", str(fit), "--seed", str(args.seed)))
        table = read_partitions(out)
        positions, meta = fit_positions(fit, out)
        fitted = positions >= 0
        rows.append({"bench": "quality", "method": method, "pairs": args.pairs,
                     "noise": args.noise, "spread": args.spread,
                     "calibration": meta.get("calibration"),
                     "auroc_fitted_half": auroc(table.filter(pa.array(fitted))),
                     "auroc_applied_half": auroc(table.filter(pa.array(~fitted)))})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=["shards", "gmm", "quality"])
    parser.add_argument("--pairs", type=int, default=2_000_000)
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--spread", type=float, default=0.8,
                        help="caption noise of clean pairs, per dimension")
    parser.add_argument("--fit-sample", type=int, default=200_000)
    parser.add_argument("--engines", nargs="+", default=["local", "ray"])
    parser.add_argument("--methods", nargs="+", default=["clip", "gmm"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None, help="scratch folder [a temp one]")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ncclean-scale-"))
    bench = {"shards": shards_bench, "gmm": gmm_bench, "quality": quality_bench}[args.bench]
    rows = bench(args, work)
    print("command: python benchmarks/scale.py " + " ".join(sys.argv[1:] if argv is None
                                                           else argv))
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k != "summary"}))


if __name__ == "__main__":
    main()
