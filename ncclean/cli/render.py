"""Everything the command line shows: error lines, progress bars, summaries, JSON."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator

from ncclean.progress import Progress, no_progress


def one_line(message: object) -> str:
    """``message`` on one line: line breaks (and the spaces around them) become one space;
    spaces inside, as in a path, stay."""
    import re

    return re.sub(r"\s*[\r\n]+\s*", " ", str(message).strip())

def error_line(message: str) -> None:
    """``ncclean: error: <message>`` on stderr, folded onto one line."""
    sys.stderr.write("ncclean: error: " + one_line(message) + "\n")


def warning_line(message: str) -> None:
    """``ncclean: warning: <message>`` on stderr, one line."""
    sys.stderr.write("ncclean: warning: " + one_line(message) + "\n")


def escape(text: str) -> str:
    """``text`` printed as it is by a rich console: a ``[word]`` in it is not markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def print_json(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def console():
    """A rich console on stdout; 120 columns wide when stdout is not a terminal and COLUMNS is
    not set (rich's default of 80 squeezes the tables)."""
    import os

    from rich.console import Console

    wide = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
    return Console(highlight=False, soft_wrap=True, width=wide)


@contextlib.contextmanager
def progress_bars(enabled: bool = True) -> Iterator[Progress]:
    """A :data:`Progress` callback drawing one rich bar on stderr for the whole run: the stage
    under way, its done of total, the run's time so far and the stage's time left (transient:
    the bar vanishes when the work is done). Off a terminal (a log, a CI job) a line every few
    seconds instead (:func:`progress_lines`)."""
    if not enabled:
        yield no_progress
        return
    if not sys.stderr.isatty():
        yield progress_lines()
        return
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
    from rich.progress import Progress as RichProgress

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[times]}"), TextColumn("{task.fields[note]}"))
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as bars:
        task = bars.add_task("starting", total=None, times="", note="")
        clock = OverallClock(time.monotonic)

        def update(stage: str, done: int, total: int, note: str = "") -> None:
            bars.update(task, description=stage, completed=done, total=total or None,
                        times=clock.times(stage, done, total), note=note)

        yield update


class OverallClock:
    """The times the run's one bar shows: elapsed since the first stage began, and the current
    stage's time left at its rate so far (``?`` until it has one)."""

    def __init__(self, clock):
        self.clock = clock
        self.began = clock()
        self.stage: tuple[str, float, int] | None = None

    def times(self, stage: str, done: int, total: int) -> str:
        now = self.clock()
        if self.stage is None or self.stage[0] != stage:
            self.stage = (stage, now, done)
        _, start, first = self.stage
        elapsed = f"{_duration(now - self.began)} elapsed"
        rate = (done - first) / (now - start) if now > start else 0.0
        if not total or done >= total:
            return elapsed
        left = _duration((total - done) / rate) if rate > 0 else "?"
        return f"{elapsed}, {left} left"


