"""Quality benchmark: how well a method finds injected noise, and what it costs.

For a corpus (the clip-art corpus by default, or a synthetic one), inject per-caption noise at
each requested ratio, score with ``ncclean score`` in a child process (so wall time and peak
memory are the run's own), and report against ``noisy_gt``:

- detection AUROC and AP of ``clean_prob``, precision / recall / F1 of the ``noisy`` partition;
- the share of truly noisy pairs in each partition;
- AUROC separately for pairs whose caption is unique in the corpus and for repeated captions;
- wall time and the child's peak resident memory;
- with ``--retrain``: a test split of pairs with unique captions is held out before the noise,
  and ``ncclean retrain --baseline`` reports the strict rSum of plain matchers retrained on the
  cleaned, the noisy and the truly clean pairs, and the share of the gap recovered.

Examples::

    python benchmarks/quality.py --noise 0.2 0.5 0.8
    python benchmarks/quality.py --corpus synth --noise 0.5 --record
    python benchmarks/quality.py --method gmm -p epochs=0      # warm-up only: the plain loss-GMM
    python benchmarks/quality.py --noise 0.5 --retrain         # and retrain on what it kept
    python benchmarks/quality.py --noise 0.5 --retrain --retrain-seeds 0 1 2   # mean of three

``--record`` appends the table, with the exact command, to ``benchmarks/journal.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
DEFAULT_CLIPART = HERE.parent.parent / "shared" / "data" / "clipart" / "clipart.parquet"


def run_child(command: list[str], env: dict | None = None) -> tuple[str, float, float]:
    """Run ``command`` (in ``env``: this process's environment by default); return its stdout,
    wall seconds and peak RSS in MB (from ``wait4``, so it is this child's own peak)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        began = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode:
            sys.exit(f"command failed ({child.returncode}): {shlex.join(command)}\n{err.read()}")
        return out.read(), seconds, usage.ru_maxrss / 1024


def measure(scored: Path, captions_all: list[str]) -> dict:
    from ncclean.api import detection_metrics

    table = pq.read_table(scored, columns=["caption", "noisy_gt", "clean_prob", "partition"])
    partition = np.array(table.column("partition").to_pylist())
    valid = partition != "invalid"
    truth = np.array(table.column("noisy_gt").to_pylist(), dtype=bool)[valid]
    clean_prob = np.array(table.column("clean_prob").to_pylist(), dtype=float)[valid]
    partition = partition[valid]
    metrics = detection_metrics(truth, clean_prob, flagged=partition == "noisy").as_dict()
    counts: dict[str, int] = {}
    for caption in captions_all:
        counts[caption] = counts.get(caption, 0) + 1
    captions = np.array(table.column("caption").to_pylist(), dtype=object)[valid]
    repeated = np.array([counts[c] > 1 for c in captions])
    for name, mask in (("unique", ~repeated), ("repeated", repeated)):
        sub = detection_metrics(truth[mask], clean_prob[mask]) if mask.sum() > 1 else None
        metrics[f"auroc_{name}"] = sub.auroc if sub else float("nan")
        metrics[f"n_{name}"] = int(mask.sum())
    for name, members in (("clean", ("clean_significant", "clean_insignificant")),
                          ("clean_significant", ("clean_significant",)),
                          ("clean_insignificant", ("clean_insignificant",)),
                          ("vague", ("vague",)), ("noisy", ("noisy",))):
        inside = np.isin(partition, members)
        metrics[f"noisy_in_{name}"] = float(truth[inside].mean()) if inside.any() else float("nan")
        metrics[f"size_{name}"] = int(inside.sum())
    metrics["realised_noise"] = float(truth.mean())
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="clipart",
                        help="clipart, synth, or a Parquet path [default: clipart]")
    parser.add_argument("--method", default="gmm")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.2, 0.5, 0.8])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-p", "--param", action="append", default=[],
                        help="method parameter KEY=VALUE, passed to ncclean score")
    parser.add_argument("--score-args", default="", help="more ncclean score arguments, quoted")
    parser.add_argument("--synth-images", type=int, default=500)
    parser.add_argument("--record", action="store_true", help="append to benchmarks/journal.md")
    parser.add_argument("--label", default="", help="a note for the recorded table")
    parser.add_argument("--retrain", action="store_true",
                        help="hold out a test split before the noise and report the Recall@K "
                        "of matchers retrained on the cleaned, noisy and truly clean pairs")
    parser.add_argument("--retrain-args", default="", help="more ncclean retrain arguments")
    parser.add_argument("--retrain-seeds", type=int, nargs="+", default=None,
                        help="retrain seeds; the table gives each arm's mean and sd and the "
                        "gap recovered between the means [default: --seed only]. One seed's "
                        "retrain moves every arm by several rSum points")
    parser.add_argument("--test-size", type=int, default=1000)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="ncclean-bench-"))
    python = [sys.executable, "-m", "ncclean"]
    if args.corpus == "clipart":
        corpus, move = DEFAULT_CLIPART, ["--move-with-image", "category"]
    elif args.corpus == "synth":
        corpus, move = work / "synth.parquet", ["--move-with-image", "scene"]
        run_child(python + ["synth", "-o", str(corpus), "--n-images", str(args.synth_images),
                            "--seed", str(args.seed)])
    else:
        corpus, move = Path(args.corpus), []
    captions_all = pq.read_table(corpus, columns=["caption"]).column(0).to_pylist()
    test = None
    if args.retrain:
        corpus, test = hold_out(corpus, work, args.test_size, args.seed)

    rows = []
    for ratio in args.noise:
        noisy, scored = work / f"noisy-{ratio}.parquet", work / f"scored-{ratio}.parquet"
        run_child(python + ["inject-noise", str(corpus), "-o", str(noisy), "--ratio", str(ratio),
                            "--seed", str(args.seed), *move])
        command = python + ["score", str(noisy), "-o", str(scored), "--method", args.method,
                            "--seed", str(args.seed), "--json"]
        matcher = work / f"matcher-{ratio}.safetensors"
        if (args.corpus == "clipart" and args.method != "gmm") or test is not None:
            command += ["--save-matcher", str(matcher)]
        for item in args.param:
            command += ["-p", item]
        command += shlex.split(args.score_args)
        stdout, seconds, peak = run_child(command)
        summary = json.loads(stdout)
        metrics = measure(scored, captions_all)
        metrics |= {"ratio": ratio, "seconds": seconds, "peak_mb": peak,
                    "estimated_noise": summary["estimated_noise_rate"],
                    "method_seconds": summary["seconds"].get("method", float("nan")),
                    "stages_seconds": summary["seconds"].get("stages", float("nan"))}
        if args.corpus == "clipart":
            metrics |= stage_metrics(scored, matcher if args.method != "gmm" else None)
        if test is not None:
            metrics |= retrain_arms(python, scored, test, args.retrain_seeds or [args.seed],
                                    shlex.split(args.retrain_args) + ["--matcher", str(matcher)])
        rows.append(metrics)
        print(json.dumps(metrics), flush=True)

    table = render(args, rows)
    if args.retrain:
        table += "\n" + render_retrain(rows, args.test_size)
    if args.corpus == "clipart":
        table += "\n" + render_stages(rows)
    print(table)
    if args.record:
        shown = ["python", "benchmarks/quality.py", *(argv if argv is not None else sys.argv[1:])]
        with open(HERE / "journal.md", "a") as handle:
            handle.write(f"\n```\n{shlex.join(a for a in shown if a != '--record')}\n```\n")
            handle.write(table + "\n")


