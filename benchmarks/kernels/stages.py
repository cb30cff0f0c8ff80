"""Sweep the significance and pseudo-caption stages on a saved matcher, without retraining.

Takes a file scored with ``--significance off --no-pseudo-captions --save-matcher M`` (so its
``clean_prob`` and partitions come from the method alone) and reruns only the stages with each
requested setting, reporting how long they take, where the correct boilerplate pairs land, how
stable SDD's update ratio is across passes, and the pseudo-captions' quality.

    python benchmarks/kernels/stages.py SCORED.parquet --matcher M.safetensors \\
        --clean clipart.parquet \\
        --modes specificity update --passes 1 3 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # clipart_truth.py one folder up

from clipart_truth import is_boilerplate, top_category  # noqa: E402

from ncclean.data.cache import default_cache_dir
from ncclean.data.corpus import read_corpus
from ncclean.models.checkpoint import load_matcher
from ncclean.models.features import build_features
from ncclean.stages.pseudocaption import matcher_space, pseudo_captions
from ncclean.stages.significance import SignificanceConfig, significance
from ncclean.train.scoring import embed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scored", type=Path)
    parser.add_argument("--matcher", type=Path, required=True)
    parser.add_argument("--clean", type=Path, help="the corpus before noise (original captions)")
    parser.add_argument("--modes", nargs="+", default=["specificity", "update"])
    parser.add_argument("--passes", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--step-size", type=float, default=0.05)
    parser.add_argument("--temperature", type=float, default=SignificanceConfig.temperature)
    parser.add_argument("--share", type=float, default=SignificanceConfig.share)
    args = parser.parse_args()

    matcher = load_matcher(args.matcher)
    corpus = read_corpus(args.scored, image_size=matcher.config.image_size,
                         cache_dir=default_cache_dir())
    features = build_features(corpus, matcher.config, cache_dir=default_cache_dir())
    table = pq.read_table(args.scored, columns=["clean_prob", "partition", "noisy_gt",
                                                "category"]).to_pydict()
    rows = features.rows
    clean_prob = np.array(table["clean_prob"], dtype=float)[rows]
    parts = np.array(table["partition"], dtype=object)[rows]
    truth = np.array(table["noisy_gt"], dtype=bool)[rows]
    clean = parts == "clean_significant"
    boiler = is_boilerplate([corpus.captions[r] for r in rows]) & ~truth & clean
    began = time.perf_counter()
    embeddings = embed(matcher, features)
    print(f"embedding: {time.perf_counter() - began:.1f} s; clean pairs {clean.sum()}, correct "
          f"boilerplate among them {boiler.sum()}")

    for mode in args.modes:
        for passes in (args.passes if mode == "update" else [1]):
            config = SignificanceConfig(mode=mode, passes=passes, step_size=args.step_size,
                                        temperature=args.temperature, share=args.share)
            began = time.perf_counter()
            values, report = significance(matcher, features, clean_prob, clean, config,
                                          embeddings=embeddings)
            took = time.perf_counter() - began
            significant = values >= 1
            print(json.dumps({
                "mode": mode, "passes": passes, "seconds": round(took, 1),
                "clean_significant_share": float(significant[clean].mean()),
                "boilerplate_in_significant": float(significant[boiler].mean()),
                "other_clean_in_significant": float(significant[clean & ~boiler].mean()),
                "truly_noisy_in_significant": float(truth[clean & significant].mean()),
                "truly_noisy_in_insignificant": float(truth[clean & ~significant].mean()),
                **{k: v for k, v in report.items() if k != "mode"}}), flush=True)

    began = time.perf_counter()
    donors = np.isin(parts, ["clean_significant"])
    donor, score, report = pseudo_captions(matcher_space(embeddings, features), features,
                                           parts == "noisy", donors)
    took = time.perf_counter() - began
    category = top_category(table["category"])[rows]
    has = donor >= 0
    same = category[donor[has]] == category[has]
    values, counts = np.unique(category[donors], return_counts=True)
    share = dict(zip(values, counts / counts.sum()))
    print(json.dumps({"pseudo_captions_seconds": round(took, 1), **report,
                      "coverage": float(has.sum() / max(1, (parts == "noisy").sum())),
                      "same_category": float(same.mean()),
                      "random_same_category": float(np.mean([share.get(c, 0)
                                                             for c in category[has]]))}))


if __name__ == "__main__":
    main()
