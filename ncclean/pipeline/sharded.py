"""Scoring a corpus as a fit and its application, shard by shard (DESIGN.md, "Architecture").

1. The fit sample: every pair up to ``--fit-sample`` pairs (in shard order), beyond that the
   pairs with the smallest id hashes, in hash order (:mod:`ncclean.data.shards`). Reading it
   holds one shard and the sample.
2. The fit: today's one pass on the sample (:func:`ncclean.pipeline.score.score_corpus`), kept
   as a :class:`~ncclean.pipeline.fit.Fit` (:mod:`ncclean.pipeline.keep`), saved with
   ``--save-fit``; or a saved fit (``--fit``), no training.
3. The application: every input shard through the engine (:mod:`ncclean.pipeline.engines`),
   each to ``DIR/<stem>.parquet``, skipping shards already complete; then the run's sidecar
   ``DIR/ncclean.json``. With one input shard and ``-o FILE`` the output is that file and its
   ``FILE.json``.

A corpus no larger than the fit sample is scored exactly as one pass scores it: every pair is in
the sample, and a pair of the sample is written with the one pass's results.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.schema import Columns
from ncclean.data.shards import (
    InputShard,
    find_sorted,
    list_shards,
    pair_keys,
    read_shard,
    smallest_keys,
)
from ncclean.errors import BadOptionError, NcCleanError
from ncclean.options import Cut, MatcherOptions, RunOptions, ScaleOptions, StageOptions
from ncclean.progress import Progress, no_progress

PathLike = str | os.PathLike
RUN_SIDECAR = "ncclean.json"


def wants_shards(input: PathLike, output: PathLike, scale: ScaleOptions | None) -> bool:
    """Whether a scoring run goes through a fit and its application: anything of ``scale``
    asked for, an output folder (an existing one, or a name without a suffix for a folder
    input), or webdataset tars or a saved Hugging Face dataset in."""
    out, source = Path(output), Path(input)
    if scale is not None and scale.asked:
        return True
    if out.is_dir() or (source.is_dir() and out.suffix == ""):
        return True
    return source.suffix == ".tar" or (source.is_dir() and (
        any(source.glob("*.tar")) or any(source.rglob("state.json"))))


def id_column(shard: InputShard, columns: Columns) -> str:
    """The id column of the corpus; :class:`BadOptionError` without one (a sharded run keys the
    fit sample and the fitted pairs by id)."""
    if shard.kind == "webdataset":
        return "id"
    names = read_shard(shard).schema.names if shard.kind == "arrow" \
        else pq.read_schema(shard.path).names
    name = columns.id or "id"
    if name not in names:
        raise BadOptionError(f"{shard.path}: a fit needs an id column ({name!r} is missing; name "
                             "it with --id-col)")
    return name


def write_sample(shards: list[InputShard], columns: Columns, n: int | None, dest: Path,
                 held_out: Path | None = None) -> int:
    """Write the fit sample of ``shards`` to the Parquet file ``dest`` and, when the corpus is
    larger than the sample, the next :func:`held_out_size` pairs by id hash to ``held_out``
    (never trained on: ``gmm`` calibrates its mixture there); the corpus's pair count."""
    id_name = id_column(shards[0], columns)
    extra = held_out_size(n) if held_out is not None and n is not None else 0
    kept, total = None, 0
    for shard in shards:  # pass 1: the n (+ held-out) smallest id hashes, one shard at a time
        keys = pair_keys(read_shard(shard, [id_name]).column(0))
        total += len(keys)
        kept = smallest_keys(keys, n + extra if n is not None else total, kept)
    sampled = n is not None and total > n
    chosen = {"sample": kept[:n] if sampled else None, "held_out": kept[n:] if sampled else None}
    parts: dict[str, list[pa.Table]] = {"sample": [], "held_out": []}
    for shard in shards:  # pass 2: the sampled rows (all of them up to n)
        for table in _pieces(shard):
            if not sampled:
                parts["sample"].append(table)
                continue
            keys = pair_keys(table.column(id_name))
            for name, wanted in chosen.items():
                parts[name].append(table.filter(pa.array(find_sorted(wanted, keys)[1])))
    for name, path in (("sample", dest), ("held_out", held_out if sampled else None)):
        if path is None:
            continue
        table = pa.concat_tables(parts.pop(name))
        # hash order: independent of shard order and names
        order = np.argsort(pair_keys(table.column(id_name)), kind="stable") if sampled else None
        if table.num_rows:
            _write_in_order(table, path, order)
        del table
    pa.default_memory_pool().release_unused()  # Arrow's pool keeps what it freed otherwise
    return total


