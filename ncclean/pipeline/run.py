"""``score`` from its options to its output: the request built once, then the one pass
(:mod:`ncclean.pipeline.score`) or the sharded pipeline (:mod:`ncclean.pipeline.sharded`), as
:mod:`ncclean.pipeline.route` decides."""

from __future__ import annotations

from ncclean.options import ScaleOptions
from ncclean.pipeline.route import resolve_scale, wants_shards


def run_score(input, output, method: str, params: dict | None, groups: dict,
              scale: ScaleOptions | None, given: frozenset[str], argv, progress):
    """:func:`ncclean.api.score` once its keywords are folded into ``groups`` (``columns``,
    ``matcher``, ``cut``, ``stages``, ``run``): the request built once, then the one pass or the
    sharded pipeline. A bad output fails before torch is imported. A table in memory
    (:mod:`ncclean.pipeline.frames`) is scored from a temporary file and its rows returned in
    the summary (``output`` ``None``: written beside that file only)."""
    from ncclean.pipeline.frames import is_table, table_file

    if is_table(input):
        from dataclasses import replace

        with table_file(input) as path:
            summary = run_score(path, output or path.with_name("scored.parquet"), method,
                                params, groups, scale, given, argv, progress)
            return replace(summary, _rows=summary.rows, input=None,
                           output=summary.output if output else None)
    from ncclean.device import resolve_device
    from ncclean.options import ScoreRequest
    from ncclean.pipeline.score import check_write, default_output, prepare_output, score_corpus
    from ncclean.pipeline.sharded import score_sharded
    from ncclean.provenance import command_line, started

    columns, run = groups["columns"], groups["run"]
    check_write(input, columns, run.write)  # a scores-only output needs an id, asked first
    scale = resolve_scale(input, default_output(input) if output is None else output, columns,
                          scale)
    sharded = wants_shards(input, output, scale) if output is not None else scale.asked
    if not sharded or output is None:
        output = prepare_output(input, output, run.overwrite)
    request = ScoreRequest(input, output, method, params, columns, groups["matcher"],
                           groups["cut"], groups["stages"], run, scale,
                           resolve_device(run.device), given, started(),
                           tuple(command_line() if argv is None else argv))
    if sharded:
        return score_sharded(request, progress)
    return score_corpus(request, progress)

