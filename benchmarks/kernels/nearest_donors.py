"""Donor rows of the plain nearest-caption search (the matcher's joint space) on the partitions
of a scored file: the baseline a method's own donor space must match.

    python benchmarks/kernels/nearest_donors.py SCORED.parquet MATCHER.safetensors DONORS.npy

writes ``(n,) int64``, each row's donor row (-1: none); ``benchmarks/quality.py`` runs it for
methods that search donors in a space of their own. Calls the pseudo-caption stage's internals
(:mod:`ncclean.stages.pseudocaption`), so it may break when they change (``README.md`` in this
folder).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def nearest_caption_donors(scored: Path, matcher_path: Path) -> np.ndarray:
    """Donor rows of the plain nearest-caption search (the matcher's joint space) on the
    partitions of ``scored``: the baseline a method's own donor space must match."""
    from ncclean.data.cache import default_cache_dir
    from ncclean.data.corpus import read_corpus
    from ncclean.models.checkpoint import load_matcher
    from ncclean.models.features import build_features
    from ncclean.stages.pseudocaption import matcher_space, pseudo_captions
    from ncclean.train.scoring import embed

    matcher = load_matcher(matcher_path)
    corpus = read_corpus(scored, image_size=matcher.config.image_size,
                         cache_dir=default_cache_dir())
    features = build_features(corpus, matcher.config, cache_dir=default_cache_dir())
    partition = np.array(pq.read_table(scored, columns=["partition"]).column(0).to_pylist(),
                         dtype=object)[features.rows]
    donor, _, _ = pseudo_captions(matcher_space(embed(matcher, features), features), features,
                                  partition == "noisy",
                                  np.isin(partition, ["clean_significant", "clean_insignificant"]))
    out = np.full(corpus.n_pairs, -1, dtype=np.int64)
    has = donor >= 0
    out[features.rows[has]] = features.rows[donor[has]]
    return out


def main(argv: list[str]) -> None:
    scored, matcher, out = (Path(a) for a in argv)
    np.save(out, nearest_caption_donors(scored, matcher))


if __name__ == "__main__":
    main(sys.argv[1:])
