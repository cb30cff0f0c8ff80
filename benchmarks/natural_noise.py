"""Score a scored clip-art file against the hand-labelled natural-noise sample.

``data/natural_noise_labels.csv`` holds 500 randomly drawn pairs of the clip-art corpus as it is
(no injected noise), each labelled by looking at the image and caption: ``match``, ``generic``
(true but says nothing: collection names such as "gramastar"), ``partial`` (half right) or
``mismatch`` (names something else). How they were drawn: ``label_sheets.py``.

    python benchmarks/natural_noise.py scored.parquet [more scored files ...]

prints, per file: AUROC of ``1 - clean_prob`` for mismatches against matches and for every
non-match against matches, how many real mismatches sit outside the clean partitions, and the
share of matches among the sample's ``noisy`` pairs.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from sklearn.metrics import roc_auc_score

LABELS = Path(__file__).parent / "data" / "natural_noise_labels.csv"
CLEAN = ("clean_significant", "clean_insignificant")


def labelled_sample() -> dict[str, str]:
    """Pair id -> label of the 500 labelled pairs."""
    with open(LABELS, newline="") as handle:
        return {row["id"]: row["label"] for row in csv.DictReader(handle)}


def natural_noise_metrics(scored: str | Path) -> dict:
    """The sample's metrics for one scored file (its rows matched by ``id``)."""
    labels = labelled_sample()
    table = pq.read_table(scored, columns=["id", "clean_prob", "partition"])
    ids = table.column("id").to_pylist()
    keep = [k for k, pair_id in enumerate(ids) if pair_id in labels]
    label = np.array([labels[ids[k]] for k in keep])
    prob = np.asarray(table.column("clean_prob").to_numpy(zero_copy_only=False))[keep]
    part = np.array(table.column("partition").to_pylist(), dtype=object)[keep]
    valid = np.isfinite(prob)
    label, prob, part = label[valid], prob[valid], part[valid]
    match, mismatch = label == "match", label == "mismatch"

    def auroc(positive: np.ndarray) -> float | None:
        both = positive | match
        if positive.sum() == 0 or match.sum() == 0:
            return None
        return float(roc_auc_score(positive[both], 1.0 - prob[both]))

    noisy = part == "noisy"
    return {
        "file": str(scored),
        "n_labelled": int(len(label)),
        "counts": {name: int((label == name).sum()) for name in
                   ("match", "generic", "partial", "mismatch")},
        "auroc_mismatch_vs_match": auroc(mismatch),
        "auroc_nonmatch_vs_match": auroc(~match),
        "mismatches_outside_clean": f"{int((mismatch & ~np.isin(part, CLEAN)).sum())} of "
                                    f"{int(mismatch.sum())}",
        "matches_in_noisy": f"{int((noisy & match).sum())} of {int(noisy.sum())}",
    }


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(json.dumps(natural_noise_metrics(path)))
