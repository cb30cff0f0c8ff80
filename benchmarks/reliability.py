"""Issue 60's bar: the 31 problems of the reliability audit at ``363cd14``
(``shared/reviews/reliability-2.md``), rerun with the audit's commands and judged against what
the README and the docs promise.

    python benchmarks/reliability.py [--work DIR] [--out benchmarks/results/reliability.md]
    python benchmarks/reliability.py --only 17 18 23     # some problems only (not written)

The inputs are rebuilt by ``reliability_inputs.py`` in the work folder (a temporary one by
default). Every command is the installed ``ncclean`` console script, run from the work folder
with ``OMP_NUM_THREADS=1`` and ``NCCLEAN_CACHE`` and ``TMPDIR`` inside it. Every case checks the
exit code (2: exactly one line ``ncclean: error: ...`` and no traceback; 0: no error line;
130/143: one line; 3: never, but for ``bug``, a method plugin whose fit raises), that every
input row comes out once in order (ids and captions compared; a repeated id marked
``invalid``), that the run left nothing behind (``.*.ncclean-*.tmp`` files,
``.ncclean-scratch-*`` or other hidden folders, empty folders, ``ncclean-*`` in ``$TMPDIR``),
and then its problem's own promise. A signal is sent when a stage is reached (a shard file
appears), and the sharded interrupts are tried three times: their races show in some tries.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # its siblings
from reliability_inputs import INVISIBLE, build, damage_fit, write_bug_plugin  # noqa: E402
from reliability_lab import (  # noqa: E402
    Job,
    Lab,
    Row,
    Run,
    auroc,
    complete,
    interrupt,
    invalid_where,
    line_says,
    render,
    says_what_it_kept,
)

VEC = ["--image-emb-col", "image_emb", "--text-emb-col", "text_emb"]
GMM = ["--method", "gmm", "-p", "warmup_epochs=1", "-p", "epochs=2"]
BIG = ["score", "in/bigshards", "-o", "OUT/", *VEC]  # OUT: each case's own folder
TRIES = 3  # of each sharded interrupt: its races show in some tries only
FITS = ["nowidths", "missingarray", "shortarray", "emptyjson", "methodgmm", "methodpc2"]


# ------------------------------------------------------------------------------ setup commands


def fit1(lab: Lab) -> None:
    """A clip fit on ``in/shards`` (ids 0..599), and its scored folder ``out/sh/``."""
    lab.once("fit1", ["score", "in/shards", "-o", "out/sh/", *VEC, "--save-fit", "fits/fit1"])


def gmm_fits(lab: Lab) -> None:
    """``fits/gmm`` (seed 0) and ``fits/gmm_s1`` (seed 1), gmm fits on ``in/shards``."""
    for seed in (0, 1):
        lab.once(f"gmm{seed}", ["score", "in/shards", "-o", f"out/g_sh{seed}/", *VEC, *GMM,
                                "--seed", str(seed), "--save-fit",
                                "fits/gmm" if seed == 0 else "fits/gmm_s1"])


def bad_fit(lab: Lab, name: str) -> str:
    """A copy of ``fits/fit1`` damaged as the audit damaged it (cases 126-132)."""
    fit1(lab)
    damage_fit(lab.work / "fits" / "fit1", lab.work / "fits" / name, name)
    return f"fits/{name}"


def big_reference(lab: Lab) -> str:
    """An uninterrupted run over ``in/bigshards``, the bytes every interrupted one must give."""
    lab.once("bigref", _big("out/bs_ref/"))
    return "out/bs_ref/"


def _big(out: str, *more: str) -> list[str]:
    return [w.replace("OUT/", out) for w in BIG] + list(more)


# ------------------------------------------------------------------------- the 31 problems


def p01(lab: Lab) -> list[Row]:
    """Two shards whose names once mapped to one output."""
    return [lab.case(1, "100", ["score", "in/collide", "-o", "out/collide/", *VEC],
                     rows=("out/collide/", "in/collide"))]


def p02(lab: Lab) -> list[Row]:
    """A saved fit applied to another corpus with the same ids scores by content."""
    fit1(lab)
    out = "out/vec300_fit1.parquet"

    def check(run: Run) -> list[str]:
        table = pq.read_table(lab.work / out, columns=["clean_prob", "noisy_gt"]).to_pandas()
        table = table[table.clean_prob.notna()]
        value = auroc(table.clean_prob.to_numpy(), table.noisy_gt.to_numpy(bool))
        lab.notes.append(f"AUROC {value:.3f}")
        return [] if value >= 0.9 else [f"AUROC of clean_prob against noisy_gt {value:.3f} < 0.9"]
    return [lab.case(2, "117", ["score", "in/vec300.parquet", "-o", out, *VEC, "--fit",
                                "fits/fit1"], rows=(out, "in/vec300.parquet"), check=check)]


def p03(lab: Lab) -> list[Row]:
    """The same id in two Parquet shards: the later rows invalid."""
    return [lab.case(3, "101", ["score", "in/dupshards", "-o", "out/dupshards/", *VEC],
                     rows=("out/dupshards/", "in/dupshards"))]


def p04(lab: Lab) -> list[Row]:
    """The same keys in two tars."""
    return [lab.case(4, "182", ["score", "in/wds_duptars", "-o", "out/wds_duptars/", *VEC],
                     rows=("out/wds_duptars/", "wds_duptars"))]


def p05(lab: Lab) -> list[Row]:
    """Samples sharing a key within a tar: a row each."""
    return [lab.case(5, case, ["score", f"in/{name}", "-o", f"out/{name}/", *VEC],
                     rows=(f"out/{name}/", name))
            for case, name in (("180", "wds_dupkey"), ("181", "wds_dupdir"))]


def p06(lab: Lab) -> list[Row]:
    """A truncated tar is refused, naming it."""
    return [lab.case(6, case, ["score", f"in/{name}", "-o", f"out/{name}/", *VEC], rc=2,
                     check=line_says("00001.tar"))
            for case, name in (("177", "wds_trunc"), ("178", "wds_trunc_boundary"))]


def p07(lab: Lab) -> list[Row]:
    """A malformed KEY.json member: bad input, not a bug."""
    return [lab.case(7, "183", ["score", "in/wds_badjson", "-o", "out/wds_badjson/", *VEC],
                     rc=2, check=line_says("00000.tar", "000040.json"))]


def p08(lab: Lab) -> list[Row]:
    """An empty tar: the line names it, not a temp file."""
    return [lab.case(8, "185", ["score", "in/wds_empty", "-o", "out/wds_empty/", *VEC], rc=2,
                     check=line_says("wds_empty", absent=("ncclean-", "sample.parquet")))]


def p09(lab: Lab) -> list[Row]:
    """-o a folder with image columns, no vectors given: no line blames --fit options. Since
    a sharded run embeds pictures itself, these runs score: exit 0, every row once."""
    blame = line_says(absent=("--fit", "--save-fit", "--fit-sample"))
    return [lab.case(9, "59", ["score", "in/base.parquet", "-o", "out"], check=blame),
            lab.case(9, "108", ["score", "in/img_shards", "-o", "out/img_sh/"],
                     rows=("out/img_sh/", "in/img_shards"), check=blame),
            lab.case(9, "184", ["score", "in/wds_novec", "-o", "out/wds_novec/"],
                     rows=("out/wds_novec/", "in/wds_novec"), check=blame)]


def p10(lab: Lab) -> list[Row]:
    """Inspect reads a webdataset folder."""
    return [lab.case(10, "187", ["inspect", "in/wds_nocap"])]


def p11(lab: Lab) -> list[Row]:
    """-o inside the input folder is refused before any work."""
    return [lab.case(11, "99", ["score", "in/shards_copy", "-o", "in/shards_copy/scored/", *VEC],
                     rc=2)]


def p12(lab: Lab) -> list[Row]:
    """A damaged fit: exit 2 naming it, no output folder."""
    rows = []
    for case, name in zip(["126", "127", "128", "130", "131", "132"], FITS):
        fit = bad_fit(lab, name)
        rows.append(lab.case(12, case, ["score", "in/shards_other", "-o", f"out/fd_{name}/",
                                        *VEC, "--fit", fit], rc=2, check=line_says(fit)))
    return rows


def p13(lab: Lab) -> list[Row]:
    """A gmm fit without matcher.safetensors."""
    gmm_fits(lab)
    shutil.copytree(lab.work / "fits/gmm", lab.work / "fits/gmm_no_matcher")
    (lab.work / "fits/gmm_no_matcher/matcher.safetensors").unlink()
    return [lab.case(13, "139", ["score", "in/shards_other", "-o", "out/gmm_no_matcher/", *VEC,
                                 "--fit", "fits/gmm_no_matcher"], rc=2,
                     check=line_says("fits/gmm_no_matcher"))]


def p14(lab: Lab) -> list[Row]:
    """A fit whose matcher was swapped redoes the shards."""
    gmm_fits(lab)
    shutil.copytree(lab.work / "fits/gmm", lab.work / "fits/gmm_swapped")
    shutil.copy(lab.work / "fits/gmm_s1/matcher.safetensors", lab.work / "fits/gmm_swapped")
    apply = ["score", "in/shards_other", "-o", "out/g_res2/", *VEC, "--fit"]
    lab.once("g_res2", apply + ["fits/gmm"])
    lab.once("g_fresh", ["score", "in/shards_other", "-o", "out/g_fresh/", *VEC, "--fit",
                         "fits/gmm_swapped"])
    shutil.copytree(lab.work / "out/g_res2", lab.work / "out/g_first")

    def redone(run: Run) -> list[str]:
        if not lab.same_bytes("out/g_first/", "out/g_fresh/"):
            return ["the swapped matcher writes the same shards: the case proves nothing"]
        return lab.same_bytes("out/g_res2/", "out/g_fresh/")
    return [lab.case(14, "141", apply + ["fits/gmm_swapped"],
                     rows=("out/g_res2/", "in/shards_other"), check=redone)]


def p15(lab: Lab) -> list[Row]:
    """Options given with --fit that differ from the fit's are refused."""
    fit1(lab)
    apply = ["score", "in/shards_other", "-o", "OUT", *VEC, "--fit", "fits/fit1"]
    cases = [("119", "out/fc/", ["--method", "gmm"], 2),
             ("120", "out/fc2/", ["--seed", "7", "--clean-above", "0.95", "-p", "align=none"], 2),
             ("120 (the fit's own values)", "out/fc3/", ["--method", "clip", "--seed", "0"], 0)]
    return [lab.case(15, case, [w.replace("OUT", out) for w in apply] + more, rc=rc,
                     rows=(out, "in/shards_other"))
            for case, out, more, rc in cases]


