"""Speed benchmark: what each method costs on precomputed-embedding corpora of growing size.

For each N (10k, 100k, 1M by default) the script writes a corpus shaped like LAION's or DataComp's
precomputed CLIP features: ``image_emb`` and ``text_emb`` as 512-d float16 fixed-size lists, a
short caption, an id and ``noisy_gt`` (20% of the captions' vectors come from another pair). It
then times ``ncclean score`` in a child process, end to end (read, train, score, write), for every
method, with the child's peak resident memory (``wait4``'s max RSS), fits how time grows with N
(the exponent of a power law between consecutive sizes), and measures this machine's fp32 matmul
ceiling so that each method's training throughput can be stated as a share of it.

Examples::

    python benchmarks/speed.py                                   # every method, 10k / 100k / 1M
    python benchmarks/speed.py --methods clip gmm --sizes 10000 100000
    python benchmarks/speed.py --largest pc2=100000 --largest crcl=100000
    python benchmarks/speed.py --record           # and write benchmarks/results/speed.md
    python benchmarks/speed.py --methods clip --sizes 1000000 --writes all scores
                                              # score --write scores beside --write all

Corpora are cached under ``--work`` (default ``/tmp/ncclean-speed``) and reused by later runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from quality import run_child

HERE = Path(__file__).resolve().parent
DIM = 512
LATENT = 64
NOISE = 0.2
METHODS = ["clip", "gmm", "pc2", "crcl"]
#: Methods timed trained on every pair (issue 42's gmm bar), not on ``--fit-sample auto``'s
#: sample of a large corpus; clip runs with the defaults.
TRAINED_ON_ALL = {"gmm": ["--fit-sample", "all"]}


ENCODINGS = ("dictionary", "plain")


def generate(path: Path, n: int, seed: int = 0, chunk: int = 65536,
             encoding: str = "dictionary") -> None:
    """Write ``n`` pairs to ``path``: unit-length 512-d float16 image and text vectors, each the
    projection of a 64-d latent per pair plus twice as much independent noise (a clean pair's
    cosine is about 0.2), except for a random 20% whose text latent is drawn afresh.
    ``encoding``: ``dictionary``, pyarrow's default for every column (as most tools write
    embeddings), or ``plain`` vectors (as ncclean writes them)."""
    rng = np.random.default_rng(seed)
    project = rng.standard_normal((LATENT, DIM)).astype(np.float32) / math.sqrt(LATENT)
    schema = pa.schema([
        ("id", pa.int64()),
        ("caption", pa.string()),
        ("image_emb", pa.list_(pa.float16(), DIM)),
        ("text_emb", pa.list_(pa.float16(), DIM)),
        ("noisy_gt", pa.bool_()),
    ])
    tmp = path.with_name(path.name + ".tmp")
    dictionary = True if encoding == "dictionary" else ["id", "caption", "noisy_gt"]
    with pq.ParquetWriter(tmp, schema, use_dictionary=dictionary) as writer:
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            latent = rng.standard_normal((m, LATENT)).astype(np.float32)
            noisy = rng.random(m) < NOISE
            text_latent = latent.copy()
            text_latent[noisy] = rng.standard_normal((int(noisy.sum()), LATENT))
            image = latent @ project + 2 * rng.standard_normal((m, DIM), dtype=np.float32)
            text = text_latent @ project + 2 * rng.standard_normal((m, DIM), dtype=np.float32)
            columns = [pa.array(np.arange(start, start + m, dtype=np.int64)),
                       pa.array([f"synthetic caption {i}" for i in range(start, start + m)]),
                       _vectors(image), _vectors(text), pa.array(noisy)]
            writer.write_batch(pa.record_batch(columns, schema=schema))
    os.replace(tmp, path)


def _vectors(values: np.ndarray) -> pa.FixedSizeListArray:
    values = values / np.linalg.norm(values, axis=1, keepdims=True)
    flat = pa.array(values.astype(np.float16).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, DIM)


def matmul_gflops(size: int = 2048, repeats: int = 5, path: str = "best") -> float:
    """fp32 GFLOP/s of a square matmul on this machine with torch's default threads (best of
    ``repeats``). ``path``: ``"torch"`` (``torch.mm``: MKL's sgemm), ``"onednn"`` (oneDNN's
    dense linear kernel, which :mod:`ncclean.models.linear` trains with) or ``"best"``, the
    faster of the two: the machine's fp32 ceiling. On this project's AMD machine MKL takes its
    AVX2 path and oneDNN its AVX-512 one, about twice as fast; ceilings recorded before
    2026-11-27's fifth session are ``torch.mm``'s."""
    if path == "best":
        return matmul_ceilings(size, repeats)[0]
    import torch

    a = torch.randn(size, size)
    b = torch.randn(size, size)
    if path == "onednn":
        if not onednn_available():
            return math.nan

        def product():
            torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
    else:
        def product():
            a @ b
    product()
    best = math.inf
    for _ in range(repeats):
        began = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - began)
    return 2 * size**3 / best / 1e9


def onednn_available() -> bool:
    """Whether this torch has oneDNN's dense linear kernel on this machine (x86 builds with
    oneDNN), as :mod:`ncclean.models.linear` asks before training with it."""
    import torch

    if platform.machine().lower() not in ("x86_64", "amd64") \
            or not torch.backends.mkldnn.is_available():
        return False
    try:
        return torch.ops.mkldnn._linear_pointwise is not None
    except (AttributeError, RuntimeError):
        return False


def matmul_ceilings(size: int = 2048, repeats: int = 5) -> tuple[float, float]:
    """``(machine, torch)``: the machine's fp32 ceiling (the faster of ``torch.mm`` and
    oneDNN) and ``torch.mm``'s rate, each path measured once (:func:`matmul_gflops`)."""
    torch_rate = matmul_gflops(size, repeats, "torch")
    return max(torch_rate, matmul_gflops(size, repeats, "onednn")), torch_rate


