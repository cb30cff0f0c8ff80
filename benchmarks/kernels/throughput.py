"""Training throughput: how close each method's training steps come to this machine's matmul
ceiling, and where the rest of its time goes.

For each method (``gmm``, ``pc2``, ``crcl``, ``disncl``) the script trains heads over fixed
512-d vectors on a synthetic corpus in memory (speed.py's recipe: unit float16 vectors, a clean
pair's cosine about 0.2, 20% of the captions' vectors drawn afresh) with the method's default
schedule, through the method's own ``fit``. ``cnn`` trains the from-scratch towers (a PixelCNN on
64 px images and a word GRU, the default matcher) on a generated shapes corpus for a few epochs
of NCR's warm-up (the loop and the towers every scratch method uses).

What it reports, per method:

- **step GFLOP/s**: the floating-point operations of the training steps over the seconds spent in
  them. The operations are counted by the training loop with torch's ``FlopCounterMode`` on one
  step per epoch (2*m*n*k per matrix product and 2*MACs per convolution, forward and backward
  as they are executed: the backward of a layer reading data computes no input gradient, so a
  step counts a little under three times its forward), times the epoch's other steps, over their
  time: the counted step runs 1.6-4x slower under the counter and is timed apart (the script
  sets ``NCCLEAN_COUNT_FLOPS=1``; users' runs count nothing). The GRU's recurrent products are
  counted, as torch decomposes them.
- **share**: that rate over the machine's fp32 matmul ceiling (a 2048x2048 product, best of 5,
  the same thread count, the faster of ``torch.mm`` and oneDNN: see ``speed.matmul_gflops``),
  and, after the slash, over ``torch.mm``'s rate alone (the ceiling of records before
  2026-11-27's fifth session), both measured in the same process right before the method.
  ``NCCLEAN_ONEDNN=0`` trains on torch's own products instead of oneDNN's
  (:mod:`ncclean.models.linear`), for a comparison in alternated processes.
- **epoch**: seconds per training epoch (steps only) and the whole ``fit`` (steps plus
  everything between them: divisions, per-pair passes, mixtures, the final embeddings), and the
  share of ``fit`` outside the steps.
- **AUROC** of ``clean_prob`` against the injected mismatches (a sanity check that a speed change
  kept the method's behaviour).
- With ``--profile``, a ``torch.profiler`` table of one more (short) run: the top operators by
  self CPU time.

Examples::

    python benchmarks/kernels/throughput.py                       # every method, 20,000 pairs
    python benchmarks/kernels/throughput.py --methods gmm --pairs 100000 --threads 2
    python benchmarks/kernels/throughput.py --methods gmm pc2 --profile
    OMP_NUM_THREADS=2 python benchmarks/kernels/throughput.py --threads 2 --runs 3  # the bars
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# measure the checkout this script lives in; speed.py one folder up
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

# the ceiling, as speed.py measures it
from speed import matmul_ceilings, matmul_gflops  # noqa: E402

DIM = 512
LATENT = 64
NOISE = 0.2
METHODS = ["gmm", "pc2", "crcl", "disncl", "cnn"]


def vector_corpus(n: int, seed: int = 0, dim: int = DIM):
    """``(features, config, noisy_gt)``: ``n`` pairs of unit ``dim``-d float16 vectors made as
    ``benchmarks/speed.py`` makes them (each side the projection of a 64-d latent plus twice as
    much noise; 20% of the captions' latents drawn afresh), heads on both sides."""
    from ncclean.models.features import Features
    from ncclean.models.matcher import MatcherConfig

    rng = np.random.default_rng(seed)
    project = rng.standard_normal((LATENT, dim)).astype(np.float32) / math.sqrt(LATENT)
    latent = rng.standard_normal((n, LATENT)).astype(np.float32)
    noisy = rng.random(n) < NOISE
    text_latent = latent.copy()
    text_latent[noisy] = rng.standard_normal((int(noisy.sum()), LATENT))

    def unit(values: np.ndarray) -> np.ndarray:
        return (values / np.linalg.norm(values, axis=1, keepdims=True)).astype(np.float16)

    images = unit(latent @ project + 2 * rng.standard_normal((n, dim), dtype=np.float32))
    texts = unit(text_latent @ project + 2 * rng.standard_normal((n, dim), dtype=np.float32))
    pairs = np.arange(n)
    features = Features(rows=pairs, image_group=pairs, text_group=pairs.copy(),
                        image_data=images, text_data=texts)
    config = MatcherConfig(image_tower="column", text_tower="column", image_in_dim=dim,
                           text_in_dim=dim)
    return features, config, noisy


def image_corpus(n_images: int, seed: int = 0):
    """``(features, config, noisy_gt)`` of a generated shapes corpus (3 captions per image, 20%
    of them swapped), 64 px images and token captions, the default scratch matcher."""
    import tempfile

    from ncclean import api
    from ncclean.data.corpus import read_corpus
    from ncclean.models.features import build_features
    from ncclean.models.matcher import MatcherConfig
    from ncclean.models.tables import build_vocabulary

    with tempfile.TemporaryDirectory() as tmp:
        clean, noisy = Path(tmp) / "clean.parquet", Path(tmp) / "noisy.parquet"
        api.synth(clean, n_images=n_images, captions_per_image=3, seed=seed)
        api.inject_noise(clean, noisy, ratio=NOISE, seed=seed)
        corpus = read_corpus(noisy, image_size=64)
        corpus.images = np.array(corpus.images)
        truth = np.array(corpus.source.read_columns(["noisy_gt"]).column(0).to_pylist())
    config = MatcherConfig(vocab=build_vocabulary(corpus.captions).tokens)
    features = build_features(corpus, config)
    return features, config, truth[features.rows]


def history_of(report: dict) -> list[dict]:
    """Every training epoch's report in a method's report (crcl nests them per piece)."""
    return [epoch for epoch in report.get("history", []) if "step_seconds" in epoch]


# The profile's short schedule: one epoch of each kind (warm-up, co-training; one piece).
PROFILE_PARAMS = {"gmm": ["warmup_epochs=1", "epochs=1"], "pc2": ["warmup_epochs=1", "epochs=1"],
                  "disncl": ["warmup_epochs=1", "epochs=1"], "crcl": ["pieces=2"]}


def run_method(name: str, args: argparse.Namespace, short: bool = False) -> dict:
    """Fit ``name`` once on its corpus; the row of the table. ``short``: with
    :data:`PROFILE_PARAMS` (and one cnn epoch)."""
    from ncclean.evaluate.detection import detection_metrics
    from ncclean.methods.base import Context, make_method

    if name == "cnn":
        features, config, truth = image_corpus(args.images, args.seed)
    else:
        features, config, truth = vector_corpus(args.pairs, args.seed)
    ceiling, ceiling_torch = (math.nan, math.nan) if short else matmul_ceilings()  # no profile
    began = time.perf_counter()
    if name == "cnn":
        from ncclean.train.warmup import warm_up

        context = Context(seed=args.seed, matcher_config=config)
        warm_up(features, context, 1 if short else args.cnn_epochs, 128, 2e-4)
        history = _LAST_HISTORY.pop()
        auroc = math.nan
    else:
        settings = args.param.get(name, []) + (PROFILE_PARAMS.get(name, []) if short else [])
        method = make_method(name, dict(p.split("=", 1) for p in settings))
        context = Context(seed=args.seed, matcher_config=config)
        result = method.fit(features, context)
        history = history_of(result.report)
        auroc = detection_metrics(truth, result.clean_prob).auroc
    wall = time.perf_counter() - began
    ceiling_after = math.nan if short else matmul_gflops()
    steps = sum(h.get("timed_steps", h["steps"]) for h in history)  # the counted one left out
    step_seconds = sum(h["step_seconds"] for h in history)
    counted_seconds = sum(h.get("counted_seconds", 0.0) for h in history)
    gflop = sum(h["gflop"] for h in history)
    rate = gflop / step_seconds
    return {"method": name, "pairs": features.n_pairs, "threads": _threads(),
            "ceiling": ceiling, "ceiling_after": ceiling_after, "gflops": rate,
            "share": rate / ceiling, "ceiling_torch": ceiling_torch,
            "share_torch": rate / ceiling_torch, "onednn": _onednn(),
            "epochs": len(history), "steps": steps, "step_seconds": step_seconds,
            "epoch_seconds": step_seconds / max(1, len(history)),
            "step_ms": 1000 * step_seconds / max(1, steps),
            "gflop_per_step": gflop / max(1, steps),
            "counted_step_ratio": (counted_seconds / max(1, len(history)))
            / (step_seconds / max(1, steps)),
            "fit_seconds": wall, "outside_share": 1 - (step_seconds + counted_seconds) / wall,
            "auroc": auroc}


_LAST_HISTORY: list[list[dict]] = []


def _wrap_training(max_steps: int | None) -> None:
    """Keep the history of every ``train`` call (``warm_up`` returns none) and, with
    ``max_steps``, cut every epoch to its first ``max_steps`` steps (a short, like-for-like
    sample of each kind of epoch: the step rate, not the method's result)."""
    import itertools

    import ncclean.methods.crcl as crcl
    import ncclean.methods.disncl as disncl
    import ncclean.methods.gmm as gmm
    import ncclean.train.loop as loop
    import ncclean.train.warmup as warmup

    original = loop.train

    def wrapped(model, objective, config, *rest, **named):
        if max_steps:
            steps = objective.steps
            objective.steps = lambda epoch, rng: itertools.islice(steps(epoch, rng), max_steps)
        history = original(model, objective, config, *rest, **named)
        _LAST_HISTORY.append(history)
        return history

    for module in (warmup, gmm, crcl, disncl):
        module.train = wrapped


def _onednn() -> bool:
    from ncclean.models import linear

    return linear.available()


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def profile_method(name: str, args: argparse.Namespace, top: int = 12) -> str:
    """The top operators by self CPU time over one fit with the short schedule
    (:data:`PROFILE_PARAMS`), as text."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        row = run_method(name, args, short=True)
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    top_ops = ", ".join(f"{e.key.replace('aten::', '')} {e.self_cpu_time_total / total:.0%}"
                        for e in events[:top])
    return (f"profile of {name} (short schedule, under the profiler): fit "
            f"{row['fit_seconds']:.1f} s, steps {row['step_seconds']:.1f} s, outside "
            f"{row['outside_share']:.0%}; self CPU by operator: {top_ops}")


def step_objective(name: str, features, context, settings: dict | None = None):
    """``(objective, model)``: ``name``'s training objective on ``features`` and its model as
    its fit builds them (with ``settings``), ready for single steps: ``gmm``/``pc2`` divided
    once, with the noisy pairs in every co-training epoch (epoch 0 a warm-up, 1 co-training);
    ``crcl`` one piece frozen for an epoch (epoch 1 after the freeze)."""
    from ncclean.methods.base import make_method
    from ncclean.models.matcher import Ensemble

    settings = settings or {}
    if name == "crcl":
        from ncclean.methods.crcl import SelfRefine

        return (SelfRefine(features, make_method("crcl", settings), (2,), 1, "cpu",
                           context.seed), context.new_matcher(0))
    method = make_method(name, settings | {"noisy_from": 0.0})
    model = method._model(Ensemble([context.new_matcher(0), context.new_matcher(1)]), features,
                          context)
    objective = method._objective(features, 1, 1, context)
    objective.divide(model)
    return objective, model


def ab_steps(name: str, args: argparse.Namespace, rounds: int = 6, chunk: int = 5) -> dict:
    """The step time of this checkout's training path against the path before issue 42's
    changes, in one process, alternating chunks of ``chunk`` steps for ``rounds`` rounds (so
    that both arms see the same load): the old arm steps with torch's default AdamW and
    ``clip_grad_norm_`` and, for ``gmm``/``pc2``, with the heads' shortcuts off (a second
    forward pass for every eval-mode prediction, clean and noisy batches encoded apart); the
    new arm as :func:`ncclean.train.loop.train` does. ``gmm``/``pc2``: co-training steps with
    the noisy pairs; ``crcl``: steps after the freeze. Returns the best and median ms per step
    of each arm."""
    import copy

    import torch

    from ncclean.methods.base import Context
    from ncclean.models.towers import VectorMLP
    from ncclean.train.loop import _clip, _clip_groups, _fusable

    features, config, _ = vector_corpus(args.pairs, args.seed)
    objective, model = step_objective(name, features, Context(seed=args.seed,
                                                              matcher_config=config))
    epoch = 1
    steps = list(objective.steps(epoch, np.random.default_rng(args.seed)))
    old_model = copy.deepcopy(model)
    for module in old_model.modules():
        if isinstance(module, VectorMLP):
            module.same_in_eval = False
    arms = {}
    for arm, net in (("old", old_model), ("new", model)):
        params = [p for p in net.parameters() if p.requires_grad]
        fused = arm == "new" and _fusable(params)
        arms[arm] = (net, torch.optim.AdamW(params, lr=2e-4, fused=fused or None),
                     _clip_groups(net), [])
    for r in range(rounds + 1):  # round 0 warms caches up and is not counted
        for arm, (net, optimizer, groups, times) in arms.items():
            began = time.perf_counter()
            for step in steps[(r * chunk) % len(steps):][:chunk]:
                loss = objective.loss(net, step, epoch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                for group in groups:
                    if arm == "new":
                        _clip(group, 2.0)
                    else:
                        torch.nn.utils.clip_grad_norm_(group, 2.0)
                optimizer.step()
                float(loss.detach())
            if r:
                times.append(1000 * (time.perf_counter() - began) / chunk)
    out = {"method": name, "threads": _threads()}
    for arm, (_, _, _, times) in arms.items():
        out[f"{arm}_best_ms"], out[f"{arm}_median_ms"] = min(times), statistics.median(times)
    out["ratio_median"] = out["new_median_ms"] / out["old_median_ms"]
    return out


def render(rows: list[dict]) -> str:
    lines = ["| method | pairs | threads | ceiling before / after (torch.mm) | step GFLOP/s | "
             "share (of torch.mm) | "
             "GFLOP/step | ms/step | epoch (steps) | fit | outside steps | AUROC |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['pairs']:,} | {r['threads']} | {r['ceiling']:.0f} / "
            f"{r['ceiling_after']:.0f} ({r.get('ceiling_torch', math.nan):.0f}) | "
            f"{r['gflops']:.0f} | {r['share']:.0%} ({r.get('share_torch', math.nan):.0%}) | "
            f"{r['gflop_per_step']:.2f} | "
            f"{r['step_ms']:.1f} | {r['epoch_seconds']:.1f} s | {r['fit_seconds']:.1f} s | "
            f"{r['outside_share']:.0%} | {r['auroc']:.3f} |")
    return "\n".join(lines)


def render_shares(rows: list[dict]) -> str:
    """Each method's share of the ceiling in every run (each against the ceiling measured in
    its own process) and their mean: the shares scatter from run to run on a shared machine."""
    shares: dict[str, list[float]] = {}
    of_torch: dict[str, list[float]] = {}
    for r in rows:
        shares.setdefault(r["method"], []).append(r["share"])
        of_torch.setdefault(r["method"], []).append(r.get("share_torch", math.nan))
    lines = ["| method | share of the ceiling, run by run | mean | min | mean of torch.mm's |",
             "|---|---|---|---|---|"]
    for method, values in shares.items():
        lines.append(f"| {method} | {' / '.join(f'{v:.0%}' for v in values)} | "
                     f"{statistics.mean(values):.0%} | {min(values):.0%} | "
                     f"{statistics.mean(of_torch[method]):.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    os.environ["NCCLEAN_COUNT_FLOPS"] = "1"  # the loop counts a step per epoch (children too)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs of the vector corpus")
    parser.add_argument("--images", type=int, default=800, help="images of the cnn corpus")
    parser.add_argument("--cnn-epochs", type=int, default=2, help="warm-up epochs of cnn")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-p", "--param", action="append", default=[], metavar="METHOD:K=V",
                        help="a method parameter, e.g. gmm:batch_size=256 (repeatable)")
    parser.add_argument("--profile", action="store_true", help="also a torch.profiler table")
    parser.add_argument("--ab", action="store_true", help="only the step times of the path "
                        "before and after issue 42's changes, in one process (gmm, pc2, crcl)")
    parser.add_argument("--max-steps", type=int, help="cut every epoch to this many steps "
                        "(for a quick step rate; the AUROC then means nothing)")
    parser.add_argument("--runs", type=int, default=1, help="run the table this many times "
                        "(methods interleaved) and add each method's shares and their mean")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    params: dict[str, list[str]] = {}
    for item in args.param:
        method, setting = item.split(":", 1)
        params.setdefault(method, []).append(setting)
    args.param = params
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    _wrap_training(args.max_steps)
    if args.ab:
        for name in args.methods:
            print(json.dumps(ab_steps(name, args)), flush=True)
        return
    if args.child:  # one method in a fresh process: no state shared between methods
        row = run_method(args.child, args)
        print("ROW " + json.dumps(row), flush=True)
        if args.profile:
            print(profile_method(args.child, args), flush=True)
        return

    shown = argv if argv is not None else sys.argv[1:]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, cwd=HERE).stdout.strip()
    print(f"command: {shlex.join(['python', 'benchmarks/kernels/throughput.py', *shown])}")
    print(f"commit: {commit}{' (modified)' if dirty else ''}; load average before: "
          f"{Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    rows = []
    for name in [m for _ in range(args.runs) for m in args.methods]:
        child = [sys.executable, str(Path(__file__)), "--child", name, *shown]
        out = subprocess.run(child, capture_output=True, text=True, env=os.environ)
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            raise SystemExit(f"{name} failed")
        for line in out.stdout.splitlines():
            if line.startswith("ROW "):
                rows.append(json.loads(line[4:]))
                print(line[4:], flush=True)
            else:
                print(line)
    print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(render(rows))
    if args.runs > 1:
        print(render_shares(rows))


if __name__ == "__main__":
    main()
