"""Score corpora under every variant of the default's automatic rules, for the leave-one-corpus-out
tables of ``loco_rules.py`` (``benchmarks/results/rules.md``).

The default is ``clip`` on the ImageNet EfficientNet-Lite0 + multilingual-e5 vectors, a ridge
CCA fitted on the corpus. Its rules and the variants measured here, each against injected noise
(``inject-noise --protocol per-caption``, images moved, ``noisy_gt`` the truth):

- ``rank`` (in-sample or cross-fitted) crossed with ``conventions`` (discount or trust), ridge
  100: four variants, and in-sample ``conventions=repeated`` (cross-fitted, a single caption's
  pair has nothing of its own to discount); the size rules are read from them by
  ``loco_rules.py``;
- ``align_dims`` 64 and 256 around 128, ``align_ridge`` 30 and 300 around 100, on top of the
  default (``dims=...``, ``ridge=...``: rank and conventions as the default picks them), and
  again ranked in sample with ``conventions=repeated`` (``repeated/...``) or ``trust``
  (``trust/...``, with ridge 10 or 30 and 256 or 384 directions);
- the default itself (``default``: every rule at ``auto``, as the code at hand picks it);
- the cut's recall bands and the queue sized by the estimate, which move pairs between
  partitions but not their order: read from each run's ``clean_prob`` (:data:`CUTS`).

Each corpus is the embedded file ``ncclean embed`` wrote (``image_emb``, ``text_emb``); smaller
copies of it (``--sizes``: a seeded random subset of its rows, the same for every ratio and seed)
give the size rules corpora on both sides of their thresholds. Every (corpus, size, ratio, seed,
variant) is one ``api.score`` run (significance and pseudo-captions off: they change neither
``clean_prob`` nor the partition), appended as one JSON line to ``--out``; a rerun skips the
lines already there. ``<out>.entries.json`` holds each corpus's pairs, distinct captions and
distinct images (the size rules' signals)::

    OMP_NUM_THREADS=1 python benchmarks/rule_variants.py mdi=/work/corpora/mdi/mdi-emb.parquet \\
        tabler=/work/corpora/tabler/tabler-emb.parquet --sizes 2000 4000 --ratios 0.3 0.5 \\
        --seeds 0 1 --work /work/corpora/runs --out benchmarks/results/rule-variants.jsonl
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ncclean import api
from ncclean.api import Columns, Cut, RunOptions, StageOptions

VECTORS = Columns(image_emb="image_emb", text_emb="text_emb")
#: A caption at least this many pairs carry is a convention (``ncclean/methods/cca_rules.py``'s
#: ``CONVENTION_COUNT``, the signal the rules read).
CONVENTION_COUNT = 3
VARIANTS: dict[str, dict] = {
    "default": {},
    **{f"{rank}/{conventions}": {"rank": rank, "conventions": conventions, "align_ridge": 100.0}
       for rank, conventions in (("in-sample", "discount"), ("in-sample", "trust"),
                                 ("in-sample", "repeated"), ("cross-fitted", "discount"),
                                 ("cross-fitted", "trust"))},
    "dims=64": {"align_dims": 64},
    "dims=256": {"align_dims": 256},
    "ridge=30": {"align_ridge": 30.0},
    "ridge=300": {"align_ridge": 300.0},
    **{f"repeated/{name}": {"rank": "in-sample", "conventions": "repeated"} | params
       for name, params in (("dims=64", {"align_dims": 64}), ("dims=256", {"align_dims": 256}),
                            ("ridge=30", {"align_ridge": 30.0}),
                            ("ridge=300", {"align_ridge": 300.0}))},
    "trust/ridge=30": {"rank": "in-sample", "conventions": "trust", "align_ridge": 30.0},
    "trust/dims=256": {"rank": "in-sample", "conventions": "trust", "align_dims": 256},
    **{f"trust/ridge={ridge:g}/dims={dims}": {"rank": "in-sample", "conventions": "trust",
                                               "align_ridge": ridge, "align_dims": dims}
       for ridge, dims in ((30.0, 256), (10.0, 256), (30.0, 384))},
}
#: The cut variants read from every run's scores: (noisy_recall, review_recall, queue_by_estimate);
#: the default cut is (0.5, 0.9, True).
CUTS = [(noisy, review, queue) for noisy in (None, 0.3, 0.5, 0.7)
        for review in (None, 0.8, 0.9, 0.95) for queue in (True, False)
        if noisy is None or review is None or noisy <= review]


def cut_partitions(clean_prob: np.ndarray, cut: Cut) -> np.ndarray:
    """``(n,)`` partition names (``clean_significant``, ``vague``, ``noisy``) of a threshold
    cut on ``(n,) float`` ``clean_prob``, from :class:`~ncclean.api.Cut`'s own resolution: the
    recall bands filled in unless already (:meth:`Cut.with_recall`), its thresholds in force
    compared with ``clean_prob`` at the precision the output holds it (float32), as ``score``
    cuts."""
    if cut.noise_rate is not None or cut.rare_clean_above is not None:
        raise ValueError("only threshold cuts: no noise rate, no rare_clean_above")
    if cut.recall_clean_above is None and cut.recall_noisy_below is None:
        cut = cut.with_recall(clean_prob)
    above, below = cut.thresholds()
    written = np.asarray(clean_prob).astype(np.float32)
    return np.where(written < below, "noisy",
                    np.where(written < above, "vague", "clean_significant")).astype(object)


def cut_metrics(clean_prob: np.ndarray, truth: np.ndarray,
                interval: tuple[float, float] | None) -> dict[str, dict]:
    """For every cut in :data:`CUTS`: the share of truly clean pairs kept clean, the share of
    the noise queued (``vague`` or ``noisy``), ``noisy``'s precision, and the queue over the
    true noise, from ``(n,)`` ``clean_prob`` and ``truth`` of the valid pairs."""
    out = {}
    for noisy_recall, review_recall, queue in CUTS:
        cut = Cut(clean_above=0.8, noisy_below=0.5, noisy_recall=noisy_recall,
                  review_recall=review_recall, queue_by_estimate=queue)
        cut = cut.with_recall(clean_prob).with_queue(clean_prob, interval)
        parts = cut_partitions(clean_prob, cut)
        clean = np.char.startswith(parts.astype(str), "clean")
        noisy = parts == "noisy"
        out[f"{noisy_recall}/{review_recall}/{queue}"] = {
            "clean_kept": float((clean & ~truth).sum() / max((~truth).sum(), 1)),
            "noise_queued": float((~clean & truth).sum() / max(truth.sum(), 1)),
            "noisy_precision": float(truth[noisy].mean()) if noisy.any() else None,
            "queue_over_noise": float((~clean).sum() / max(truth.sum(), 1))}
    return out


def done_runs(out: Path) -> set[tuple]:
    """The (corpus, size, ratio, seed, variant) of each run already in the JSON lines ``out``."""
    if not out.exists():
        return set()
    return {(row["corpus"], row["size"], row["ratio"], row["seed"], row["variant"])
            for row in map(json.loads, out.read_text().splitlines())}


def checkout_commit() -> str:
    """The short commit of this checkout, which every run's row names."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=Path(__file__).parent).stdout.strip()