#: The columns ``score --write scores`` reads of the corpus (it writes none of them back but
#: the id).
SCORES_READ = ["id", "caption", "image_emb", "text_emb"]


def io_floor(corpus: Path, scored: Path, write: str = "all") -> float:
    """Seconds pyarrow alone takes to do the I/O ``score`` cannot avoid: read every column of
    ``corpus`` (``score`` writes them all back; with ``write="scores"`` only the columns it
    reads, :data:`SCORES_READ`) and write the scored table (for ``scores``: the id and
    ncclean's columns) with pyarrow's defaults but no statistics; in the same run as the
    score, so the ratio drifts less than either time."""
    began = time.perf_counter()
    pq.read_table(corpus, columns=SCORES_READ if write == "scores" else None)
    read = time.perf_counter() - began
    table = pq.read_table(scored)
    target = scored.with_name(scored.name + ".floor.parquet")
    began = time.perf_counter()
    pq.write_table(table, target, write_statistics=False)
    write = time.perf_counter() - began
    target.unlink()
    return read + write


def floor_in_child(corpus: Path, scored: Path, write: str) -> float:
    """:func:`io_floor` in a child process. The tables it reads (4 GB for a million pairs) would
    otherwise raise this process's peak memory, and a child started after that reports it as
    its own: ``wait4``'s maximum RSS of a child includes its parent's high-water mark at the
    time it was started (measured: a parent that held and freed 1 GB saw a child running
    ``pass`` peak at 980 MB)."""
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); from speed import io_floor; "
            f"print(io_floor(*map(__import__('pathlib').Path, sys.argv[1:3]), sys.argv[3]))")
    stdout, _, _ = run_child([sys.executable, "-c", code, str(corpus), str(scored), write])
    return float(stdout)


def detection(scored: Path, corpus: Path) -> float:
    """AUROC of ``clean_prob`` against ``noisy_gt`` (the corpus's: a ``--write scores`` file
    holds no input column but the id; both keep the corpus's row order)."""
    from ncclean.api import detection_metrics

    truth = pq.read_table(corpus, columns=["noisy_gt"]).column(0).to_numpy(zero_copy_only=False)
    prob = pq.read_table(scored, columns=["clean_prob"]).column(0).to_numpy()
    return detection_metrics(truth, prob).auroc


