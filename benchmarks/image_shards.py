"""Raw image shards through the sharded pipeline (issue 61's first bar): img2dataset-style tars
of clip-art images and captions, no vectors, scored with ``ncclean score wds/ -o out/``.

    python benchmarks/image_shards.py --pairs 16000 --shards 16 --moved 0.3 --seed 0

Builds, from ``../shared/data/clipart/clipart.parquet``, a folder of ``--shards`` tars of
``--pairs`` pairs (``KEY.jpg`` re-encoded as JPEG, ``KEY.txt``, ``KEY.json``, and the Parquet
img2dataset writes beside each tar); beyond the corpus's 8,118 pairs its images come again,
re-encoded at another JPEG quality, so every sample's bytes differ. A share ``--moved`` of the
captions is moved to other images (the truth). Then, each run a child process whose peak RSS
(VmHWM, every process it starts included) is read from ``/proc``:

1. ``--fit-sample 4000`` on the corpus and on its first half, each with a cold cache: the peak
   RSS of the two (the bar: within 10%);
2. no option at all (the cache warm from run 1): exit 0, every key once, AUROC of
   ``clean_prob`` against the moved captions;
3. the same with ``--engine ray``: the partition of every key against run 2's;
4. the same as 2 into a new folder, killed with ``kill -9`` once a third of the shards are
   written, then run again: which shards the rerun rewrote, and whether every shard's bytes
   equal run 2's.

Prints one JSON line per run and writes the table to ``--out``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import run  # noqa: E402  (peak RSS of a child process tree)

ROOT = Path(__file__).resolve().parents[1]
CLIPART = ROOT.parent / "shared" / "data" / "clipart" / "clipart.parquet"


def build(folder: Path, pairs: int, shards: int, moved: float, seed: int) -> dict[str, bool]:
    """The tars (see the module docstring); returns each key's truth (``True``: moved)."""
    from PIL import Image

    table = pq.read_table(CLIPART, columns=["image", "caption"])
    images, captions = table.column("image").to_pylist(), table.column("caption").to_pylist()
    n = len(images)
    rng = np.random.default_rng(seed)
    rows = np.arange(pairs) % n
    text = [captions[r] for r in rows]
    chosen = rng.choice(pairs, int(round(moved * pairs)), replace=False)
    donors = np.roll(chosen, 1)  # every chosen pair takes the next one's caption
    for a, b in zip(chosen, donors):
        text[a] = captions[rows[b]]
    truth = np.zeros(pairs, dtype=bool)
    truth[chosen] = [captions[rows[a]] != text[a] for a in chosen]
    folder.mkdir(parents=True)
    bounds = np.linspace(0, pairs, shards + 1).astype(int)
    keys: dict[str, bool] = {}
    for s in range(shards):
        meta = {"key": [], "status": [], "caption": []}
        with tarfile.open(folder / f"{s:05d}.tar", "w") as tar:
            for k in range(bounds[s], bounds[s + 1]):
                key = f"{s:05d}{k - bounds[s]:04d}"
                picture = Image.open(io.BytesIO(images[rows[k]])).convert("RGBA")
                flat = Image.new("RGB", picture.size, (255, 255, 255))
                flat.paste(picture, mask=picture.getchannel("A"))
                jpeg = io.BytesIO()
                flat.save(jpeg, "JPEG", quality=90 if k < n else 80)
                for name, data in ((f"{key}.jpg", jpeg.getvalue()),
                                   (f"{key}.txt", text[k].encode()),
                                   (f"{key}.json", json.dumps({"key": key, "status": "success",
                                                               "caption": text[k]}).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                meta["key"].append(key)
                meta["status"].append("success")
                meta["caption"].append(text[k])
                keys[key] = bool(truth[k])
        pq.write_table(pa.table(meta), folder / f"{s:05d}.parquet")
    return keys


def command(source: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ncclean", "score", str(source), "-o", str(out), "--json",
            *extra]


def read(out: Path) -> pa.Table:
    files = sorted(out.glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f, columns=["id", "clean_prob", "partition"])
                             for f in files])


