"""AUROC of a fit on the pairs it was fitted on against the pairs it was applied to.

    ncclean score noisy.parquet -o OUT_DIR --method M --image-emb-col image_emb \\
        --text-emb-col text_emb --fit-sample N --save-fit FIT --seed 0
    python benchmarks/fit_halves.py OUT_DIR FIT

prints each half's size (and both halves' together) and AUROC against ``noisy_gt`` of
``clean_prob`` and of the method's per-pair columns (``<method>_loss``: lower is cleaner;
``<method>_sim``: higher is cleaner; on the fitted half they are the one pass's, on the applied
half the fit's final matcher's). The fit's sample is chosen by a hash of the pair id; with N
half the pairs, the other half is applied.

gmm's divisions on the sampled pairs against the held-out ones:
``benchmarks/kernels/fit_divisions.py``.
"""

from __future__ import annotations

import glob
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.metrics import roc_auc_score

from ncclean.api import fit_positions

SIGNS = {"clean_prob": 1.0, "loss": -1.0, "sim": 1.0}  # column kind -> sign making clean high


def halves(out: str, fit: str) -> dict[str, dict[str, float]]:
    """``{"fitted": {...}, "applied": {...}, "all": {...}}``: each half's (and both halves
    together) ``n`` and AUROC of every scored column (``clean_prob``, ``<method>_loss``,
    ``<method>_sim``) against ``noisy_gt``."""
    table = pa.concat_tables([pq.read_table(f) for f in sorted(glob.glob(out + "/*.parquet"))])
    positions, meta = fit_positions(fit, out)
    method = meta["method"]
    fitted = positions >= 0  # the fit's own pairs (by id and content)
    valid = np.array(table.column("partition").to_pylist()) != "invalid"
    truth = np.array(table.column("noisy_gt").to_pylist(), dtype=bool)
    columns = {"clean_prob": SIGNS["clean_prob"]} | {
        f"{method}_{kind}": SIGNS[kind] for kind in ("loss", "sim")
        if f"{method}_{kind}" in table.column_names}
    out_halves: dict[str, dict[str, float]] = {}
    for name, rows in (("fitted", fitted & valid), ("applied", ~fitted & valid), ("all", valid)):
        row: dict[str, float] = {"n": int(rows.sum())}
        for column, sign in columns.items():
            values = np.array(table.column(column).to_pylist(), dtype=float)[rows]
            if len(values) and np.isfinite(values).all():
                row[column] = round(float(roc_auc_score(truth[rows], -sign * values)), 4)
        out_halves[name] = row
    return out_halves


def main(argv: list[str]) -> None:
    for name, row in halves(argv[0], argv[1]).items():
        print(name, " ".join(f"{k} {v}" for k, v in row.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
