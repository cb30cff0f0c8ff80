"""Rewrite a scored file's clean set by a rule that knows the injected noise, to ask a retrain
what a selection lost: its noise, or the clean pairs it dropped, and which of them.

Every rule starts from the scored file's clean partitions (``clean_significant`` and
``clean_insignificant``) and writes a copy whose clean set (all ``clean_significant``) is the
rule's, everything else valid ``vague``; the sidecar is copied, so ``ncclean retrain`` trains the
scoring run's towers on it::

    python benchmarks/selections.py gmm-0.5.parquet A.parquet minus-noise
    ncclean retrain A.parquet --test test.parquet --steps 3200 --eval-every 100 --json

Rules (``rare``: the caption occurs at most twice among the valid pairs, case and spacing
ignored, as ``score --rare-clean-above`` counts):

- ``minus-noise``: the clean set without its truly noisy pairs (a perfect filter on it);
- ``minus-noise-rare`` / ``minus-noise-repeated``: without its noisy pairs of that kind only;
- ``plus-dropped``: with every truly clean pair the cut dropped (noise kept);
- ``minus-noise-plus-rare`` / ``minus-noise-plus-repeated``: ``minus-noise`` plus the dropped
  clean pairs of that kind only.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ncclean import api

CLEAN = ("clean_significant", "clean_insignificant")

RULES = ("minus-noise", "minus-noise-rare", "minus-noise-repeated", "plus-dropped",
         "minus-noise-plus-rare", "minus-noise-plus-repeated")


def select(partition: np.ndarray, noisy: np.ndarray, rare: np.ndarray, rule: str) -> np.ndarray:
    """The rule's clean set, a boolean mask over the rows (invalid rows never in it)."""
    valid = partition != "invalid"
    clean = np.isin(partition, CLEAN)
    dropped = valid & ~clean & ~noisy
    kinds = {"rare": rare, "repeated": ~rare}
    if rule == "minus-noise":
        return clean & ~noisy
    if rule.startswith("minus-noise-plus-"):
        return (clean & ~noisy) | (dropped & kinds[rule.rsplit("-", 1)[1]])
    if rule.startswith("minus-noise-"):
        return clean & ~(noisy & kinds[rule.rsplit("-", 1)[1]])
    if rule == "plus-dropped":
        return clean | dropped
    raise ValueError(f"unknown rule {rule!r}; rules: {', '.join(RULES)}")


def caption_counts(captions: list[str]) -> np.ndarray:
    """``(n,) int64``: how many of ``captions`` equal each one, case and spacing ignored (lower
    case, whitespace collapsed and trimmed), as ``score --rare-clean-above`` counts."""
    normalised = pc.utf8_trim_whitespace(
        pc.replace_substring_regex(pc.utf8_lower(pa.array(captions, pa.string())), r"\s+", " "))
    _, inverse, counts = np.unique(np.asarray(normalised.to_pylist(), dtype=object),
                                   return_inverse=True, return_counts=True)
    return counts[inverse].astype(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scored", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("rule", choices=RULES)
    args = parser.parse_args()
    table = pq.read_table(args.scored)
    partition = np.array(table.column("partition").to_pylist(), dtype=object)
    if "noisy_gt" not in table.column_names:
        raise SystemExit(f"{args.scored}: no noisy_gt column; these rules need injected noise")
    noisy = np.array([bool(v) for v in table.column("noisy_gt").to_pylist()])
    valid = partition != "invalid"
    captions = table.column("caption").to_pylist()
    counts = np.zeros(len(partition), dtype=np.int64)
    counts[valid] = caption_counts([c for c, ok in zip(captions, valid) if ok])
    keep = select(partition, noisy, valid & (counts <= api.Cut().rare_count), args.rule)
    new = np.where(~valid, "invalid", np.where(keep, "clean_significant", "vague"))
    table = table.set_column(table.schema.get_field_index("partition"), "partition",
                             pa.array(new.tolist(), pa.string()))
    pq.write_table(table, args.output)
    shutil.copy(f"{args.scored}.json", f"{args.output}.json")
    print(f"{args.output}: {int(keep.sum()):,} clean pairs, {int((keep & noisy).sum()):,} of "
          "them noisy")


if __name__ == "__main__":
    main()
