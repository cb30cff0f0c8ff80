"""The machinery of ``benchmarks/reliability.py``: running the ``ncclean`` console script (to the
end, or until a stage and a signal), the checks every case shares, and the results page.
"""

from __future__ import annotations

import datetime
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import rankdata

HERE = Path(__file__).resolve().parent
PID = re.compile(r"ncclean-(scratch-)?\d+-\w+")  # a temp name's process id and random part


@dataclass
class Run:
    """One finished command: its words, exit code, stderr and wall time."""

    args: list[str]
    rc: int
    stderr: str
    seconds: float

    @property
    def errors(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("ncclean: error: ")]

    def stream_problems(self, expected: int, debug: bool = False) -> list[str]:
        """What the exit code and stderr break of the README's exit-code contract."""
        found = [] if self.rc == expected else [f"exit {self.rc}, expected {expected}"]
        if self.rc == -signal.SIGKILL:
            return found
        traceback = "Traceback (most recent call last)" in self.stderr
        if debug:
            lines = self.stderr.strip().splitlines()
            if not traceback:
                found.append("--debug printed no traceback")
            if not lines or not lines[-1].startswith("ncclean: error: "):
                found.append("--debug: the last line is not the error line")
            return found
        if traceback:
            found.append("a traceback on stderr")
        if self.rc == 0 and self.errors:
            found.append("an error line on success")
        if self.rc != 0 and len(self.errors) != 1:
            found.append(f"{len(self.errors)} lines 'ncclean: error:', expected one")
        return found


@dataclass
class Row:
    """One line of the results table."""

    problem: int
    case: str
    command: str
    rc: str
    stderr: str
    seconds: float
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.failures:
            return "FAILS: " + "; ".join(self.failures)
        return "holds" + (f" ({'; '.join(self.notes)})" if self.notes else "")


class Job:
    """A running ``ncclean`` command, to signal or wait for."""

    def __init__(self, lab: Lab, args: list[str], env: dict[str, str] | None = None):
        self.args = args
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by finish)
        self.start = time.monotonic()
        self.proc = subprocess.Popen([lab.ncclean, *args], cwd=lab.work,
                                     env={**lab.env, **(env or {})},
                                     stdout=subprocess.DEVNULL, stderr=self.err)

    def wait_for(self, reached, limit: float = 300.0) -> bool:
        """Poll ``reached()`` every 5 ms while the command runs; whether it came true."""
        while self.proc.poll() is None and time.monotonic() - self.start < limit:
            if reached():
                return True
            time.sleep(0.005)
        return False

    def finish(self) -> Run:
        rc = self.proc.wait(timeout=900)
        seconds = time.monotonic() - self.start
        self.err.seek(0)
        with self.err:
            return Run(self.args, rc, self.err.read().decode(errors="replace"), seconds)


