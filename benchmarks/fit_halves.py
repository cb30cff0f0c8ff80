"""AUROC of a fit on the pairs it was fitted on against the pairs it was applied to.

    ncclean score noisy.parquet -o OUT_DIR --method M --image-emb-col image_emb \\
        --text-emb-col text_emb --fit-sample N --save-fit FIT --seed 0
    python benchmarks/fit_halves.py OUT_DIR FIT

prints each half's size and AUROC of ``clean_prob`` against ``noisy_gt`` (the fit's sample is
chosen by a hash of the pair id; with N half the pairs, the other half is applied).
"""

from __future__ import annotations

import glob
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.metrics import roc_auc_score

from ncclean.data.shards import pair_keys
from ncclean.pipeline.fit import load_fit


def main(out: str, fit: str) -> None:
    table = pa.concat_tables([pq.read_table(f) for f in sorted(glob.glob(out + "/*.parquet"))])
    fitted = np.isin(pair_keys(table.column("id")), load_fit(fit).arrays["sample.key"])
    valid = np.array(table.column("partition").to_pylist()) != "invalid"
    truth = np.array(table.column("noisy_gt").to_pylist(), dtype=bool)
    prob = np.array(table.column("clean_prob").to_pylist(), dtype=float)
    for name, rows in (("fitted", fitted & valid), ("applied", ~fitted & valid)):
        print(name, int(rows.sum()), round(roc_auc_score(truth[rows], -prob[rows]), 4))


if __name__ == "__main__":
    main(*sys.argv[1:3])