def p16(lab: Lab) -> list[Row]:
    """--engine ray with bad input: exit 2, a short line, no folder left."""
    fit1(lab)

    def short(run: Run) -> list[str]:
        line = (run.errors or [""])[0]
        return [f"the line is {len(line)} characters long"] if len(line) > 300 \
            or "RayTaskError" in line else []
    return [lab.case(16, "163", ["score", "in/d48dir", "-o", "out/ray_bad/", *VEC, "--fit",
                                 "fits/fit1", "--engine", "ray"], rc=2, check=short)]


def p17(lab: Lab) -> list[Row]:
    """--resume on a sharded rerun does not say it starts from scratch."""
    ref, out = big_reference(lab), "out/bs_k/"

    def silent(run: Run) -> list[str]:
        return ["the --resume rerun warns 'starting from scratch'"] \
            if "starting from scratch" in run.stderr else []
    return [interrupt(lab, 17, "165", _big(out), signal.SIGKILL, lambda: complete(lab, out),
                      stage="after s0.parquet is written", rerun=_big(out, "--resume"),
                      out=out, reference=ref, after_rerun=silent, tries=TRIES, made=out,
                      source="in/bigshards")]


def p18(lab: Lab) -> list[Row]:
    """An interrupted sharded run says which shards it kept; the rerun finishes."""
    ref, rows = big_reference(lab), []
    for case, sig, out in (("166", signal.SIGINT, "out/bs_int/"),
                           ("167", signal.SIGTERM, "out/bs_term/")):
        rows.append(interrupt(lab, 18, case, _big(out), sig, lambda o=out: complete(lab, o),
                              stage="after s0.parquet is written",
                              after=says_what_it_kept(lab, out), rerun=_big(out), out=out,
                              reference=ref, tries=TRIES, made=out, source="in/bigshards"))
    return rows


