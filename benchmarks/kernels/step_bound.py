"""The least time an eager training step of heads takes on this machine, against the time at
which it would run at a share of the fp32 matmul ceiling (issue 42's bar for heads: half).

Per phase of a method's step (gmm and pc2: a warm-up step and a co-training step with the noisy
pairs; crcl: a step after the freeze), on ``throughput.py``'s synthetic vectors:

- **GFLOP**: the step's operations, counted by torch's ``FlopCounterMode`` as the loop counts;
- **products**: the step's oneDNN products (shapes, strides and biases recorded from one step)
  replayed back to back with nothing between them, median of 5 rounds of 20;
- **narrow step**: the same step with heads ``--width`` wide (hidden layer and embedding) on
  ``--narrow-dim``-d vectors. It runs the same operations, autograd, optimiser and clipping with
  next to no arithmetic: what is left is the dispatch of the step's operations and the Python
  around them;
- **allowed**: the step time at ``--share`` of the ceiling (a 2048x2048 product, the faster of
  ``torch.mm`` and oneDNN, best of 5, as ``speed.py`` measures it);
- **step**: the full-width step itself, median of 5 chunks of 20 steps, and its share.

Where products + narrow step exceed allowed, no eager step of this code at this batch size
reaches the share: the arithmetic outside the products (activations, the optimiser's and the
clipping's passes over the weights, copies) comes on top.

    OMP_NUM_THREADS=2 python benchmarks/kernels/step_bound.py --threads 2
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# measure the checkout this script lives in; speed.py one folder up, throughput.py beside it
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent), str(HERE)]

from speed import matmul_gflops  # noqa: E402
from throughput import step_objective, vector_corpus  # noqa: E402

PHASES = {"gmm": [("warm-up", 0), ("co-training with the noisy pairs", 1)],
          "pc2": [("warm-up", 0), ("co-training with the noisy pairs", 1)],
          "crcl": [("after the freeze", 1)]}


@contextlib.contextmanager
def hidden_width(width: int | None):
    """Heads (:class:`ncclean.models.towers.VectorMLP`) built inside have hidden layers
    ``width`` wide (``None``: their default)."""
    from ncclean.models import towers

    init = towers.VectorMLP.__init__

    def narrow(self, in_dim: int, embed_dim: int = 256, hidden: int = 512) -> None:
        init(self, in_dim, embed_dim, width)

    if width is not None:
        towers.VectorMLP.__init__ = narrow
    try:
        yield
    finally:
        towers.VectorMLP.__init__ = init


def stepper(name: str, pairs: int, seed: int, dim: int, width: int | None):
    """``(objective, step)``: ``name``'s objective on ``pairs`` synthetic ``dim``-d pairs, its
    model divided once (gmm, pc2), and ``step(batch, epoch)``, one optimiser step as the loop
    takes it (fused AdamW, clipping per network)."""
    import torch

    from ncclean.methods.base import Context
    from ncclean.train.loop import _clip, _clip_groups, _fusable

    features, config, _ = vector_corpus(pairs, seed, dim)
    settings = {}
    if width is not None:
        config.embed_dim = width
        if name == "pc2":
            settings["classifier_hidden"] = width
    with hidden_width(width):
        objective, model = step_objective(name, features,
                                          Context(seed=seed, matcher_config=config), settings)
    model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=2e-4, fused=_fusable(parameters) or None)
    groups = _clip_groups(model)

    def step(batch, epoch: int) -> None:
        loss = objective.loss(model, batch, epoch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for group in groups:
            _clip(group, 2.0)
        optimizer.step()
        float(loss.detach())

    return objective, step


def step_ms(step, batches: list, epoch: int, chunk: int = 20, rounds: int = 5) -> float:
    """Median ms per step over ``rounds`` chunks of ``chunk`` steps, after 10 untimed."""
    for batch in batches[:10]:
        step(batch, epoch)
    times, at = [], 10
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(chunk):
            step(batches[at % len(batches)], epoch)
            at += 1
        times.append((time.perf_counter() - began) / chunk)
    return 1000 * statistics.median(times)


def recorded_products(step, batch, epoch: int) -> tuple[float, list[tuple]]:
    """``(flop, calls)``: the operations of one step, counted, and its oneDNN products as
    ``(x shape, x strides, weight shape, weight strides, has bias)``."""
    from torch.utils.flop_counter import FlopCounterMode

    import ncclean.models.linear as linear

    calls, original = [], linear._product

    def recording(x, weight, bias=None):
        calls.append((tuple(x.shape), x.stride(), tuple(weight.shape), weight.stride(),
                      bias is not None))
        return original(x, weight, bias)

    linear._product = recording
    try:
        with FlopCounterMode(display=False) as counter:
            step(batch, epoch)
    finally:
        linear._product = original
    return counter.get_total_flops(), calls


def replay_ms(calls: list[tuple], repeats: int = 20, rounds: int = 5) -> tuple[float, float]:
    """``(ms, flop)``: the products ``calls`` on random operands of the same shapes and
    strides, back to back, median of ``rounds`` rounds of ``repeats``."""
    import torch

    from ncclean.models.linear import _product

    def operand(shape: tuple, stride: tuple) -> torch.Tensor:
        return torch.randn(shape) if stride[-1] == 1 else torch.randn(shape[::-1]).t()

    made = [(operand(xs, xst), operand(ws, wst), torch.randn(ws[0]) if bias else None)
            for xs, xst, ws, wst, bias in calls]
    for x, w, b in made:  # oneDNN builds a kernel per shape on first use
        _product(x, w, b)
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(repeats):
            for x, w, b in made:
                _product(x, w, b)
        times.append((time.perf_counter() - began) / repeats)
    flop = sum(2 * x.shape[0] * x.shape[1] * w.shape[0] for x, w, _ in made)
    return 1000 * statistics.median(times), flop


def bound_rows(name: str, args: argparse.Namespace, ceiling: float) -> list[dict]:
    """One row per phase of ``name``'s step."""
    import numpy as np

    full, narrow = (stepper(name, args.pairs, args.seed, dim, width)
                    for dim, width in ((512, None), (args.narrow_dim, args.width)))
    rows = []
    for phase, epoch in PHASES[name]:
        timings = {}
        for arm, (objective, step) in (("full", full), ("narrow", narrow)):
            batches = list(objective.steps(epoch, np.random.default_rng(args.seed)))
            timings[arm] = step_ms(step, batches, epoch)
            if arm == "full":
                flop, calls = recorded_products(step, batches[0], epoch)
        products, product_flop = replay_ms(calls)
        allowed = 1000 * flop / 1e9 / (args.share * ceiling)
        rows.append({"method": name, "phase": phase, "gflop": flop / 1e9,
                     "products_ms": products, "products_gflops": product_flop / products / 1e6,
                     "narrow_ms": timings["narrow"], "allowed_ms": allowed,
                     "step_ms": timings["full"],
                     "step_share": flop / 1e9 / (timings["full"] / 1000) / ceiling})
    return rows