def render(args: argparse.Namespace, rows: list[dict]) -> str:
    name = Path(args.corpus).stem if args.corpus not in ("clipart", "synth") else args.corpus
    params = " ".join(args.param + ([args.score_args] if args.score_args else []))
    head = (f"**{name}, {args.method}{' ' + params if params else ''}, seed {args.seed}**"
            f"{' - ' + args.label if args.label else ''}\n\n"
            "| noise (realised) | AUROC | AP | P | R | F1 | noisy in clean / vague / noisy | "
            "AUROC unique / repeated | est. noise | time | peak RSS |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        lines.append(
            f"| {r['ratio']:.0%} ({r['realised_noise']:.1%}) | {r['auroc']:.3f} | {r['ap']:.3f} | "
            f"{r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | "
            f"{_pct(r['noisy_in_clean'])} / {_pct(r['noisy_in_vague'])} / "
            f"{_pct(r['noisy_in_noisy'])} | {r['auroc_unique']:.3f} / {r['auroc_repeated']:.3f} | "
            f"{_pct(r['estimated_noise'])} | {r['seconds']:.0f} s | {r['peak_mb']:.0f} MB |")
    return head + "\n".join(lines) + "\n"


def hold_out(corpus: Path, work: Path, size: int, seed: int) -> tuple[Path, Path]:
    """Split ``corpus`` into a test set of ``size`` pairs whose caption is unique in the corpus
    (drawn by seed, before any noise) and the rest; returns ``(train, test)`` paths."""
    import pyarrow as pa

    table = pq.read_table(corpus)
    captions = table.column("caption").to_pylist()
    counts: dict[str, int] = {}
    for caption in captions:
        counts[caption] = counts.get(caption, 0) + 1
    unique = np.array([bool(c and c.strip()) and counts[c] == 1 for c in captions])
    chosen = np.zeros(len(captions), dtype=bool)
    pick = np.random.default_rng([seed, 1000]).choice(np.flatnonzero(unique), size,
                                                         replace=False)
    chosen[pick] = True
    train, test = work / "train.parquet", work / "test.parquet"
    pq.write_table(table.filter(pa.array(~chosen)), train)
    pq.write_table(table.filter(pa.array(chosen)), test)
    return train, test