def p19(lab: Lab) -> list[Row]:
    """Interrupted in a new folder: no empty folder left."""
    rows = []
    for case, sig, out in (("174", signal.SIGTERM, "knew2/sub/"),
                           ("175", signal.SIGINT, "knew3/sub/")):
        folder = lab.work / out
        rows.append(interrupt(lab, 19, case, _big(out), sig,
                              lambda f=folder: any(f.glob(".s0.parquet.ncclean-*.tmp")),
                              delay=0.01, stage="10 ms after s0.parquet starts being written",
                              after=says_what_it_kept(lab, out), tries=TRIES,
                              made=out.split("/")[0]))
    return rows


def p20(lab: Lab) -> list[Row]:
    """Kill -9 leaves nothing in $TMPDIR; the rerun removes its scratch folder."""
    ref, out = big_reference(lab), "out/bs_k9/"
    before = {p.name for p in lab.tmp.glob("ncclean-*")}

    def no_tmp(run: Run) -> list[str]:
        new = sorted({p.name for p in lab.tmp.glob("ncclean-*")} - before)
        return [f"kill -9 left {', '.join(new)} in $TMPDIR"] if new else []
    return [interrupt(lab, 20, "164, 171", _big(out), signal.SIGKILL,
                      lambda: complete(lab, out), stage="after s0.parquet is written",
                      after=no_tmp, rerun=_big(out), out=out, reference=ref, tries=TRIES,
                      made=out, source="in/bigshards")]


