"""AUROC of a fit on the pairs it was fitted on against the pairs it was applied to.

    ncclean score noisy.parquet -o OUT_DIR --method M --image-emb-col image_emb \\
        --text-emb-col text_emb --fit-sample N --save-fit FIT --seed 0
    python benchmarks/fit_halves.py OUT_DIR FIT

prints each half's size (and both halves' together) and AUROC against ``noisy_gt`` of
``clean_prob`` and of the method's per-pair columns (``<method>_loss``: lower is cleaner;
``<method>_sim``: higher is cleaner; on the fitted half they are the one pass's, on the applied
half the fit's final matcher's). The fit's sample is chosen by a hash of the pair id; with N
half the pairs, the other half is applied.

    python benchmarks/fit_halves.py divisions noisy.parquet N SEED [key=value ...]

trains ``gmm`` (parameters ``key=value``) on the N valid pairs with the smallest id hashes and
prints, at each co-training division, the AUROC of the division's posterior on those pairs and
of each network's loss on the pairs it trains on and on the rest (the held-out pairs, against a
fixed pool of their own): how far the networks fit their own noisy pairs as training goes on.
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


def divisions(source: str, n: int, seed: int, params: dict | None = None,
              image_col: str = "image_emb", text_col: str = "text_emb") -> list[dict]:
    """Train ``gmm`` on the ``n`` valid pairs of ``source`` with the smallest id hashes; one
    entry per division: ``posterior`` (AUROC of its mean clean posterior on those pairs),
    ``trained`` and ``held_out`` (each network's loss, AUROC on its own pairs and on the rest)."""
    from ncclean.data.corpus import read_corpus
    from ncclean.data.schema import Columns
    from ncclean.methods.base import Context, make_method
    from ncclean.methods.gmm import GMM, CoDivide
    from ncclean.models.features import build_features, complete_config
    from ncclean.models.resolve import matcher_config
    from ncclean.options import MatcherOptions
    from ncclean.train.scoring import embed, pair_losses

    columns = Columns(image_emb=image_col, text_emb=text_col)
    options = MatcherOptions()
    config, _ = matcher_config(columns, options.image_encoder, options.text_encoder,
                               options.embed_dim, options.image_size, None, "cpu", options.clip())
    corpus = read_corpus(source, columns, strict=False, image_size=None, cache_dir=None)
    complete_config(config, corpus)
    features = build_features(corpus, config, cache_dir=None, device="cpu")
    ids = corpus.ids.to_pylist()
    from ncclean.data.shards import pair_keys

    order = np.argsort(pair_keys([ids[r] for r in features.rows]), kind="stable")
    inside, rest = order[:n], np.sort(order[n:])  # the sample in hash order, as a fit reads it
    truth = np.asarray(pq.read_table(source, columns=["noisy_gt"]).column(0).to_pylist(),
                       dtype=bool)[features.rows]
    held_out = features.subset(rest)
    rows: list[dict] = []

    def auroc(rows_truth: np.ndarray, clean: np.ndarray) -> float:
        return round(float(roc_auc_score(rows_truth, -clean)), 4)

    class Recorded(CoDivide):
        def divide(self, model) -> None:
            super().divide(model)
            entry = {"division": len(rows),
                     "posterior": auroc(truth[inside], self.posterior.mean(axis=0)),
                     "trained": [], "held_out": []}
            for k, member in enumerate(model.members):
                losses = pair_losses(embed(member, held_out), held_out, margin=self.method.margin,
                                     pool_size=self.method.pool_size, seed=self.seed)
                entry["trained"].append(auroc(truth[inside], -self.losses[k]))
                entry["held_out"].append(auroc(truth[rest], -losses))
            rows.append(entry)

    class Traced(GMM):
        def _objective(self, features, warmup, epochs, context):
            return Recorded(features, self, warmup, epochs, context.device, context.seed)

    chosen = make_method("gmm", params)
    traced = Traced(**chosen.params())
    traced.fit(features.subset(inside), Context(seed=seed, matcher_config=config))
    return rows


def main(argv: list[str]) -> None:
    if argv[0] == "divisions":
        params = dict(a.split("=", 1) for a in argv[4:]) or None
        for entry in divisions(argv[1], int(argv[2]), int(argv[3]), params):
            print(entry)
        return
    for name, row in halves(argv[0], argv[1]).items():
        print(name, " ".join(f"{k} {v}" for k, v in row.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