def _write_in_order(table: pa.Table, path: Path, order: np.ndarray | None) -> None:
    """``table`` to ``path`` with its rows in ``order`` (``None``: as they are), a row group
    at a time (no second copy of the table), vectors plain-encoded: dictionary-encoding them
    held several times the table in memory."""
    from ncclean.data.parquet import BATCH_ROWS, dictionary_columns

    encoded = dictionary_columns(table.schema)
    with pq.ParquetWriter(path, table.schema, compression="zstd", use_dictionary=encoded,
                          write_statistics=encoded) as writer:
        for start in range(0, table.num_rows, BATCH_ROWS):
            writer.write_table(table.slice(start, BATCH_ROWS) if order is None else
                               table.take(pa.array(order[start:start + BATCH_ROWS])))


def _pieces(shard: InputShard):
    """The rows of ``shard`` as tables: a Parquet shard :data:`~ncclean.data.parquet.BATCH_ROWS`
    rows at a time (Parquet's reader holds several times the batch it decodes, whatever the row
    groups), any other whole."""
    from ncclean.data.parquet import BATCH_ROWS, open_pairs

    if shard.kind != "parquet":
        yield read_shard(shard)
        return
    for _, _, batch in open_pairs(shard.path).iter_batches(None, BATCH_ROWS):
        yield pa.Table.from_batches([batch])


def held_out_size(n: int) -> int:
    """How many pairs beyond a fit sample of ``n`` are held out for calibration."""
    return min(n, 10_000)


def score_sharded(input: PathLike, output: PathLike, method: str, params: dict | None,
                  columns: Columns, matcher: MatcherOptions, cut: Cut, stages: StageOptions,
                  run: RunOptions, device: str, scale: ScaleOptions,
                  progress: Progress = no_progress):
    """Fit (or load a fit) and apply it to every shard of ``input`` (see the module
    docstring); returns a :class:`~ncclean.pipeline.score.ScoreSummary` of the whole run."""
    from ncclean.pipeline.engines import ShardJob, run_engine
    from ncclean.pipeline.fit import check_method_applies, load_fit, save_fit
    from ncclean.pipeline.score import AUTO_METHOD

    if method == AUTO_METHOD:  # a sharded run reads two vector columns: auto_method's clip
        method = "clip"
    began = time.perf_counter()
    seconds: dict[str, float] = {}
    shards = list_shards(input)
    out = Path(output)
    to_folder = out.is_dir() or out.suffix != ".parquet"
    if not to_folder and len(shards) > 1:
        raise BadOptionError(f"{input} has {len(shards)} shards: write them to a folder "
                             "(-o DIR), one output shard per input shard")
    with tempfile.TemporaryDirectory(prefix="ncclean-fit-") as scratch:
        if scale.fit is not None:
            fit = load_fit(scale.fit, device)
            fit_dir = Path(scale.fit)
            method = fit.meta["method"]
        else:
            check_method_applies(method, None)
            if not (columns.image_emb and columns.text_emb):
                check_method_applies(method, _NotColumns)
            fit, n_total = _fit(shards, method, params, columns, matcher, cut, stages, run,
                                device, scale.sample_size, Path(scratch), progress)
            fit_dir = Path(scale.save_fit) if scale.save_fit else Path(scratch) / "fit"
            save_fit(fit, fit_dir)
            seconds["fit"] = time.perf_counter() - began
        applying = time.perf_counter()
        jobs = [ShardJob(shard=s, out=(out / f"{s.stem}.parquet") if to_folder else out,
                         mark=to_folder) for s in shards]
        if to_folder:
            out.mkdir(parents=True, exist_ok=True)
        reports = run_engine(scale.engine, fit_dir, fit.hash, jobs, columns, run, device,
                             scale.ray_address, progress)
        seconds["apply"] = time.perf_counter() - applying
    return _finish(input, out, to_folder, fit, reports, seconds, began, scale, run, device)


