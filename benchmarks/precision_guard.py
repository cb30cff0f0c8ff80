"""Issue 64's accuracy guard for the image tower's arithmetic: detection AUROC of each scored
file against ``noisy_gt`` and the share of pairs whose partition equals the first file's (the
fp32 run), over the pairs valid in both::

    ncclean inject-noise clipart.parquet -o noisy.parquet --ratio 0.5 --seed 0
    NCCLEAN_CACHE=E1 NCCLEAN_IMAGE_PRECISION=fp32 ncclean score noisy.parquet -o a.parquet --seed 0
    NCCLEAN_CACHE=E2 ncclean score noisy.parquet -o b.parquet --seed 0
    python benchmarks/precision_guard.py a.parquet b.parquet

Bar: AUROC within 0.003 of fp32's and the same partition on at least 99% of pairs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ncclean.api import detection_metrics


def read(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    table = pq.read_table(path, columns=["noisy_gt", "clean_prob", "partition"])
    return (np.asarray(table.column("noisy_gt").to_pylist(), dtype=bool),
            table.column("clean_prob").to_numpy(zero_copy_only=False),
            np.asarray(table.column("partition").to_pylist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path, help="the fp32 run's scored file")
    parser.add_argument("others", type=Path, nargs="+")
    args = parser.parse_args()
    _, _, reference = read(args.reference)
    print("| file | valid pairs | AUROC | same partition as the first |")
    print("|---|---|---|---|")
    for path in [args.reference, *args.others]:
        truth, clean_prob, partition = read(path)
        valid = (partition != "invalid") & (reference != "invalid")
        auroc = detection_metrics(truth[valid], clean_prob[valid]).auroc
        same = float(np.mean(partition[valid] == reference[valid]))
        print(f"| {path.name} | {valid.sum():,} | {auroc:.4f} | {same:.2%} |")


if __name__ == "__main__":
    main()