def _embed(out: str) -> list[str]:
    return ["embed", "in/captions_odd.parquet", "-o", out, "--encoder", "e5", "--layout",
            "clip-retrieval"]


def embed_delay(lab: Lab) -> float:
    """An uninterrupted ``embed`` into ``kcr_ref/emb``; half the time it runs after its
    folder appears (when a signal lands in the encoding)."""
    if "embed" not in lab.measured:
        job = Job(lab, _embed("kcr_ref/emb"))
        job.wait_for(lambda: (lab.work / "kcr_ref").is_dir())
        appeared = time.monotonic() - job.start
        run = job.finish()
        if run.rc != 0:
            raise RuntimeError(f"setup embed: exit {run.rc}: {run.stderr[-500:]}")
        lab.measured["embed"] = (run.seconds - appeared) / 2
    return lab.measured["embed"]


def p21(lab: Lab) -> list[Row]:
    """Embed --layout clip-retrieval interrupted: no folder left."""
    delay = embed_delay(lab)
    return [interrupt(lab, 21, case, _embed("kcr/emb"), sig, (lab.work / "kcr").is_dir,
                      delay=delay, stage=f"{delay:.1f} s after kcr/ appears")
            for case, sig in (("88", signal.SIGINT), ("90", signal.SIGTERM))]


def p22(lab: Lab) -> list[Row]:
    """Embed --layout clip-retrieval killed: the rerun removes the killed run's folder."""
    delay = embed_delay(lab)
    return [interrupt(lab, 22, "92", _embed("kcr9/emb"), signal.SIGKILL,
                      (lab.work / "kcr9").is_dir, delay=delay,
                      stage=f"{delay:.1f} s after kcr9/ appears", rerun=_embed("kcr9/emb"),
                      out="kcr9/emb", reference="kcr_ref/emb")]