def auroc(table: pa.Table, truth: dict[str, bool]) -> float:
    from sklearn.metrics import roc_auc_score

    keys = table.column("id").to_pylist()
    prob = np.asarray(table.column("clean_prob").to_pylist(), dtype=float)
    valid = np.isfinite(prob)
    moved = np.array([truth[k] for k in keys])
    return round(float(roc_auc_score(~moved[valid], prob[valid])), 4)


def killed_and_resumed(source: Path, out: Path, reference: Path, shards: int) -> dict:
    """Run 4: kill -9 once a third of the shards are written, rerun; what was rewritten."""
    child = subprocess.Popen(command(source, out), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=os.environ | {"OMP_NUM_THREADS": "1"})
    target = max(1, shards // 3)
    while child.poll() is None and len(list(out.glob("*.parquet"))) < target:
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    rerun = run(command(source, out))
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    kept = [name for name, stamp in before.items() if after.get(name) == stamp]
    same = all((out / name).read_bytes() == (reference / name).read_bytes()
               for name in sorted(p.name for p in reference.glob("*.parquet")))
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
    return {"complete_before_rerun": len(before), "kept_by_rerun": len(kept),
            "bytes_equal_uninterrupted": same, "leftovers": leftovers,
            "rerun_seconds": rerun["seconds"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=16_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--moved", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                        "image-shards.json")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="image-shards-"))
    whole, half = work / "wds", work / "wds-half"
    truth = build(whole, args.pairs, args.shards, args.moved, args.seed)
    build(half, args.pairs // 2, args.shards // 2, args.moved, args.seed)
    results: dict = {"pairs": args.pairs, "shards": args.shards, "moved": args.moved,
                     "seed": args.seed, "moved_pairs": int(sum(truth.values()))}
    env = dict(os.environ)
    try:
        for name, source in (("sample_4000_whole", whole), ("sample_4000_half", half)):
            os.environ["NCCLEAN_CACHE"] = str(work / f"cache-{name}")  # cold
            row = run(command(source, work / f"out-{name}", "--fit-sample", "4000"))
            results[name] = {k: row[k] for k in ("seconds", "peak_rss_gb", "driver_rss_gb")}
            print(json.dumps({name: results[name]}), flush=True)
        os.environ["NCCLEAN_CACHE"] = str(work / "cache-sample_4000_whole")  # warm
        row = run(command(whole, work / "out-default"))
        table = read(work / "out-default")
        keys = table.column("id").to_pylist()
        results["default"] = {"seconds": row["seconds"], "peak_rss_gb": row["peak_rss_gb"],
                              "rows": len(keys), "keys_once": len(set(keys)) == len(truth) ==
                              len(keys), "auroc": auroc(table, truth)}
        print(json.dumps({"default": results["default"]}), flush=True)
        row = run(command(whole, work / "out-ray", "--engine", "ray"))
        ray = read(work / "out-ray")
        results["ray"] = {"seconds": row["seconds"], "peak_rss_gb": row["peak_rss_gb"],
                          "same_partition_every_key":
                          ray.column("id").equals(table.column("id")) and
                          ray.column("partition").equals(table.column("partition"))}
        print(json.dumps({"ray": results["ray"]}), flush=True)
        results["kill_9"] = killed_and_resumed(whole, work / "out-killed", work / "out-default",
                                               args.shards)
        print(json.dumps({"kill_9": results["kill_9"]}), flush=True)
    finally:
        os.environ.clear()
        os.environ.update(env)
    whole_rss = results["sample_4000_whole"]["peak_rss_gb"]
    half_rss = results["sample_4000_half"]["peak_rss_gb"]
    results["rss_ratio_whole_to_half"] = round(whole_rss / half_rss, 3)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