def resolve_scale(input: PathLike, output: PathLike | None, method: str, columns: Columns,
                  scale: ScaleOptions | None) -> ScaleOptions | None:
    """``scale`` with ``--fit-sample auto`` resolved: :data:`~ncclean.options.AUTO_FIT_SAMPLE`
    when the corpus is one Parquet file or a folder written to a folder (``output``), has more
    pairs than that, an id column and both vector columns, and ``method`` has a fit (``clip``,
    ``gmm``, ``auto``); else ``scale`` unchanged (the one pass)."""
    from ncclean.options import AUTO_FIT_SAMPLE
    from ncclean.pipeline.fit import APPLIES
    from ncclean.pipeline.score import AUTO_METHOD

    scale = scale or ScaleOptions()
    if scale.fit_sample != "auto" or scale.fit is not None or output is None:
        return scale
    if method not in (*APPLIES, AUTO_METHOD) or not (columns.image_emb and columns.text_emb):
        return scale
    source = Path(input)
    if source.suffix == ".tar" or not source.exists():
        return scale
    try:
        shards = list_shards(source)
        if any(s.kind != "parquet" for s in shards):
            return scale
        if len(shards) > 1 and not (Path(output).is_dir() or Path(output).suffix == ""):
            return scale
        n = sum(pq.ParquetFile(s.path).metadata.num_rows for s in shards)
        names = pq.read_schema(shards[0].path).names
    except (OSError, pa.ArrowInvalid, NcCleanError):
        return scale  # the one pass reports what is wrong with the input
    if n <= AUTO_FIT_SAMPLE or (columns.id or "id") not in names:
        return scale
    from dataclasses import replace

    return replace(scale, fit_sample=AUTO_FIT_SAMPLE)


class _NotColumns:  # a matcher configuration that is not precomputed vectors (for the check)
    image_tower = text_tower = "other"


def _fit(shards, method, params, columns, matcher, cut, stages, run, device, n, scratch: Path,
         progress):
    """The fit: one pass (:func:`score_corpus`) over the sample, kept."""
    from ncclean.pipeline.keep import fit_from_state
    from ncclean.pipeline.score import score_corpus
    from ncclean.stages.run import significance_mode

    sample, held_out = scratch / "sample.parquet", scratch / "held-out.parquet"
    total = write_sample(shards, columns, n, sample, held_out if method == "gmm" else None)
    states: dict = {}
    score_corpus(sample, scratch / "sample-scored.parquet", method, params, columns, matcher,
                 cut, stages, run, device, progress,
                 on_scored=lambda state: states.update(state) or True)  # kept, not written
    from ncclean.pipeline.fit import check_method_applies

    check_method_applies(method, states["config"])
    from ncclean.methods.base import make_method

    chosen = make_method(method, params)
    fit = fit_from_state(states, chosen, run.seed, significance_mode(stages, states["result"]),
                         stages.pseudo_captions, n_corpus=total)
    fit.meta["sample"] |= {"n_corpus": total, "fit_sample": n}
    if held_out.exists():
        from ncclean.data.corpus import read_corpus
        from ncclean.models.features import build_features
        from ncclean.pipeline.keep import calibrate, rescale_sample

        corpus = read_corpus(held_out, columns, strict=False, image_size=None, cache_dir=None)
        posterior = calibrate(fit, corpus, build_features(corpus, states["config"],
                                                          cache_dir=None, device=device), device)
        if posterior is not None:  # the sample's clean_prob on the same scale (keep.py)
            rescale_sample(fit, states, posterior)
    return fit, total


def _finish(input, out: Path, to_folder: bool, fit, reports: list[dict], seconds: dict,
            began: float, scale: ScaleOptions, run: RunOptions, device: str):
    from ncclean.data.parquet import sidecar_path, write_json
    from ncclean.data.results import PARTITIONS
    from ncclean.pipeline.score import ScoreSummary
    from ncclean.records import as_record

    counts = {name: sum(r["partition_counts"].get(name, 0) for r in reports)
              for name in PARTITIONS}
    n_rows = sum(r["n_rows"] for r in reports)
    seconds["total"] = time.perf_counter() - began
    record = {
        "command": "score", "input": str(input), "method": fit.meta["method"],
        "params": fit.meta["params"], "seed": fit.meta["seed"], "device": device,
        "fit": {"hash": fit.hash, "saved_to": str(scale.save_fit or scale.fit or "") or None,
                "sample": fit.meta["sample"], "signal": fit.meta["signal"]},
        "engine": scale.engine, "write": run.write,
        "options": {"scale": as_record(scale), "run": as_record(run)},
        "estimated_noise_rate": fit.meta["noise_rate"], "cut": fit.meta["cut"],
        "n_rows": n_rows, "partition_counts": counts,
        "shards": [{k: v for k, v in r.items() if k != "partition_counts"} for r in reports],
        "seconds": seconds,
    }
    write_json(out / RUN_SIDECAR if to_folder else sidecar_path(out), record)
    return ScoreSummary(
        input=Path(input), output=out, method=fit.meta["method"], device=device, n_pairs=n_rows,
        n_invalid=counts["invalid"], partition_counts=counts, noise_rate=fit.meta["noise_rate"],
        seconds=seconds, n_pseudo_captions=sum(r["n_pseudo_captions"] for r in reports))