def p23(lab: Lab) -> list[Row]:
    """Two sharded runs into one folder: 0 and 0, or 0 and 2; every row once."""
    before = lab.snapshot()
    jobs = [Job(lab, _big("conc/sh/", "--seed", seed)) for seed in ("1", "2")]
    runs = [job.finish() for job in jobs]
    failures = [] if sorted(r.rc for r in runs) in ([0, 0], [0, 2]) else \
        [f"exits {runs[0].rc} and {runs[1].rc}"]
    for run in runs:
        failures += [f"{p} (seed {run.args[-1]})" for p in run.stream_problems(run.rc)]
    failures += lab.rows_problems("conc/sh/", "in/bigshards") + lab.leftovers(before)
    return [lab.row(23, "271", *runs, failures=failures, command=(
        f"ncclean {shlex.join(runs[0].args)} & (the same with --seed 2)"))]


def p24(lab: Lab) -> list[Row]:
    """A read-only output or --save-fit folder is refused before the fit."""
    ro = lab.work / "rodir2"
    (ro / "existing").mkdir(parents=True)
    gmm3 = ["--method", "gmm", "-p", "warmup_epochs=1", "-p", "epochs=3"]
    # the time to find another problem of the output before any work: a file in the way
    other = lab.run(_big("out/afile/", *gmm3))
    limit = other.seconds + 1.0

    def quick(run: Run) -> list[str]:
        if other.rc != 2:
            return [f"the run to compare with, into a file, exited {other.rc}"]
        lab.notes.append(f"refused in {run.seconds:.1f} s; a file in the way of -o: "
                         f"{other.seconds:.1f} s")
        return [] if run.seconds <= limit else [
            f"refused after {run.seconds:.1f} s, {run.seconds - other.seconds:.1f} s later than "
            "a file in the way of -o: after the fit"]
    cases = [("276", _big("rodir2/existing/", *gmm3)),
             ("272", ["score", "in/shards", "-o", "rodir2/sh/", *VEC]),
             ("274", ["score", "in/shards", "-o", "out/ro_fit_sh/", *VEC, "--save-fit",
                      "rodir2/fit"]),
             ("275", ["score", "in/shards", "-o", "out/ro_fit_sh2/", *VEC, *GMM, "--save-fit",
                      "rodir2/existing"])]
    subprocess.run(["chattr", "+i", ro / "existing", ro], check=True)
    try:
        return [lab.case(24, case, args, rc=2, check=quick) for case, args in cases]
    finally:
        subprocess.run(["chattr", "-i", ro / "existing", ro], check=True)


def p25(lab: Lab) -> list[Row]:
    """-o DIR/ where DIR is a file."""
    return [lab.case(25, "112", ["score", "in/shards", "-o", "out/afile/", *VEC], rc=2)]


def p26(lab: Lab) -> list[Row]:
    """A 0-byte shard, shards of other widths: exit 2 naming the shard."""
    return [lab.case(26, case, ["score", f"in/{name}", "-o", f"out/{name}/", *VEC], rc=2,
                     check=line_says(f"in/{name}/b.parquet"))
            for case, name in (("103", "odd_zero_bytes"), ("105", "odd_widths_differ"))]


def p27(lab: Lab) -> list[Row]:
    """The default pipeline on 2, 3, 4 rows."""
    rows = [lab.case(27, case, ["score", f"in/rows{n}.parquet", "-o", f"out/im_rows{n}.parquet"],
                     rows=(f"out/im_rows{n}.parquet", f"in/rows{n}.parquet"))
            for case, n in (("218", 2), ("225", 3), ("226", 4))]
    return rows + [lab.case(27, "228", ["score", "in/rows4.parquet", "-o",
                                        "out/r4clip_px.parquet", "--method", "clip"],
                            rows=("out/r4clip_px.parquet", "in/rows4.parquet"))]


def p28(lab: Lab) -> list[Row]:
    """Captions with no visible character are invalid."""
    out, odd = "out/emb_invisible.parquet", "out/im_captions_odd.parquet"
    return [lab.case(28, "229", ["score", "in/emb_invisible.parquet", "-o", out, *VEC],
                     rows=(out, "in/emb_invisible.parquet"),
                     check=lambda run: invalid_where(lab, out, list(range(len(INVISIBLE))))),
            lab.case(28, "213", ["score", "in/captions_odd.parquet", "-o", odd],
                     rows=(odd, "in/captions_odd.parquet"),
                     check=lambda run: invalid_where(lab, odd, [0, 1, 2, 8, 9]))]