class Lab:
    """The work folder, the environment of every command, and the checks shared by cases."""

    def __init__(self, work: Path):
        self.work, self.tmp = work, work / "tmp"
        self.ncclean = str(Path(sys.executable).with_name("ncclean"))
        if not Path(self.ncclean).exists():
            self.ncclean = shutil.which("ncclean") or "ncclean"
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(self.tmp),
                    "NCCLEAN_CACHE": str(work / "cache")}
        self.env.pop("NCCLEAN_TOWERS", None)
        self.expected: dict[str, dict[str, list]] = {}
        self.made: dict[str, Run] = {}  # the setup commands run so far
        self.measured: dict[str, float] = {}  # what a setup measured (an embed's stage time)
        self.notes: list[str] = []  # what a check measured, for the next row's verdict

    def run(self, args: list[str], env: dict[str, str] | None = None) -> Run:
        return Job(self, args, env).finish()

    def once(self, name: str, args: list[str]) -> Run:
        """A setup command, run once (a fit, a reference output); it must succeed."""
        if name not in self.made:
            self.made[name] = run = self.run(args)
            if run.rc != 0:
                raise RuntimeError(f"setup {shlex.join(args)}: exit {run.rc}: {run.stderr[-500:]}")
        return self.made[name]

    def snapshot(self) -> set[str]:
        """Every path under the work folder but the cache and ``$TMPDIR`` (folders end in /),
        and the ``ncclean-*`` entries of ``$TMPDIR``."""
        paths = {f"tmp/{p.name}" for p in self.tmp.glob("ncclean-*")}
        for folder, dirs, files in os.walk(self.work):
            here = Path(folder).relative_to(self.work)
            if here.parts[:1] in (("cache",), ("tmp",)):
                dirs.clear()
                continue
            paths.update(f"{here / d}/" for d in dirs)
            paths.update(str(here / f) for f in files)
        return paths

    def leftovers(self, before: set[str]) -> list[str]:
        """What the commands since ``before`` left that they should not have."""
        new = sorted(self.snapshot() - before)
        bad = [p for p in new if p.startswith("tmp/")
               or any(part.startswith(".") and part != ".ncclean" for part in Path(p).parts)]
        bad += [p for p in new if p.endswith("/") and p not in bad
                and not any(f.is_file() for f in (self.work / p).rglob("*"))]
        if not bad:
            return []
        shown = ", ".join(b for b in bad if not any(b != o and b.startswith(o) for o in bad))
        return [f"left {shown}"]

    def case(self, problem: int, case: str, args: list[str], rc: int = 0, rows=None,
             check=None, env=None, debug: bool = False) -> Row:
        """Run ``args`` once and judge it: the exit-code contract, ``rows`` ((output, input)
        or (output, tar folder name)) once each, nothing left behind, then ``check(run)``."""
        before = self.snapshot()
        run = self.run(args, env)
        failures = run.stream_problems(rc, debug)
        if rows and run.rc == 0:
            failures += self.rows_problems(*rows)
        failures += self.leftovers(before)
        if check:
            failures += check(run)
        shown = " ".join(f"{k}={v}" for k, v in (env or {}).items())
        return self.row(problem, case, run, failures=failures,
                        command=" ".join(filter(None, [shown, "ncclean", shlex.join(args)])))

    def row(self, problem: int, case: str, *runs: Run, failures=(), command=None) -> Row:
        row = Row(problem, case, command or shlex.join(["ncclean", *runs[0].args]),
                  "/".join(str(r.rc) for r in runs), _first_line(runs),
                  sum(r.seconds for r in runs), list(failures), self.notes)
        self.notes = []
        return row

    def shards(self, source: str) -> dict[str, list]:
        """The ``(id, caption)`` rows an input should give, by output shard name (``""`` for
        one file)."""
        if source in self.expected:
            return {name: [tuple(r) for r in rows] for name, rows in self.expected[source].items()}
        path = self.work / source
        if path.is_file():
            return {"": _pairs(path)}
        return {str(p.relative_to(path).with_suffix(".parquet")): _pairs(p)
                for p in sorted(path.rglob("*.parquet"))}

    def rows_problems(self, out: str, source: str) -> list[str]:
        """Every input row once in the output, in order, and a repeated id ``invalid``."""
        found, seen, repeated = [], set(), 0
        for name, want in self.shards(source).items():
            path = self.work / out / name
            if not path.is_file():
                found.append(f"no output {out.rstrip('/')}/{name}")
                continue
            table = pq.read_table(path, columns=["id", "caption", "partition"]).to_pydict()
            got = list(zip(table["id"], table["caption"]))
            if got != want:
                lost = len(set(want) - set(got))
                found.append(f"{path.relative_to(self.work)}: {len(got)} rows for {len(want)}"
                             f" ({lost} input rows missing)")
            for key, partition in zip(table["id"], table["partition"]):
                repeated += key in seen and partition != "invalid"
                seen.add(key)
        if repeated:
            found.append(f"{repeated} rows with a repeated id not marked invalid")
        return found

    def same_bytes(self, out: str, reference: str) -> list[str]:
        """The output files (``.parquet``, ``.npy``; not the records, which hold timings) of
        ``out`` equal those of ``reference``, an uninterrupted or fresh run's."""
        def files(folder: Path) -> dict[str, bytes]:
            return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
                    if p.is_file() and p.suffix in (".parquet", ".npy")
                    and not any(part.startswith(".") for part in p.relative_to(folder).parts)}
        got, want = files(self.work / out), files(self.work / reference)
        if got == want:
            return []
        differ = sorted(n for n in set(got) | set(want) if got.get(n) != want.get(n))
        return [f"{out} is not byte for byte {reference} ({', '.join(differ)} differ)"]