def render(rows: list[dict], share: float) -> str:
    lines = [f"| method | step | GFLOP | products alone | narrow step | sum | {share:.0%} allows "
             "| the step (share) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        total = r["products_ms"] + r["narrow_ms"]
        lines.append(
            f"| {r['method']} | {r['phase']} | {r['gflop']:.2f} | {r['products_ms']:.2f} ms "
            f"({r['products_gflops']:.0f} GFLOP/s) | {r['narrow_ms']:.2f} ms | "
            f"{total:.2f} ms{' (over)' if total > r['allowed_ms'] else ''} | "
            f"{r['allowed_ms']:.2f} ms | {r['step_ms']:.2f} ms ({r['step_share']:.0%}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(PHASES), choices=list(PHASES))
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--width", type=int, default=8, help="the narrow heads' width")
    parser.add_argument("--narrow-dim", type=int, default=16, help="the narrow step's vectors")
    parser.add_argument("--share", type=float, default=0.5, help="of the ceiling")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    shown = argv if argv is not None else sys.argv[1:]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    print(f"command: {shlex.join(['python', 'benchmarks/kernels/step_bound.py', *shown])}")
    ceiling = matmul_gflops()
    print(f"commit: {commit}; threads {torch.get_num_threads()}; ceiling {ceiling:.0f} GFLOP/s",
          flush=True)
    rows = [row for name in args.methods for row in bound_rows(name, args, ceiling)]
    print(render(rows, args.share))


if __name__ == "__main__":
    main()
