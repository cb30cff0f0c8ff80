"""Build the retrain split the headline numbers use, in one command.

The journal's later sections score and retrain on a *retrain split* of the clip-art corpus: 1,000
pairs whose captions are unique in the corpus are held out as a test set before any noise
(``hold_out`` of ``benchmarks/quality.py``, seed 0), and per-caption noise is injected into the
rest at each level. With ``--towers pretrained`` both towers' vectors are added first, as the
journal's "Training on `clean_significant`" section rebuilt them: ImageNet EfficientNet-Lite0
image vectors (``benchmarks/pretrained_images.py``: ``ncclean embed --encoder imagenet`` in
fp32, needs the ``imagenet`` extra) and multilingual-e5-small caption vectors
(``ncclean embed --encoder e5``, needs the ``e5`` extra); the image vectors move with their
images when the noise is injected. This script only chains those steps (it was written after
the numbers were recorded, from the journal's description of them)::

    python benchmarks/retrain_corpus.py work/ --towers pretrained --noise 0.2 0.5 0.8

writes ``work/test.parquet`` and ``work/noisy-0.5.parquet`` (and the other levels); then::

    ncclean score work/noisy-0.5.parquet -o work/clip-0.5.parquet --method clip \\
        --image-emb-col image_emb --text-emb-col text_emb --rare-clean-above 0.3 --seed 0 --json
    ncclean retrain work/clip-0.5.parquet --test work/test.parquet --keep significant \\
        --seed 0 --steps 3200 --eval-every 100 --baseline --json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from quality import DEFAULT_CLIPART, hold_out  # noqa: E402


def _run(command: list[str]) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write into")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CLIPART)
    parser.add_argument("--towers", choices=("default", "pretrained"), default="default")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-size", type=int, default=1000)
    args = parser.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    python = [sys.executable]
    corpus, move = args.corpus, "category"
    if args.towers == "pretrained":
        images = args.out / "corpus-image-emb.parquet"
        _run(python + [str(HERE / "pretrained_images.py"), str(corpus), str(images)])
        both = args.out / "corpus-emb.parquet"
        _run(python + ["-m", "ncclean", "embed", str(images), "-o", str(both),
                       "--encoder", "e5"])
        corpus, move = both, "category,image_emb"
    train, test = hold_out(corpus, args.out, args.test_size, args.seed)
    print(f"held out {test} (captions unique in the corpus); training pairs in {train}")
    for ratio in args.noise:
        _run(python + ["-m", "ncclean", "inject-noise", str(train), "-o",
                       str(args.out / f"noisy-{ratio}.parquet"), "--ratio", str(ratio),
                       "--seed", str(args.seed), "--move-with-image", move])


if __name__ == "__main__":
    main()