def _first_line(runs) -> str:
    """The first stderr line worth showing: the first error line, else the first line."""
    lines = [line for r in runs for line in r.stderr.strip().splitlines()]
    errors = [line for line in lines if line.startswith("ncclean: error: ")]
    return (errors or lines or ["—"])[0]


def _pairs(path: Path) -> list[tuple]:
    table = pq.read_table(path, columns=["id", "caption"]).to_pydict()
    return list(zip(table["id"], table["caption"]))


def auroc(clean_prob: np.ndarray, noisy: np.ndarray) -> float:
    """The probability that a clean pair scores above a noisy one (ties count half)."""
    ranks = rankdata(clean_prob)
    clean = ~noisy
    return float((ranks[clean].sum() - clean.sum() * (clean.sum() + 1) / 2)
                 / (clean.sum() * noisy.sum()))


def invalid_where(lab: Lab, out: str, rows: list[int]) -> list[str]:
    """The rows ``rows`` of the output are ``invalid``."""
    path = lab.work / out
    if not path.is_file():
        return []
    partition = pq.read_table(path, columns=["partition"]).column(0).to_pylist()
    scored = [r for r in rows if partition[r] != "invalid"]
    return [f"rows {scored} scored {sorted({partition[r] for r in scored})}, not invalid"] \
        if scored else []


def line_says(*words: str, absent: tuple[str, ...] = ()):
    """A check: the error line holds every word of ``words`` and none of ``absent``."""
    def check(run: Run) -> list[str]:
        line = run.errors[0] if run.errors else ""
        missing = [w for w in words if w not in line] + [w for w in absent if w in line]
        return [f"the line {'lacks' if w in words else 'says'} {w!r}" for w in missing]
    return check


def complete(lab: Lab, out: str) -> list[str]:
    folder = lab.work / out
    return sorted(p.name for p in folder.glob("*.parquet") if not p.name.startswith(".")) \
        if folder.is_dir() else []


def says_what_it_kept(lab: Lab, out: str):
    """A check: the interrupt's line counts the complete shards that stay (problem 18)."""
    def check(run: Run) -> list[str]:
        kept, line = complete(lab, out), (run.errors or [""])[0]
        if kept and f"kept {len(kept)} of 4" not in line:
            return [f"{len(kept)} complete shards stay, but the line says {line!r}"]
        return [] if kept or "wrote nothing" in line else [f"nothing kept, but {line!r}"]
    return check