def p29(lab: Lab) -> list[Row]:
    """Retrain on a sharded output folder naming its vector columns."""
    fit1(lab)
    return [lab.case(29, "269", ["retrain", "out/sh", *VEC, "--steps", "20"])]


def p30(lab: Lab) -> list[Row]:
    """Check and split refuse an interrupted sharded folder."""
    job = Job(lab, _big("out/partial/"))
    job.wait_for(lambda: complete(lab, "out/partial/"))
    job.proc.send_signal(signal.SIGINT)
    job.finish()
    return [lab.case(30, "114", ["check", "out/partial"], rc=2),
            lab.case(30, "115", ["split", "out/partial", "-o", "out/partial_split"], rc=2)]


def p31(lab: Lab) -> list[Row]:
    """--debug keeps exit codes 2 and 3 and adds the traceback."""
    nope = ["score", "in/nope.parquet", "-o", "out/x.parquet"]
    bug = ["score", "in/vec300.parquet", "-o", "out/bug.parquet", *VEC, "--method", "bug"]
    plugin = {"PYTHONPATH": "plugin"}  # the method 'bug', whose fit raises
    return [lab.case(31, "79", [*nope, "--debug"], rc=2, debug=True),
            lab.case(31, "281", ["--debug", *nope], rc=2, debug=True),
            lab.case(31, "282", ["--debug", "score", "in/shards", "-o", "out/afile/", *VEC],
                     rc=2, debug=True),
            lab.case(31, "a planted bug", ["--debug", *bug], rc=3, env=plugin, debug=True),
            lab.case(31, "a planted bug, no --debug", bug, rc=3, env=plugin)]


PROBLEMS = [p01, p02, p03, p04, p05, p06, p07, p08, p09, p10, p11, p12, p13, p14, p15, p16,
            p17, p18, p19, p20, p21, p22, p23, p24, p25, p26, p27, p28, p29, p30, p31]


def prepare(work: Path) -> None:
    """An empty work folder: refuse a non-empty one this script did not make."""
    marker = work / ".reliability-work"
    if work.exists() and any(work.iterdir()):
        if not marker.exists():
            raise SystemExit(f"{work} is not empty and not a work folder of this script")
        if (work / "rodir2").exists():  # a run stopped while it was read-only
            subprocess.run(["chattr", "-i", work / "rodir2", work / "rodir2" / "existing"])
        shutil.rmtree(work)
    (work / "tmp").mkdir(parents=True)
    marker.touch()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path,
                        help="scratch folder, kept (default: a temporary one, removed)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "reliability.md")
    parser.add_argument("--only", type=int, nargs="+", help="these problems; nothing written")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="ncrel-"))).resolve()
    prepare(work)
    lab = Lab(work)
    lab.expected = build(work, lambda path: lab.once("synth", [
        "synth", "-o", str(path.relative_to(work)), "--n-images", "20"]))
    write_bug_plugin(work / "plugin")
    rows: list[Row] = []
    for number in args.only or range(1, 32):
        try:
            found = PROBLEMS[number - 1](lab)
        except Exception as error:  # the script's own failure, reported as such
            found = [Row(number, "—", "—", "—", "—", 0.0, [f"the script failed: {error!r}"])]
        for row in found:
            print(f"{row.problem:>2} {row.case:<8} rc {row.rc:<6} {row.seconds:5.1f} s  "
                  f"{row.verdict[:150]}", file=sys.stderr, flush=True)
        rows += found
    page = render(rows, "python " + shlex.join(["benchmarks/reliability.py", *sys.argv[1:]]))
    print(page)
    if not args.only:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(page)
    if args.work:
        print(f"work folder: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work)  # about 1.5 GB, mostly shards


if __name__ == "__main__":
    main()
