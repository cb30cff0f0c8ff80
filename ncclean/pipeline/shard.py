"""Apply a fit to one input shard (:func:`apply_shard`), the unit of work of every engine
(:mod:`ncclean.pipeline.engines`): read it part by part, score each part with the fit, write
its output shard atomically with the completion mark (:func:`ncclean.data.shards.output_complete`),
or skip it when it is already complete. A shard's working files (a decoded tar, a copy in
smaller row groups) live in a scratch folder beside its output
(:func:`ncclean.data.atomic.scratch_folder`), and the outputs complete so far are noted
(:func:`ncclean.data.atomic.plan_outputs`; a skipped shard through :func:`mark_complete`) so
that an interrupted run can say what it kept.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.atomic import (
    make_folder,
    mark_complete,
    remove_stale_temps,
    scratch_folder,
)
from ncclean.data.schema import Columns
from ncclean.data.shards import (
    N_ROWS_KEY,
    InputShard,
    completion_metadata,
    output_complete,
    read_shard,
)
from ncclean.options import RunOptions


@dataclass(frozen=True)
class ShardJob:
    """One input shard and its output file; ``mark``: record the fit's hash and the row count
    in the output's metadata (a sharded run's completion mark); ``duplicates``: the shard's rows
    (sorted) whose id appeared earlier in the corpus, written ``invalid`` as one pass writes a
    repeated id; ``hidden``: the shard's columns not written (vectors the embed stage added);
    ``nulled``: columns written as nulls (a tar's image bytes: its ``image_ref`` says where
    they are); ``decoded``: the shard's scored columns already decoded
    (:class:`ncclean.data.held.DecodedCopies`), read instead of the shard's."""

    shard: InputShard
    out: Path
    mark: bool = True
    duplicates: tuple[int, ...] = ()
    hidden: tuple[str, ...] = ()
    nulled: tuple[str, ...] = ()
    decoded: Path | None = None


def shard_rows(shard: InputShard) -> int:
    """The shard's row count (a tar's samples are counted by reading it)."""
    if shard.kind == "parquet":
        return pq.ParquetFile(shard.path).metadata.num_rows
    return read_shard(shard).num_rows


APPLY_ROWS = 65_536
"""Rows per part of a large Parquet shard: it is read, scored and written part by part (whole
row groups; a shard with row groups over twice this is first copied in smaller row groups),
so a worker holds one part, whatever the shard's size."""


def apply_shard(fit, job: ShardJob, columns: Columns, run: RunOptions, device: str) -> dict:
    """Score ``job.shard`` with ``fit`` and write ``job.out`` (skipped when already complete,
    and written in ``run.write``'s form: a shard written in the other is redone); a report:
    stem, rows, partition counts, pseudo-captions, whether it was skipped."""
    from ncclean.data.parquet import (
        open_pairs,
        sidecar_path,
        windows,
        with_row_groups_of,
        write_json,
        write_pair_parts,
    )
    from ncclean.data.results import PARTITIONS, partition_counts, scores_only
    from ncclean.data.schema import resolve_columns

    report = {"stem": job.shard.stem, "output": str(job.out)}
    n_rows = shard_rows(job.shard)
    if job.mark and output_complete(job.out, fit.hash, n_rows, run.write):
        mark_complete(job.out)
        done = pq.read_table(job.out, columns=["partition", "pseudo_caption"])
        return report | {"n_rows": n_rows, "skipped": True,
                         "partition_counts": partition_counts(done.column(0).combine_chunks()),
                         "n_pseudo_captions": n_rows - done.column(1).null_count}
    remove_stale_temps(job.out)  # a killed run's; another live run's are its own
    totals = {"n_rows": 0, "n_applied": 0, "n_pseudo_captions": 0,
              "partition_counts": dict.fromkeys(PARTITIONS, 0)}
    with scratch_folder(make_folder(job.out.parent)) as scratch:
        path = job.shard.path
        if job.shard.kind != "parquet":  # one shard, held in memory anyway
            path = scratch / "shard.parquet"
            pq.write_table(read_shard(job.shard), path)
        source = open_pairs(path)
        if job.shard.kind != "parquet":  # messages name the input shard, not the copy
            source = replace(source, path=job.shard.path)
        source = with_row_groups_of(source, APPLY_ROWS, scratch)
        wanted = _columns(columns, fit.meta["columns"])
        parts = windows(source, APPLY_ROWS)
        captions = _caption_counts(source, wanted) if len(parts) > 1 else None
        starts = np.cumsum([0] + [part.n_rows for part in parts])
        scored = (_apply_part(fit, part, wanted, captions, job, run, device, totals, start)
                  for part, start in zip(parts, starts))
        marks = completion_metadata(fit.hash, n_rows) if job.mark else {}
        written = scores_only(resolve_columns(wanted, source.schema).id, run.write, marks)
        if job.hidden and "keep" not in written:
            written["keep"] = [c for c in source.schema.names if c not in job.hidden]
        write_pair_parts(source, job.out, scored, **written)  # complete once in place
    pa.default_memory_pool().release_unused()  # else the next shard starts above this one's peak
    report |= totals
    if not job.mark:  # a single output file gets its own sidecar, as one pass writes
        write_json(sidecar_path(job.out), {"fit": fit.hash, "n_rows": totals["n_rows"],
                                           "partition_counts": totals["partition_counts"]})
    return report | {"skipped": False}  # a planned output counts as kept once in place


