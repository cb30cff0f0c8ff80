"""How a co-divided method's division finds noise, division by division (``gmm``, ``pc2``).

Runs ``ncclean score`` in this process with a recorder on NCR's division
(:meth:`ncclean.methods.gmm.CoDivide.divide`), then prints, for every division (the one before
each co-training epoch, and the final one), the detection AUROC of the two networks' mean
per-pair loss and of their mean clean posterior, and what the common ways of turning the
divisions into one score would give: the posterior averaged over the divisions (``final=mean``,
the default), the last division's (``final=last``, the papers'), and the loss averaged over the
divisions. pc2 also gets the AUROC of its class-agreement signal, the cross-entropy of the
image's class prediction against the caption's (not used by the method).

    python benchmarks/kernels/division_curve.py NOISY.parquet --method gmm --seed 1 \\
        [-p noisy_from=1.0]
    python benchmarks/kernels/division_curve.py NOISY.parquet --method pc2 --seed 1 --save curve.npz
    python benchmarks/kernels/division_curve.py NOISY.parquet --method gmm --scratch  # CNN + GRU

NOISY.parquet needs a ``noisy_gt`` column (``ncclean inject-noise``, or the ``noisy-*.parquet``
that ``benchmarks/quality.py`` leaves in its work folder).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ncclean.api import detection_metrics
from ncclean.methods import gmm as gmm_module


class Recorder:
    """Keeps every division's per-pair losses and posteriors (and pc2's class probabilities of
    the last one) while the method trains."""

    def __init__(self) -> None:
        self.losses: list[np.ndarray] = []
        self.posteriors: list[np.ndarray] = []
        self.last: dict[str, np.ndarray] = {}
        self._divide = gmm_module.CoDivide.divide

    def __enter__(self) -> Recorder:
        divide, recorder = self._divide, self

        def recorded(objective, model):
            divide(objective, model)
            recorder.losses.append(objective.losses.copy())
            recorder.posteriors.append(objective.posterior.copy())
            recorder.last = {"image_group": objective.features.image_group,
                             "text_group": objective.features.text_group}
            if hasattr(objective, "image_probs"):
                recorder.last |= {"image_probs": np.stack(objective.image_probs),
                                  "text_probs": np.stack(objective.text_probs)}

        gmm_module.CoDivide.divide = recorded
        return self

    def __exit__(self, *exc) -> None:
        gmm_module.CoDivide.divide = self._divide


def score(noisy: Path, output: Path, method: str, seed: int, params: list[str],
          scratch: bool = False) -> None:
    from typer.testing import CliRunner

    from ncclean.cli.app import app

    args = ["score", str(noisy), "-o", str(output), "--method", method, "--seed", str(seed),
            "--json", "--no-pseudo-captions", "--significance", "off"]
    if scratch:  # the towers ``auto`` falls back to without the pretrained extras
        args += ["--image-encoder", "pixels", "--text-encoder", "tokens"]
    for param in params:
        args += ["-p", param]
    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise SystemExit(f"ncclean score failed ({result.exit_code}): {result.output[-2000:]}")


def class_agreement(last: dict[str, np.ndarray]) -> np.ndarray:
    """pc2: the cross-entropy of the image's class prediction against the caption's, averaged
    over the two networks; higher means the pair's two sides fall in different classes."""
    image, text = last["image_probs"], last["text_probs"]
    gi, gt = last["image_group"], last["text_group"]
    return np.mean([-(text[k][gt] * np.log(image[k][gi] + 1e-8)).sum(1)
                    for k in range(len(image))], axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("noisy", type=Path)
    parser.add_argument("--method", default="gmm", choices=["gmm", "pc2"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-p", "--param", action="append", default=[])
    parser.add_argument("--scratch", action="store_true",
                        help="towers trained from scratch (the CNN and the word GRU)")
    parser.add_argument("--save", type=Path, help="write the recorded divisions to this .npz")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ncclean-curve-") as work, Recorder() as recorder:
        scored = Path(work) / "scored.parquet"
        score(args.noisy, scored, args.method, args.seed, args.param, args.scratch)
        table = pq.read_table(scored, columns=["partition", "noisy_gt", "clean_prob"])
    valid = np.asarray(table.column("partition").to_pylist()) != "invalid"
    truth = np.asarray(table.column("noisy_gt").to_pylist(), dtype=bool)[valid]
    clean_prob = np.asarray(table.column("clean_prob").to_pylist(), dtype=float)[valid]
    losses, posteriors = np.array(recorder.losses), np.array(recorder.posteriors)  # (D, 2, n)
    if args.save:
        np.savez(args.save, losses=losses, posteriors=posteriors, truth=truth, **recorder.last)

    def auroc(clean_score: np.ndarray) -> float:
        return detection_metrics(truth, clean_score).auroc

    print(f"{args.method} seed {args.seed} {' '.join(args.param)}: {len(truth)} pairs, "
          f"{truth.mean():.1%} noisy, {len(losses)} divisions")
    print("division  loss   posterior")
    for d, (loss, posterior) in enumerate(zip(losses, posteriors)):
        print(f"{d:>8}  {auroc(-loss.mean(0)):.4f} {auroc(posterior.mean(0)):.4f}")
    print(f"clean_prob (the run's output)      {auroc(clean_prob):.4f}")
    print(f"posterior averaged (final=mean)    {auroc(posteriors.mean((0, 1))):.4f}")
    print(f"last division (final=last)         {auroc(posteriors[-1].mean(0)):.4f}")
    print(f"loss averaged over divisions       {auroc(-losses.mean((0, 1))):.4f}")
    print(f"last division's loss               {auroc(-losses[-1].mean(0)):.4f}")
    if "image_probs" in recorder.last:
        print(f"class agreement (pc2, not used)    {auroc(-class_agreement(recorder.last)):.4f}")


if __name__ == "__main__":
    main()
