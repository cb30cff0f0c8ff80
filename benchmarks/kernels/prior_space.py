"""Build the prior space ncclean ships, and measure it leave-one-corpus-out.

The prior (:mod:`ncclean.methods.prior`) is a ridge CCA of the default towers' vectors fitted on
the pairs of corpora whose licences allow it: Material Design Icons (Apache-2.0) and Tabler
Icons (MIT), as ``ncclean embed`` wrote them (``corpus_icons.py``). ``build`` fits it from
``FAMILY=EMBEDDED.parquet`` specs and writes it with its sources in the file's metadata:

    python benchmarks/kernels/prior_space.py build mdi=/work/corpora/mdi/mdi-emb.parquet \\
        tabler=/work/corpora/tabler/tabler-emb.parquet -o ncclean/methods/priors/icons.safetensors

``run`` scores noisy embedded files (``FAMILY=PATH``; the injected noise's sidecar beside each)
with the default twice, ``-p prior=off`` and with the prior, where a corpus whose family is in
the shipped prior is read in a prior refitted without that family (MDI in Tabler's alone, and
so on), so that no corpus is scored by a prior fitted on its own pairs:

    python benchmarks/kernels/prior_space.py run --fit mdi=... tabler=... --work /tmp/prior \\
        --out prior.jsonl mdi=/work/corpora/loco/work/mdi-300-0.3-s0.parquet ...
    python benchmarks/kernels/prior_space.py table prior.jsonl

``flips`` runs ``benchmarks/rule_flips.py`` the same way (each corpus of the prior's families
read in a prior refitted without its family), for the rules' tables at the current code.
``run --rotate`` first turns each side's vectors by a fixed random rotation: towers of the
default's widths that are not the default's, which the prior cannot read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # rule_variants.py one folder up

from rule_variants import VECTORS, checkout_commit  # noqa: E402

from ncclean import api  # noqa: E402
from ncclean.api import RunOptions  # noqa: E402
from ncclean.methods import prior as prior_space  # noqa: E402
from ncclean.methods.align import fit_alignment  # noqa: E402
from ncclean.methods.unit import unit_rows  # noqa: E402


def pairs(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The unit image and caption vectors of ``path``'s pairs that have both."""
    table = pq.read_table(path, columns=["image_emb", "text_emb"]).to_pydict()
    kept = [k for k, (i, t) in enumerate(zip(table["image_emb"], table["text_emb"]))
            if i is not None and t is not None]
    images = np.asarray([table["image_emb"][k] for k in kept], np.float32)
    texts = np.asarray([table["text_emb"][k] for k in kept], np.float32)
    return unit_rows(images), unit_rows(texts)


def fit(specs: dict[str, Path], leave_out: str | None = None):
    """The prior fitted on every family of ``specs`` but ``leave_out``."""
    images, texts = zip(*(pairs(path) for family, path in specs.items()
                          if family != leave_out))
    images, texts = np.vstack(images), np.vstack(texts)
    rows = np.arange(len(images))
    return fit_alignment(images, texts, rows, rows, dims=prior_space.DIMS,
                         ridge=prior_space.RIDGE)


def build(args: argparse.Namespace) -> None:
    specs = dict(spec.split("=", 1) for spec in args.corpora)
    prior = fit({family: Path(path) for family, path in specs.items()})
    meta = {"fitted_on": json.dumps({family: Path(path).name for family, path in specs.items()}),
            "dims": str(prior.dims), "ridge": str(prior.ridge), "commit": checkout_commit(),
            "built_by": "benchmarks/kernels/prior_space.py",
            "licences": "the sources': Material Design Icons Apache-2.0, Tabler Icons MIT"}
    prior_space.save_prior(prior, args.output, meta)
    print(f"{args.output}: {prior.dims} directions, {args.output.stat().st_size:,} bytes")


def prior_for(family: str, fitted: dict[str, Path], work: Path) -> Path:
    """The prior a corpus of ``family`` is read in: the shipped one, or for a family it was
    fitted on one refitted without that family (written once into ``work``), so that no corpus
    is read in a prior fitted on its own pairs."""
    if family not in fitted:
        return prior_space.BUNDLED
    path = work / f"prior-without-{family}.safetensors"
    if not path.exists():
        prior_space.save_prior(fit(fitted, leave_out=family), path, {})
    return path


@contextlib.contextmanager
def reading(prior_file: Path):
    """``clip`` reads ``prior_file`` as its shipped prior within the block."""
    shipped, prior_space.BUNDLED = prior_space.BUNDLED, prior_file
    try:
        yield
    finally:
        prior_space.BUNDLED = shipped