def retrain_arms(python: list[str], scored: Path, test: Path, seeds: list[int],
                 extra: list[str]) -> dict:
    """``ncclean retrain --baseline`` once per seed: each arm's strict rSum (the mean over
    seeds, with ``*_sd`` and the per-seed values) and the gap recovered between the means; with
    ``--matcher`` in ``extra``, also the scoring run's own matcher (the ``matcher`` arm, the same
    at every seed)."""
    per_arm: dict[str, list[float]] = {}
    seconds = 0.0
    for seed in seeds:
        stdout, took, _ = run_child(python + ["retrain", str(scored), "--test", str(test),
                                              "--baseline", "--seed", str(seed), "--json",
                                              *extra])
        seconds += took
        for arm, result in json.loads(stdout)["arms"].items():
            per_arm.setdefault(arm, []).append(result["strict"]["rsum"])
    out: dict = {"retrain_seeds": seeds, "retrain_seconds": seconds}
    for arm, values in per_arm.items():
        out |= {f"rsum_{arm}": float(np.mean(values)), f"rsum_{arm}_seeds": values,
                f"rsum_{arm}_sd": float(np.std(values, ddof=1)) if len(values) > 1 else None}
    gap = out["rsum_oracle"] - out["rsum_noisy"] if "oracle" in per_arm else 0.0
    for arm, key in (("cleaned", "gap_recovered"), ("matcher", "gap_recovered_matcher")):
        out[key] = (out[f"rsum_{arm}"] - out["rsum_noisy"]) / gap if gap and arm in per_arm \
            else None
    return out