def main(argv: list[str] | None = None) -> None:
    os.environ["NCCLEAN_COUNT_FLOPS"] = "1"  # the loop counts a step per epoch (children too)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=METHODS)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--work", type=Path, default=Path("/tmp/ncclean-speed"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--encodings", nargs="+", default=list(ENCODINGS), choices=ENCODINGS,
                        help="how the generated corpora's vectors are encoded")
    parser.add_argument("--largest", action="append", default=[], metavar="METHOD=N",
                        help="skip METHOD above N pairs (repeatable)")
    parser.add_argument("--score-args", default="", help="more ncclean score arguments, quoted")
    parser.add_argument("--writes", nargs="+", default=["all"], choices=["all", "scores"],
                        help="time score --write in each of these forms, one after the other")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/speed.md")
    parser.add_argument("--render", type=Path, metavar="LOG",
                        help="only render the table from a previous run's printed output")
    args = parser.parse_args(argv)
    if args.render:
        ceiling, rows, command = read_log(args.render)
        table = render(rows, ceiling, command)
        print(table)
        if args.record:
            (HERE / "results" / "speed.md").write_text(table)
        return

    largest = {m: int(v) for m, v in (item.split("=") for item in args.largest)}
    args.work.mkdir(parents=True, exist_ok=True)
    ceiling = matmul_gflops()
    shown = argv if argv is not None else sys.argv[1:]
    print(f"command: {shlex.join(['python', 'benchmarks/speed.py', *shown])}", flush=True)
    print(f"fp32 matmul ceiling: {ceiling:.0f} GFLOP/s", flush=True)
    rows = []
    for n, encoding in [(n, e) for n in args.sizes for e in args.encodings]:
        corpus = args.work / f"emb-{n}-{encoding}.parquet"
        if not corpus.exists():
            began = time.perf_counter()
            generate(corpus, n, args.seed, encoding=encoding)
            print(f"generated {corpus} in {time.perf_counter() - began:.0f} s", flush=True)
        for method, write in [(m, w) for m in args.methods for w in args.writes]:
            if n > largest.get(method, n):
                continue
            scored = args.work / f"scored-{method}-{n}-{write}.parquet"
            command = [sys.executable, "-m", "ncclean", "score", str(corpus), "-o", str(scored),
                       "--method", method, "--image-emb-col", "image_emb",
                       "--text-emb-col", "text_emb", "--seed", str(args.seed), "--json",
                       "--write", write,
                       *TRAINED_ON_ALL.get(method, []), *shlex.split(args.score_args)]
            stdout, seconds, peak = run_child(command)
            summary = json.loads(stdout)
            sidecar = json.loads(Path(str(scored) + ".json").read_text())
            floor = floor_in_child(corpus, scored, write)
            row = {"method": method, "n": n, "encoding": encoding, "write": write,
                   "seconds": seconds,
                   "peak_mb": peak, "output_bytes": scored.stat().st_size,
                   "io_floor_s": floor, "times_floor": seconds / floor,
                   "auroc": detection(scored, corpus), "phases": summary["seconds"],
                   "train": training_totals(sidecar)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            scored.unlink()
            Path(str(scored) + ".json").unlink(missing_ok=True)

    table = render(rows, ceiling, shlex.join(["python", "benchmarks/speed.py", *shown]))
    print(table)
    if len(args.writes) > 1:
        print(render_writes(rows))
    if args.record:
        (HERE / "results" / "speed.md").write_text(table)


def render_writes(rows: list[dict]) -> str:
    """``--write scores`` beside ``--write all`` for each method and size measured with both:
    end to end, floor, peak memory and output bytes, and the ratios scores / all."""
    lines = ["| method | N | write | end to end | pyarrow floor | times the floor | peak RSS | "
             "output |", "|---|---|---|---|---|---|---|---|"]
    ratios = []
    for method, n in dict.fromkeys((r["method"], r["n"]) for r in rows):
        pair = {r.get("write", "all"): r for r in rows if (r["method"], r["n"]) == (method, n)}
        for write, r in pair.items():
            lines.append(f"| {method} | {n:,} | {write} | {r['seconds']:.1f} s | "
                         f"{r['io_floor_s']:.1f} s | {r['times_floor']:.2f}x | "
                         f"{r['peak_mb']:,.0f} MB | {r['output_bytes'] / 1e6:,.1f} MB |")
        if {"all", "scores"} <= set(pair):
            a, b = pair["all"], pair["scores"]
            ratios.append(f"- {method}, {n:,} pairs: scores / all: end to end "
                          f"{b['seconds'] / a['seconds']:.2f}, floor "
                          f"{b['io_floor_s'] / a['io_floor_s']:.2f}, peak RSS "
                          f"{b['peak_mb'] / a['peak_mb']:.2f}, output bytes "
                          f"{b['output_bytes'] / a['output_bytes']:.3f}")
    return "\n".join(lines + [""] + ratios) + "\n"


def read_log(path: Path) -> tuple[float, list[dict], str]:
    """The ceiling, rows and command a run printed (its stdout saved to ``path``)."""
    ceiling, rows, command = math.nan, [], "python benchmarks/speed.py"
    for line in path.read_text().splitlines():
        if line.startswith("fp32 matmul ceiling:"):
            ceiling = float(line.split(":")[1].split()[0])
        elif line.startswith("command:"):
            command = line.split(":", 1)[1].strip()
        elif line.startswith("{"):
            rows.append(json.loads(line))
    return ceiling, rows, command


def training_totals(sidecar: dict) -> dict:
    """Summed ``gflop``, ``step_seconds`` and steps of every training epoch the sidecar reports
    (the loop counts one step's operations per epoch with torch's FlopCounterMode)."""
    totals = {"gflop": 0.0, "seconds": 0.0, "steps": 0}

    def walk(value: object) -> None:
        if isinstance(value, dict):
            if "gflop" in value and "step_seconds" in value:
                totals["gflop"] += value["gflop"]
                totals["seconds"] += value["step_seconds"]
                totals["steps"] += value.get("timed_steps", value.get("steps", 0))
            else:
                for item in value.values():
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(sidecar.get("report", {}))
    return totals


def exponent(rows: list[dict], method: str) -> str:
    """The power-law exponent of time in N between the two largest sizes measured (of the
    ``--write all`` runs)."""
    points = sorted((r["n"], r["seconds"]) for r in rows
                    if r["method"] == method and r.get("write", "all") == "all"
                    and r.get("encoding", "dictionary") == "dictionary")
    if len(points) < 2:
        return "-"
    (n0, t0), (n1, t1) = points[-2], points[-1]
    return f"{math.log(t1 / t0) / math.log(n1 / n0):.2f} ({n0:,} -> {n1:,})"


def render(rows: list[dict], ceiling: float, command: str) -> str:
    cores = os.cpu_count()
    lines = [
        "# Speed and scale",
        "",
        "```",
        command.replace(" --record", ""),
        "```",
        "",
        f"Machine: {cores} cores ({platform.processor() or platform.machine()}), "
        f"fp32 matmul ceiling {ceiling:.0f} GFLOP/s (2048x2048, measured by the script). "
        "Corpora: 512-d float16 image and text embeddings, 20% noisy.",
        "",
        "| method | N | end to end | pyarrow floor | times the floor | phases | peak RSS | "
        "train GFLOP/s (share of ceiling) | AUROC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        train = r["train"]
        if train.get("gflop"):
            rate = train["gflop"] / train["seconds"]
            throughput = f"{rate:.0f} ({rate / ceiling:.0%})"
        else:
            throughput = "no training"
        phases = " / ".join(f"{k} {v:.1f}" for k, v in r["phases"].items() if k != "total")
        floor = r.get("io_floor_s")
        lines.append(
            f"| {r['method']}{' --write ' + r['write'] if r.get('write', 'all') != 'all' else ''}"
            f"{', ' + r['encoding'] + ' vectors' if 'encoding' in r else ''}"
            f" | {r['n']:,} | {r['seconds']:.1f} s | "
            + (f"{floor:.1f} s | {r['seconds'] / floor:.2f}x" if floor else "- | -")
            + f" | {phases} s | {r['peak_mb']:.0f} MB | {throughput} | {r['auroc']:.3f} |")
    lines += ["", "Growth of end-to-end time with N (power-law exponent):", ""]
    for method in dict.fromkeys(r["method"] for r in rows):
        lines.append(f"- {method}: {exponent(rows, method)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