def subset(corpus: Path, size: int, work: Path, name: str) -> Path:
    """A seeded random ``size`` rows of ``corpus`` (all of it when ``size`` is 0)."""
    if size == 0:
        return corpus
    path = work / f"{name}-{size}.parquet"
    if not path.exists():
        table = pq.read_table(corpus)
        rows = np.sort(np.random.default_rng(size).choice(table.num_rows, size, replace=False))
        pq.write_table(table.take(rows), path)
    return path


def entries(path: Path) -> dict:
    """The pairs with a caption, the distinct captions and image vectors among them (the entries
    a CCA is fitted on) and the share of pairs whose caption at least ``CONVENTION_COUNT`` pairs
    carry; noise moves images, so the noisy copies have the same."""
    table = pq.read_table(path, columns=["caption", "image_emb"]).to_pydict()
    kept = [k for k, caption in enumerate(table["caption"]) if caption and caption.strip()]
    images = {np.asarray(table["image_emb"][k], np.float32).tobytes() for k in kept}
    _, inverse, counts = np.unique([table["caption"][k] for k in kept], return_inverse=True,
                                   return_counts=True)
    return {"pairs": len(kept), "captions": len(counts), "images": len(images),
            "convention_share": float((counts[inverse] >= CONVENTION_COUNT).mean())}