def found_complete(job: ShardJob, fit_hash: str, write: str) -> bool:
    """Whether ``job.out`` is a complete output of the fit ``fit_hash``, judged from the file
    alone (the row count its completion mark records; the input shard is not read)."""
    if not job.mark or not job.out.exists():
        return False
    try:
        recorded = (pq.read_schema(job.out).metadata or {}).get(N_ROWS_KEY, b"")
    except (pa.ArrowInvalid, OSError):
        return False
    return recorded.isdigit() and output_complete(job.out, fit_hash, int(recorded), write)


def _apply_part(fit, part, columns: Columns, captions, job: ShardJob, run: RunOptions,
                device: str, totals: dict, first_row: int = 0):
    """``(part, updates)``: one part of a shard (from its row ``first_row``) scored with
    ``fit``; adds to ``totals``."""
    from ncclean.data.corpus import mark_repeated_ids, read_corpus
    from ncclean.data.held import from_copy
    from ncclean.data.results import partition_counts
    from ncclean.models.features import build_features
    from ncclean.models.matcher import MatcherConfig
    from ncclean.pipeline.apply import apply_to_corpus

    # its scored columns from the decoded copy, when there is one: not decoded twice more
    part = from_copy(part, scored_columns(columns, part.schema), job.decoded, first_row)
    corpus = read_corpus(part, columns, strict=run.strict, image_size=None, cache_dir=None)
    if job.duplicates:
        rows = np.asarray(job.duplicates, dtype=np.int64) - first_row
        mark_repeated_ids(corpus, rows[(rows >= 0) & (rows < corpus.n_pairs)], run.strict)
    if job.hidden:  # vectors the embed stage made: a row without one says why
        _mark_embed_problems(corpus, part)
    features = build_features(corpus, MatcherConfig.from_dict(fit.meta["matcher"]),
                              cache_dir=None, device=device)
    rows = None if captions is None else captions[2][first_row:first_row + corpus.n_pairs]
    applied = apply_to_corpus(fit, corpus, features, device,
                              shard_captions=None if captions is None else captions[:2],
                              caption_keys=rows)
    updates = applied.columns
    if run.write == "all" and job.nulled:  # a tar's images: referenced, not copied
        updates = updates | {name: _nulls(corpus.n_pairs) for name in job.nulled}
    for name, count in partition_counts(updates["partition"]).items():
        totals["partition_counts"][name] = totals["partition_counts"].get(name, 0) + count
    totals["n_rows"] += corpus.n_pairs
    totals["n_applied"] += applied.n_applied
    totals["n_pseudo_captions"] += corpus.n_pairs - updates["pseudo_caption"].null_count
    return part, updates


def scored_columns(columns: Columns, schema: pa.Schema) -> list[str]:
    """The columns of a shard of ``schema`` that scoring reads (and writing then reuses)."""
    from ncclean.data.schema import resolve_columns

    resolved = resolve_columns(columns, schema)
    return [name for name in (resolved.caption, resolved.id, resolved.image_id,
                              resolved.image_emb, resolved.text_emb) if name]


def _mark_embed_problems(corpus, part) -> None:
    """Add the embed stage's reason (``embed_problem``: an undecodable image, an empty caption)
    to the rows it could not embed, whose vectors are missing."""
    from ncclean.embed import PROBLEM_COL

    if PROBLEM_COL not in part.schema.names:
        return
    problems = [p for _, _, batch in part.iter_batches([PROBLEM_COL])
                for p in batch.column(0).to_pylist()]
    for row, problem in enumerate(problems):
        if problem and problem not in (corpus.reasons[row] or ""):
            corpus.mark(row, problem)


def _caption_counts(source, columns: Columns):
    """The sorted caption keys of every row of ``source``, their counts, and every row's key
    (one pass over the caption column)."""
    import numpy as np

    from ncclean.data.schema import resolve_columns
    from ncclean.data.shards import text_keys

    name = resolve_columns(columns, source.schema).caption
    keys = [text_keys(["" if t is None else t for t in batch.column(0).to_pylist()])
            for _, _, batch in source.iter_batches([name])]
    every = np.concatenate(keys)
    return (*np.unique(every, return_counts=True), every)


def _nulls(n: int):
    import pyarrow as pa

    return pa.nulls(n, pa.binary())


def _columns(columns: Columns, fitted: dict) -> Columns:
    """The columns to read: the fit's embedding columns (the corpus must have the same ones)."""
    from dataclasses import replace

    return replace(columns, image_emb=fitted["image_emb"], text_emb=fitted["text_emb"],
                   caption=columns.caption if columns.caption != "caption"
                   else fitted["caption"], id=columns.id or fitted["id"])