def render_retrain(rows: list[dict], test_size: int) -> str:
    seeds = rows[0].get("retrain_seeds", [0]) if rows else [0]
    which = f"seed {seeds[0]}" if len(seeds) == 1 else \
        f"mean (sd) over seeds {', '.join(map(str, seeds))}"
    head = (f"Retrained matchers (`ncclean retrain --baseline`, same steps; {which}), strict "
            f"rSum on {test_size:,} held-out pairs with unique captions:\n\n"
            "| noise | cleaned | noisy (all pairs) | oracle (truly clean) | gap recovered | "
            "the method's own matcher: rSum, gap | retrain time |\n"
            "|---|---|---|---|---|---|---|\n")

    def own(r: dict) -> str:
        if "rsum_matcher" not in r:
            return "-"
        return f"{r['rsum_matcher']:.1f}, {_pct(r['gap_recovered_matcher'])}"

    def arm(r: dict, name: str) -> str:
        sd = r.get(f"rsum_{name}_sd")
        return f"{r[f'rsum_{name}']:.1f}" + (f" ({sd:.1f})" if sd is not None else "")

    lines = [f"| {r['ratio']:.0%} | {arm(r, 'cleaned')} | {arm(r, 'noisy')} | "
             f"{arm(r, 'oracle') if 'rsum_oracle' in r else '-'} | "
             f"{_pct(r['gap_recovered'])} | {own(r)} | {r['retrain_seconds']:.0f} s |"
             for r in rows]
    return head + "\n".join(lines) + "\n"


def stage_metrics(scored: Path, matcher: Path | None = None) -> dict:
    """Pseudo-caption quality and where the correct boilerplate pairs land (clip-art only).
    With the run's saved ``matcher``, also the quality of the plain nearest-caption search on
    the same partitions (for methods that search donors in a space of their own), which
    ``kernels/nearest_donors.py`` computes in a child process."""
    from clipart_truth import boilerplate_landing, pseudo_caption_quality

    out = {f"pseudo_{k}": v for k, v in pseudo_caption_quality(scored).items()}
    out |= {f"boilerplate_{k}": v for k, v in boilerplate_landing(scored).items()}
    if matcher is not None:
        donors = scored.with_suffix(".nearest.npy")
        subprocess.run([sys.executable, str(HERE / "kernels" / "nearest_donors.py"), str(scored),
                        str(matcher), str(donors)], check=True)
        nearest = pseudo_caption_quality(scored, np.load(donors))
        out |= {f"nearest_{k}": v for k, v in nearest.items()}
    return out


def render_stages(rows: list[dict]) -> str:
    head = ("Stages: partition sizes; correct boilerplate pairs (collection names) per partition; "
            "pseudo-captions of `noisy` pairs: coverage, same top-level category as the image "
            "(vs a random clean caption), exactly the image's original caption; time of the "
            "stages against the method's.\n\n"
            "| noise | clean sig. / insig. / vague / noisy | boilerplate in sig. / insig. / "
            "vague / noisy | pseudo coverage | same category (random) | original caption | "
            "stages / method time |\n|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        lines.append(
            f"| {r['ratio']:.0%} | {r['size_clean_significant']} / {r['size_clean_insignificant']}"
            f" / {r['size_vague']} / {r['size_noisy']} | "
            f"{_pct(r['boilerplate_clean_significant'])} / "
            f"{_pct(r['boilerplate_clean_insignificant'])} / {_pct(r['boilerplate_vague'])} / "
            f"{_pct(r['boilerplate_noisy'])} (of {r['boilerplate_correct_boilerplate_pairs']}) | "
            f"{_pct(r['pseudo_coverage'])} | {_pct(r['pseudo_same_category'])} "
            f"({_pct(r['pseudo_random_same_category'])}) | {_pct(r['pseudo_original_caption'])} | "
            f"{r['stages_seconds']:.1f} s / {r['method_seconds']:.0f} s |")
    if any("nearest_same_category" in r for r in rows):
        lines.append("\nThe plain nearest-caption search (the matcher's joint space) on the same "
                     "partitions: " + "; ".join(
                         f"{r['ratio']:.0%}: coverage {_pct(r['nearest_coverage'])}, same "
                         f"category {_pct(r['nearest_same_category'])}, original caption "
                         f"{_pct(r['nearest_original_caption'])}" for r in rows) + ".")
    return head + "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.0%}"


if __name__ == "__main__":
    main()
