"""gmm's co-training divisions on the pairs a fit samples against the pairs it holds out.

    python benchmarks/kernels/fit_divisions.py noisy.parquet N SEED [key=value ...]

Trains ``gmm`` (parameters ``key=value``) on the N valid pairs with the smallest id hashes and
prints, at each co-training division, the AUROC of the division's posterior on those pairs and
of each network's loss on the pairs it trains on and on the rest (the held-out pairs, against a
fixed pool of their own): how far the networks fit their own noisy pairs as training goes on.

Subclasses gmm's internals (:class:`ncclean.methods.gmm.CoDivide`) to record every division, so
it may break when they change (``README.md`` in this folder).
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow.parquet as pq
from sklearn.metrics import roc_auc_score


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
    params = dict(a.split("=", 1) for a in argv[3:]) or None
    for entry in divisions(argv[0], int(argv[1]), int(argv[2]), params):
        print(entry)


if __name__ == "__main__":
    main(sys.argv[1:])
