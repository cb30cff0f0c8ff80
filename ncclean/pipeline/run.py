"""``score`` from its options to its output: the request built once, then the one pipeline
(:mod:`ncclean.pipeline.sharded`: read, embed, fit, apply, write), whatever the corpus's size,
its form or the output's (:mod:`ncclean.pipeline.route`)."""

from __future__ import annotations

import os
from pathlib import Path

from ncclean.options import ScaleOptions
from ncclean.pipeline.route import resolve_scale, wants_shards


def run_score(input, output, method: str, params: dict | None, groups: dict,
              scale: ScaleOptions | None, given: frozenset[str], argv, progress):
    """:func:`ncclean.api.score` once its keywords are folded into ``groups`` (``columns``,
    ``matcher``, ``cut``, ``stages``, ``run``): the request built once, then the pipeline
    (:func:`~ncclean.pipeline.sharded.score_pipeline`). A bad output fails before torch is
    imported. A table in memory (:mod:`ncclean.pipeline.frames`) is scored from a temporary
    file and its rows returned in the summary (``output`` ``None``: written beside that file
    only)."""
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
    from ncclean.pipeline.score import check_write, default_output, prepare_output
    from ncclean.pipeline.sharded import score_pipeline
    from ncclean.provenance import command_line, started

    columns, run = groups["columns"], groups["run"]
    if output is None:
        _check_one_file(input)
    elif str(output).endswith(("/", os.sep)) and not Path(output).exists():
        from ncclean.data.atomic import make_folder

        make_folder(output)  # a folder asked for: removed again if the run fails
    check_write(input, columns, run.write)  # a scores-only output needs an id, asked first
    scale = resolve_scale(input, default_output(input) if output is None else output, columns,
                          scale)
    if output is None or not wants_shards(input, output, scale):
        output = prepare_output(input, output, run.overwrite)  # one file, checked now
    request = ScoreRequest(input, output, method, params, columns, groups["matcher"],
                           groups["cut"], groups["stages"], run, scale,
                           resolve_device(run.device), given, started(),
                           tuple(command_line() if argv is None else argv))
    return score_pipeline(request, progress)


def _check_one_file(input) -> None:
    """Without ``-o`` the output is one Parquet file beside the input: :class:`BadOptionError`
    for a corpus whose shards are not Parquet files (webdataset tars, a saved Hugging Face
    dataset, a clip-retrieval folder), which is written shard by shard to a folder."""
    from ncclean.data.shards import list_shards
    from ncclean.errors import BadOptionError

    if not Path(input).exists():
        return  # said by the reader, as for any input
    kinds = {shard.kind for shard in list_shards(input)} - {"parquet"}
    if kinds:
        named = {"webdataset": "webdataset tars", "arrow": "a saved Hugging Face dataset",
                 "clip-retrieval": "a clip-retrieval folder"}
        raise BadOptionError(f"{input} is {' and '.join(named.get(k, k) for k in sorted(kinds))}"
                             ", read shard by shard: give -o DIR, a folder to write one output "
                             "shard per input shard")