def run(args: argparse.Namespace) -> None:
    args.work.mkdir(parents=True, exist_ok=True)
    fitted = {family: Path(path) for family, path in (s.split("=", 1) for s in args.fit)}
    commit = checkout_commit()
    for spec in args.corpora:
        family, path = spec.split("=", 1)
        prior_file = prior_for(family, fitted, args.work)
        # the noise's seed where the file is named for it (``-s1.parquet``), as the scoring seed
        named = re.search(r"-s(\d+)\.parquet$", path)
        seed = int(named.group(1)) if named else args.seed
        row = {"family": family, "corpus": Path(path).name, "prior_file": prior_file.name,
               "seed": seed, "commit": commit}
        if args.rotate:
            path, row["rotated"] = rotated(Path(path), args.work), True
        for arm, params in (("off", {"prior": "off"}), ("on", {})):
            out = args.work / "scored.parquet"
            with reading(prior_file):
                summary = api.score(path, out, method="clip", params=params, columns=VECTORS,
                                    run=RunOptions(seed=seed, overwrite=True))
            row[arm] = round(summary.detection["auroc"], 4)
            record = json.loads(Path(f"{out}.json").read_text())
            if arm == "on":
                row["weights"] = prior_weights(record)
        with open(args.out, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def flips(args: argparse.Namespace) -> None:
    """``rule_flips.py run`` on each ``NAME=NOISY.parquet[@SEED]``, where a corpus whose family
    (``NAME`` up to its first ``-``) is in the shipped prior is read in one refitted without it."""
    import rule_flips

    args.work.mkdir(parents=True, exist_ok=True)
    fitted = {family: Path(path) for family, path in (s.split("=", 1) for s in args.fit)}
    for spec in args.corpora:
        family = spec.split("=", 1)[0].split("-", 1)[0]
        with reading(prior_for(family, fitted, args.work)):
            rule_flips.run(argparse.Namespace(corpora=[spec], work=args.work, out=args.out,
                                              flips=args.flips))


def rotated(path: Path, work: Path) -> Path:
    """``path`` with each side's vectors turned by a fixed random rotation: towers of the
    default's widths that are not the default's. The corpus's own CCA, cosines and neighbours
    read them exactly as before; only the prior sees other towers."""
    table = pq.read_table(path)
    out = work / f"rotated-{path.name}"
    for k, column in enumerate(("image_emb", "text_emb")):
        values = table.column(column).to_pylist()
        width = len(next(v for v in values if v is not None))
        turn, _ = np.linalg.qr(np.random.default_rng(1000 + k).standard_normal((width, width)))
        values = [None if v is None else (np.asarray(v, np.float64) @ turn).astype(np.float32)
                  for v in values]
        array = pa.array([None if v is None else v.tolist() for v in values],
                         type=pa.list_(pa.float32())).cast(table.schema.field(column).type)
        table = table.set_column(table.schema.get_field_index(column), column, array)
    pq.write_table(table, out)
    for sidecar in (".noise.npz", ".json"):  # the injected noise's index and record
        if Path(f"{path}{sidecar}").exists():
            shutil.copyfile(f"{path}{sidecar}", f"{out}{sidecar}")
    return out


def prior_weights(record) -> list[float]:
    """The prior's weight in each averaged width of a run record, or in its one fit."""
    report = record.get("report", {})
    if widths := report.get("widths", {}).get("prior_weights"):
        return widths
    prior = report.get("neighbours", {}).get("prior")
    return [] if prior is None else [prior]


def table(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for line in args.runs.read_text().splitlines()]
    by_family = defaultdict(list)
    print("| corpus | prior fitted on | off | with the prior (weights) | change |")
    print("|---|---|---|---|---|")
    for row in rows:
        weights = ", ".join(f"{w:.2f}" for w in row["weights"]) or "none"
        print(f"| {row['corpus']} | {row['prior_file']} | {row['off']:.4f} | {row['on']:.4f} "
              f"({weights}) | {row['on'] - row['off']:+.4f} |")
        by_family[row["family"]].append(row["on"] - row["off"])
    print()
    for family, changes in by_family.items():
        print(f"{family}: {len(changes)} runs, mean change {np.mean(changes):+.4f}, "
              f"worst {min(changes):+.4f}, best {max(changes):+.4f}")


def _scoring(command: argparse.ArgumentParser, corpora: str, func) -> argparse.ArgumentParser:
    """The arguments ``run`` and ``flips`` share: the noisy files, the prior's sources, where
    the runs go."""
    command.add_argument("corpora", nargs="+", help=corpora)
    command.add_argument("--fit", nargs="+", required=True,
                         help="FAMILY=EMBEDDED.parquet: the shipped prior's sources")
    command.add_argument("--work", type=Path, required=True)
    command.add_argument("--out", type=Path, required=True)
    command.set_defaults(func=func)
    return command


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("build")
    one.add_argument("corpora", nargs="+", help="FAMILY=EMBEDDED.parquet")
    one.add_argument("-o", "--output", type=Path, default=prior_space.BUNDLED)
    one.set_defaults(func=build)
    two = _scoring(sub.add_parser("run"), "FAMILY=NOISY.parquet", run)
    two.add_argument("--rotate", action="store_true",
                     help="turn each side's vectors by a fixed random rotation first (towers "
                          "of the default's widths that are not the default's)")
    two.add_argument("--seed", type=int, default=0,
                     help="the scoring seed of a file not named for its noise's (-sN.parquet)")
    four = _scoring(sub.add_parser("flips"), "NAME=NOISY.parquet[@SEED] (rule_flips.py's)",
                    flips)
    four.add_argument("--flips", nargs="+", help="only these flips (rule_flips.py's --flips)")
    three = sub.add_parser("table")
    three.add_argument("runs", type=Path)
    three.set_defaults(func=table)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