def progress_lines(every: float | None = None, stream=None, clock=None) -> Progress:
    """A :data:`Progress` callback for a log: at most one line per ``every`` seconds
    (``NCCLEAN_PROGRESS_EVERY``, 5 by default; a run shorter than that prints none), saying
    the stage, done of total, the rate since the stage began and the time left at that
    rate; a stage that printed a line prints its last, so that a log never ends on a stage
    half done, and a stage of unknown length (``total`` 0) that begins after the first
    ``every`` seconds prints its start at once."""
    import os
    import time

    every = float(os.environ.get("NCCLEAN_PROGRESS_EVERY", "5")) if every is None else every
    clock = clock or time.monotonic
    began: dict[str, tuple[float, int]] = {}
    shown: set[str] = set()  # the stages under way that printed a line
    last = [clock()]
    started = last[0]

    def update(stage: str, done: int, total: int, note: str = "") -> None:
        now = clock()
        if stage not in began:
            began[stage] = (now, done)
        finished = total and done >= total
        # past the first interval, a stage of unknown length says it began at once: no later
        # call may say it
        opening = not total and stage not in shown and now - started >= every
        if now - last[0] < every and not (finished and stage in shown) and not opening:
            return
        last[0] = now
        shown.add(stage)
        start, first = began[stage]
        rate = (done - first) / (now - start) if now > start else 0.0
        line = f"ncclean: {stage}: {done:,}/{total:,}" if total else \
            f"ncclean: {stage}: {done:,}" if done else f"ncclean: {stage} ..."
        if total:
            line += f" ({100 * done / total:.0f}%)"
        if rate > 0:
            line += f", {rate:,.1f}/s"
            if total and not finished:
                line += f", {_duration((total - done) / rate)} left"
        if note:
            line += f" [{note}]"
        print(line, file=stream or sys.stderr, flush=True)
        if finished:
            began.pop(stage, None)
            shown.discard(stage)

    return update


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def render_score(out, summary) -> None:
    """The run summary of ``ncclean score``: rows, partitions, noise estimate, time."""
    from ncclean.api import INVALID, NOISY

    counts = summary.partition_counts
    seconds = summary.seconds
    phases = ", ".join(f"{name} {value:.1f} s" for name, value in seconds.items()
                       if name in ("read", "embed", "method", "stages", "fit", "apply"))
    out.print(f"[bold]score[/bold] ({summary.method}, {summary.device}): {summary.n_pairs:,} "
              f"pairs in {seconds.get('total', 0):.1f} s ({phases})")
    for name, count in counts.items():
        if count or name != INVALID:
            out.print(f"  {name:<20} {count:>9,}  {pct(count, summary.n_pairs):>6}")
    if summary.noise_rate is not None:
        out.print(f"  estimated noise rate "
                  f"{_noise({'rate': summary.noise_rate, 'ci95': summary.noise_interval})}")
    if summary.detection is not None:
        d = summary.detection
        out.print(f"  against noisy_gt ({d['n_noisy']:,} noisy): AUROC {d['auroc']:.3f}, "
                  f"AP {d['ap']:.3f}, precision {d['precision']:.3f}, recall {d['recall']:.3f}")
    if summary.n_pseudo_captions:
        out.print(f"  pseudo-captions for {summary.n_pseudo_captions:,} of "
                  f"{counts[NOISY]:,} noisy pairs")
    for warning in summary.warnings:  # text of the run's own: a [bracket] in it is not markup
        out.print(f"  [yellow]warning:[/] {escape(warning)}")
    if summary.resumed and summary.resumed[0]:
        kept, shards = summary.resumed
        out.print(f"  resumed: {kept:,} of {shards:,} output shards were complete and kept")
    out.print(f"  read {escape(str(summary.input))}, wrote {escape(str(summary.output))} "
              "(+ .json)")


def render_split(summary, report: bool) -> None:
    """What ``ncclean split`` wrote; with ``report``, the counts table, the noise estimates and
    the most confidently noisy pairs."""
    out = console()
    n = summary.n_rows
    out.print(f"[bold]split[/bold] {summary.input}: {n:,} rows into {summary.out_dir}/ "
              f"({sum(summary.partition_counts.values()):,} written, every row once)")
    if not report:
        for name, count in summary.partition_counts.items():
            out.print(f"  {name}.parquet  {count:,}")
    else:
        from rich.table import Table

        table = Table(title=f"method {summary.method or '?'}, cut {_describe_cut(summary.cut)}",
                      title_justify="left")
        for column in ("partition", "pairs", "share", "file"):
            table.add_column(column, justify="left" if column in ("partition", "file")
                             else "right")
        for name, count in summary.partition_counts.items():
            table.add_row(name, f"{count:,}", pct(count, n), summary.files[name])
        out.print(table)
        out.print(f"  estimated noise rate {_noise(summary.noise)}, {summary.noise['source']}")
        if summary.most_noisy:
            out.print(f"  the {len(summary.most_noisy)} most confidently noisy pairs:")
            for item in summary.most_noisy:
                # a scores-only file holds the id and no caption: the id is what joins back
                where = f"id {escape(str(item['id']))!r}" if item.get("id") is not None \
                    else f"row {item['row']}"
                line = f"    {where} ({item.get('clean_prob') or 0:.3f})"
                if item.get("caption") is not None:
                    line += f" {escape(str(item['caption'])[:70])!r}"
                if item.get("pseudo_caption") is not None:
                    line += f" -> {escape(str(item['pseudo_caption'])[:60])!r}"
                out.print(line)
    if summary.html is not None:
        out.print(f"  report: {summary.html} ({summary.html_bytes / 1e6:.1f} MB)")
    out.print(f"  summary: {summary.out_dir / 'summary.json'}")