def noisy(clean: Path, ratio: float, seed: int, work: Path) -> Path:
    """``clean`` with ``ratio`` of its captions' images moved (seed ``seed``), the vectors
    moving with the images."""
    path = work / f"{clean.stem}-{ratio}-s{seed}.parquet"
    if not path.exists():
        subprocess.run(["ncclean", "inject-noise", str(clean), "-o", str(path), "--ratio",
                        str(ratio), "--seed", str(seed), "--image-emb-col", "image_emb",
                        "--text-emb-col", "text_emb", "--overwrite"], check=True,
                       capture_output=True)
    return path


def measure(path: Path, seed: int, params: dict, work: Path) -> dict:
    """One default-command score of ``path`` with the ``clip`` parameters ``params``."""
    out = work / f"scored-{path.stem}.parquet"
    summary = api.score(path, out, method="clip", params=params, columns=VECTORS,
                        run=RunOptions(seed=seed),
                        stages=StageOptions(significance="off", pseudo_captions=False))
    record = json.loads(Path(f"{out}.json").read_text())
    table = pq.read_table(out, columns=["clean_prob", "partition", "noisy_gt"]).to_pydict()
    valid = np.array(table["partition"], dtype=object) != "invalid"
    clean_prob = np.array(table["clean_prob"], dtype=np.float64)[valid]
    truth = np.array(table["noisy_gt"], dtype=bool)[valid]
    interval = record.get("estimated_noise_ci95")
    method = record.get("report") or {}
    return {"pairs": int(valid.sum()), "true_noise": float(truth.mean()),
            "auroc": summary.detection["auroc"], "ap": summary.detection["ap"],
            "estimate": record["estimated_noise_rate"], "ci95": interval,
            "rank": method.get("rank", "in-sample"),
            "cuts": cut_metrics(clean_prob, truth,
                                None if interval is None else tuple(interval))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="+", help="NAME=embedded.parquet")
    parser.add_argument("--sizes", type=int, nargs="*", default=[],
                        help="also score seeded subsets of this many pairs")
    parser.add_argument("--subsets-only", action="store_true",
                        help="score only the --sizes subsets, not the whole corpora")
    parser.add_argument("--entries-only", action="store_true",
                        help="only (re)write <out>.entries.json, scoring nothing")
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.3, 0.5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--work", type=Path, required=True, help="scratch folder")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    done = done_runs(args.out)
    described = args.out.with_suffix(".entries.json")
    counts = json.loads(described.read_text()) if described.exists() else {}
    commit = checkout_commit()
    for spec in args.corpora:
        name, corpus = spec.split("=", 1)
        rows = pq.ParquetFile(corpus).metadata.num_rows
        sizes = [*([] if args.subsets_only else [0]), *(size for size in args.sizes
                                                        if size < rows)]
        for size in sizes:
            clean = subset(Path(corpus), size, args.work, name)
            if f"{name}/{size}" not in counts or args.entries_only:
                counts[f"{name}/{size}"] = entries(clean)
                described.write_text(json.dumps(counts, indent=1))
            if args.entries_only:
                continue
            for ratio in args.ratios:
                for seed in args.seeds:
                    path = noisy(clean, ratio, seed, args.work)
                    for variant in args.variants:
                        key = (name, size, ratio, seed, variant)
                        if key in done:
                            continue
                        row = {"corpus": name, "size": size, "ratio": ratio, "seed": seed,
                               "variant": variant, "params": VARIANTS[variant],
                               "commit": commit} | measure(path, seed, VARIANTS[variant],
                                                           args.work)
                        with open(args.out, "a") as handle:
                            handle.write(json.dumps(row) + "\n")
                        print(name, size or "all", ratio, seed, variant,
                              f"{row['auroc']:.4f}", row["rank"], flush=True)


if __name__ == "__main__":
    main()