def interrupt(lab: Lab, problem: int, case: str, args: list[str], sig: int, reached,
              stage: str, delay: float = 0.0, after=None, rerun=None, out: str = "",
              reference: str = "", after_rerun=None, tries: int = 1, made: str = "",
              source: str = "") -> Row:
    """Start ``args``, wait for ``reached()``, sleep ``delay``, send ``sig``; judge the run,
    then ``after(run)``. With ``rerun``: run it, judge it with ``after_rerun``, compare ``out``
    with ``reference`` byte for byte and its rows with ``source``'s. ``tries`` times, removing
    ``made`` (the top folder the command makes) between tries, since a race shows in some
    tries only; the row shows the first failing try and every failure seen, with the number of
    tries it was seen in."""
    name = signal.Signals(sig).name.replace("SIGKILL", "kill -9")
    command = f"ncclean {shlex.join(args)} ; {name} {stage}"
    if rerun:
        command += " ; " + ("same again" if rerun == args else shlex.join(rerun))
    shown, seen = None, {}
    for attempt in range(tries):
        if attempt:  # the next try starts where the first did
            assert made, "tries need the folder to remove between them"
            shutil.rmtree(lab.work / made, ignore_errors=True)
        before = lab.snapshot()
        job = Job(lab, args)
        failures = [] if job.wait_for(reached) else [f"ended before {stage}: no signal sent"]
        time.sleep(delay)
        job.proc.send_signal(sig)
        runs = [job.finish()]
        failures += runs[0].stream_problems({signal.SIGINT: 130, signal.SIGTERM: 143}.get(sig, -9))
        failures += after(runs[0]) if after else []
        if sig != signal.SIGKILL:
            failures += lab.leftovers(before)
        if rerun:
            runs.append(lab.run(rerun))
            failures += runs[1].stream_problems(0) + lab.same_bytes(out, reference)
            failures += lab.rows_problems(out, source) if source else []
            failures += (after_rerun(runs[1]) if after_rerun else []) + lab.leftovers(before)
        for failure in dict.fromkeys(PID.sub(r"ncclean-\1<pid>-<random>", f) for f in failures):
            seen[failure] = seen.get(failure, 0) + 1
        if shown is None or (failures and not shown.failures):
            shown = lab.row(problem, case, *runs, failures=failures, command=command)
    shown.failures = [f"{f} (in {k} of {tries} tries)" if tries > 1 else f
                      for f, k in seen.items()]
    if tries > 1 and not seen:
        shown.notes.append(f"{tries} tries")
    return shown


# ------------------------------------------------------------------------------------- report


def cell(text: str, width: int = 0) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text[:width - 1] + "…" if width and len(text) > width else text


def render(rows: list[Row], command: str) -> str:
    """The results page: what it is, how it was made, the counts, one row per case."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "ncclean"], cwd=HERE.parent,
                           capture_output=True, text=True).stdout.strip()
    failed = sorted({r.problem for r in rows if r.failures})
    lines = [
        "# Reliability: the 31 problems of issue 60, rerun", "",
        "The 31 distinct problems of the reliability audit at `363cd14` "
        "(`shared/reviews/reliability-2.md`), each rerun with the audit's commands (paths "
        "relative to a scratch folder) through the installed `ncclean`, and judged against what "
        "the README and the docs promise: the exit code (2 with one `ncclean: error:` line and no"
        " traceback, 0, 130/143 with one line, 3 never but for a planted bug), every input row "
        "once, nothing left behind, and the problem's own promise. Inputs as the audit built "
        "them (`benchmarks/reliability_inputs.py`). A signal is sent when its stage is reached "
        "(a shard file appears); each sharded interrupt is tried three times, since its races "
        "show in some tries only.", "",
        "Columns: **#** the problem in the audit's table of failures; **case** the audit's row; "
        "**rc** exit code (`a/b`: the signalled run / its rerun, or two runs at once; -9: "
        "kill -9); **s** seconds, every run of the case together; **verdict** `holds`, or "
        "`FAILS` and why.", "",
        f"Made by `{command}` at `{commit}`"
        + (" (with uncommitted changes under `ncclean/`)" if dirty else "")
        + f", {datetime.date.today().isoformat()}, {os.cpu_count()} CPU cores, "
        "`OMP_NUM_THREADS=1`.", "",
        f"**{len(rows)} cases: {sum(not r.failures for r in rows)} held, "
        f"{sum(bool(r.failures) for r in rows)} failed**"
        + (f" (problems {', '.join(map(str, failed))})." if failed else "."), "",
        "| # | case | command | rc | stderr, first line | s | verdict |",
        "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.problem} | {cell(r.case)} | `{cell(r.command)}` | {r.rc} | "
              f"{cell(r.stderr, 160)} | {r.seconds:.1f} | {cell(r.verdict)} |" for r in rows]
    return "\n".join(lines) + "\n"