def _noise(estimate: dict) -> str:
    from ncclean.api import describe_noise

    return describe_noise(estimate)


def _describe_cut(cut) -> str:
    if not cut:
        return "?"
    if cut.get("noise_rate") is not None:
        return f"lowest {cut['noise_rate']:.1%} noisy"
    from ncclean.options import Cut

    resolved = Cut.from_record(cut)
    clean_above, noisy_below = resolved.thresholds()
    text = f"noisy < {noisy_below:.6g}, clean >= {clean_above:.6g}"
    if (resolved.recall_clean_above, resolved.recall_noisy_below) != (None, None):
        text += f" ({resolved.describe_bands()})"
    if cut.get("rare_clean_above") is not None:
        text += (f" (>= {cut['rare_clean_above']} for captions seen at most "
                 f"{cut.get('rare_count')} times)")
    return text


def render_retrain(out, summary) -> None:
    """The arms of ``ncclean retrain`` side by side: Recall@1/5/10 both ways and rSum."""
    from rich.table import Table

    kept = summary.keep + (" + pseudo-captions" if summary.pseudo_captions else "")
    table = Table(title=f"retrain on {summary.input}, cleaned = {kept} ({summary.steps:,} steps "
                  f"each, {summary.schedule} rate, seed {summary.seed}; encoders "
                  f"{summary.image_encoder} + {summary.text_encoder}); test "
                  f"{summary.test or 'held out of the input'} ({summary.n_test:,} pairs); "
                  "Recall@K in %, strict", title_justify="left")
    table.add_column("arm", no_wrap=True)
    table.add_column("pairs", justify="right", no_wrap=True)
    for name in ("i2t R@1", "R@5", "R@10", "t2i R@1", "R@5", "R@10", "rSum", "rSum by text"):
        table.add_column(name, justify="right", no_wrap=True)
    for arm, result in summary.arms.items():
        strict = result["strict"]
        pairs = "-" if result["n_pairs"] is None else f"{result['n_pairs']:,}"
        table.add_row(arm, pairs, *(f"{strict[k]:.1f}" for k in (
            "i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")),
            f"{result['by_text']['rsum']:.1f}")
    out.print(table)
    for arm, result in summary.arms.items():
        if result.get("curve"):
            points = ", ".join(f"{p['step']:,}: {p['rsum']:.1f}" for p in result["curve"])
            out.print(f"  {arm}: strict rSum by step: {points}")
    if summary.still_improving:
        slopes = ", ".join(f"{arm} +{slope:.1f}" for arm, slope in summary.still_improving.items())
        out.print(f"  [yellow]still improving at the last step[/] ({slopes} rSum per 1,000 steps "
                  "over the second half): the arms have not levelled off, and the comparison may "
                  "change with more --steps")
    if summary.past_best:
        peaks = ", ".join(f"{arm} {best['rsum']:.1f} near step {best['step']:,}, "
                          f"{best['drop']:.1f} lower at the end"
                          for arm, best in summary.past_best.items())
        out.print(f"  [yellow]past its best[/] ({peaks}; means over 3 evaluations): the matcher "
                  "overfits its selection before the last step, so the last readings understate "
                  "it; compare the arms over their curves or with fewer --steps")
    if summary.small_selection:
        cleaned = summary.arms["cleaned"]["n_pairs"]
        out.print(f"  [yellow]a small selection[/] ({cleaned:,} of {summary.n_valid:,} valid "
                  f"pairs, {cleaned / summary.n_valid:.1%}): so few pairs can train a worse "
                  "matcher than the raw corpus; a calibrated cut keeps few when most pairs are "
                  "noisy (docs/thresholds.md, \"To train on\")")
    for warning in summary.warnings:  # text of the run's own: a [bracket] in it is not markup
        out.print(f"  [yellow]warning:[/] {escape(warning)}")
    if summary.gap_recovered is not None:
        out.print(f"  the cleaned arm recovers {summary.gap_recovered:.0%} of the noisy-to-oracle "
                  "rSum gap")
    saved = summary.arms.get("matcher")
    if saved:
        method = f"the {saved['method']} run's" if saved.get("method") else "the saved"
        line = f"  matcher: {method} own matcher, {saved['path']}, evaluated as saved"
        if saved.get("gap_recovered") is not None:
            line += f"; it recovers {saved['gap_recovered']:.0%} of the gap"
        out.print(line)
