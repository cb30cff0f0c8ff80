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
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.schema import Columns
from ncclean.data.scored import FOLDER_RECORD
from ncclean.data.shards import (
    InputShard,
    find_sorted,
    list_shards,
    pair_keys,
    read_shard,
    smallest_keys,
)
from ncclean.errors import BadOptionError, EmptyInputError, SchemaError
from ncclean.options import MatcherOptions, ScoreRequest
from ncclean.progress import Progress, no_progress

PathLike = str | os.PathLike
RUN_SIDECAR = FOLDER_RECORD


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


@dataclass
class IdScan:
    """The ids of a sharded corpus, read once: ``keys[k]`` ``(rows,) uint64`` the id hashes of
    shard ``k`` (:func:`~ncclean.data.shards.pair_keys`) and ``duplicates[k]`` its rows whose id
    appeared earlier in the corpus (in shard order, then row order), sorted. The driver holds 8
    bytes a pair."""

    keys: list[np.ndarray]
    duplicates: list[np.ndarray]

    @property
    def total(self) -> int:
        return sum(len(k) for k in self.keys)


def scan_ids(shards: list[InputShard], id_name: str) -> IdScan:
    """Read the id column of every shard (:class:`IdScan`). Equal keys are confirmed on the ids
    themselves, so a hash collision never marks a row a duplicate."""
    keys = [pair_keys(read_shard(shard, [id_name]).column(0)) for shard in shards]
    every = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
    distinct, counts = np.unique(every, return_counts=True)
    repeated = distinct[counts > 1]  # sorted
    duplicates = [np.zeros(0, np.int64) for _ in shards]
    if not len(repeated):
        return IdScan(keys, duplicates)
    seen: set[str] = set()
    for k, shard in enumerate(shards):  # only the rows whose key repeats, in corpus order
        rows = np.flatnonzero(find_sorted(repeated, keys[k])[1])
        if not len(rows):
            continue
        ids = read_shard(shard, [id_name]).column(0).take(pa.array(rows)).to_pylist()
        later = []
        for row, value in zip(rows, ids):
            text = f"{type(value).__name__}:{value}"
            if value is not None and text in seen:
                later.append(row)
            seen.add(text)
        duplicates[k] = np.asarray(later, dtype=np.int64)
    return IdScan(keys, duplicates)


def write_sample(shards: list[InputShard], scan: IdScan, id_name: str, n: int | None,
                 dest: Path, held_out: Path | None = None, copies=None) -> None:
    """Write the fit sample of ``shards`` to the Parquet file ``dest`` and, when the corpus is
    larger than the sample, the next :func:`held_out_size` pairs by id hash to ``held_out``
    (never trained on: ``gmm`` calibrates its mixture there). ``copies``
    (:class:`~ncclean.data.held.DecodedCopies`): the Parquet shards' rows, as they are read,
    are also kept decoded there, for the application."""
    extra = held_out_size(n) if held_out is not None and n is not None else 0
    total = scan.total
    kept = None
    for keys in scan.keys:  # the n (+ held-out) smallest id hashes, one shard at a time
        kept = smallest_keys(keys, n + extra if n is not None else total, kept)
    sampled = n is not None and total > n
    chosen = {"sample": kept[:n] if sampled else None, "held_out": kept[n:] if sampled else None}
    parts: dict[str, list[tuple[Path, pa.Table]]] = {"sample": [], "held_out": []}
    for shard in shards:  # the sampled rows (all of them up to n)
        for table in _pieces(shard):
            if copies is not None and shard.kind == "parquet":
                copies.add(shard.path, table)
            if not sampled:
                parts["sample"].append((shard.path, table))
                continue
            keys = pair_keys(table.column(id_name))
            for name, wanted in chosen.items():
                parts[name].append((shard.path, table.filter(
                    pa.array(find_sorted(wanted, keys)[1]))))
    if copies is not None:
        copies.close()
    for name, path in (("sample", dest), ("held_out", held_out if sampled else None)):
        if path is None:
            continue
        table = _concat(parts.pop(name))
        # hash order: independent of shard order and names
        order = np.argsort(pair_keys(table.column(id_name)), kind="stable") if sampled else None
        if table.num_rows:
            _write_in_order(table, path, order)
        del table
    pa.default_memory_pool().release_unused()  # Arrow's pool keeps what it freed otherwise


def _concat(pieces: list[tuple[Path, pa.Table]]) -> pa.Table:
    """The sample's pieces (each with its shard's path) as one table; :class:`SchemaError`
    naming the first shard whose columns differ from the first shard's (another vector width,
    another type)."""
    from ncclean.data.parquet import describe_schema

    pieces = [piece for piece in pieces if piece[1].num_rows] or pieces[:1]
    first_path, first = pieces[0][0], pieces[0][1].schema  # an empty shard has no say
    for path, table in pieces:
        if not table.schema.equals(first, check_metadata=False):
            raise SchemaError(f"shard {path} has columns {describe_schema(table.schema)}, but "
                              f"{first_path} has {describe_schema(first)}; all shards must "
                              "share one schema")
    return pa.concat_tables([table for _, table in pieces])


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


def score_sharded(request: ScoreRequest, progress: Progress = no_progress):
    """Fit (or load a fit) and apply it to every shard of the request's ``input`` (see the
    module docstring); returns a :class:`~ncclean.pipeline.score.ScoreSummary` of the whole run.
    A saved fit refuses an option it fixes that the request names as ``given``
    (:func:`~ncclean.pipeline.preflight.check_fit_options`). Everything that can be checked
    before the fit is: the shards, the output and ``--save-fit`` folders, the fit's options."""
    from ncclean.data.atomic import make_folder, scratch_folder
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.data.webdataset import IMAGE_BYTES
    from ncclean.options import AUTO_METHOD
    from ncclean.pipeline.engines import run_engine
    from ncclean.pipeline.fit import load_fit, save_fit
    from ncclean.pipeline.preflight import (
        check_fit_columns,
        check_fit_options,
        check_output,
        check_save_fit,
        check_shards,
    )
    from ncclean.pipeline.score import cache_path
    from ncclean.pipeline.shard import ShardJob
    from ncclean.pipeline.vectors import check_towers, embed_stage, needs_vectors

    input, output, method, params = request.input, request.output, request.method, request.params
    columns, matcher, cut, stages = request.columns, request.matcher, request.cut, request.stages
    run, scale, device, given = request.run, request.scale, request.device, request.given
    began = time.perf_counter()
    seconds: dict[str, float] = {}
    shards = list_shards(input)
    inputs = [shard.path for shard in shards]  # the record's fingerprint is of these files
    out = Path(output)
    to_folder = out.is_dir() or out.suffix != ".parquet"
    if not to_folder and len(shards) > 1:
        raise BadOptionError(f"{input} has {len(shards)} shards: write them to a folder "
                             "(-o DIR), one output shard per input shard")
    fit = None
    if scale.fit is not None:  # read and checked before any folder is made
        fit = load_fit(scale.fit, device)
        check_fit_options(fit.meta, scale.fit, method, params, cut, stages, run, given)
        check_fit_columns(fit.meta, columns, scale.fit)
        method = fit.meta["method"]
    else:
        if method == AUTO_METHOD:  # as one pass picks for the vector columns the run reads
            method = _auto_method(columns, matcher, device)
        from ncclean.methods.base import make_method

        make_method(method, params)  # an unknown method or a bad parameter: before any work
    if needs_vectors(columns):
        check_towers()
    check_shards(input, shards)
    id_name = id_column(shards[0], columns)
    check_output(input, out, to_folder)
    check_save_fit(scale.save_fit)
    if scale.engine == "ray" and scale.ray_address:  # before the fit, not after it
        from ncclean.pipeline.ray_engine import check_address

        check_address(scale.ray_address)
    scan = scan_ids(shards, id_name)
    if not scan.total:
        raise EmptyInputError(f"{input}: no pairs in its {len(shards)} shard"
                              f"{'s' if len(shards) > 1 else ''}")
    # a shard without pairs (a tar whose every download failed) has no output shard
    kept = [k for k in range(len(shards)) if len(scan.keys[k])]
    empty = [shards[k].stem for k in range(len(shards)) if not len(scan.keys[k])]
    nulled = [(IMAGE_BYTES,) if s.kind == "webdataset" else () for s in shards]  # in the tar
    with scratch_folder(out if to_folder else out.parent) as scratch:
        embedded = None
        if needs_vectors(columns):
            embedded = embed_stage([shards[k] for k in kept], columns,
                                   cache_path(run.cache_dir), scratch, device,
                                   run.max_image_pixels or DEFAULT_MAX_PIXELS, scale.engine,
                                   scale.ray_address, progress)
            shards = list(shards)
            for k, shard in zip(kept, embedded.shards):
                shards[k] = shard
            columns = embedded.columns
            seconds["embed"] = time.perf_counter() - began
        copies = None
        if fit is not None:
            fit_dir = Path(scale.fit)
        else:
            copies = _copies([shards[k] for k in kept], columns, scratch)
            fit = _fit(request.but(method=method, columns=columns), shards, scan, id_name,
                       scratch, progress, copies)
            fit_dir = Path(scale.save_fit) if scale.save_fit else scratch / "fit"
            save_fit(fit, fit_dir)
            seconds["fit"] = time.perf_counter() - began - seconds.get("embed", 0.0)
        applying = time.perf_counter()
        jobs = [ShardJob(shard=shards[k],
                         out=(out / f"{shards[k].stem}.parquet") if to_folder else out,
                         mark=to_folder, duplicates=tuple(int(r) for r in scan.duplicates[k]),
                         hidden=embedded.hidden if embedded else (), nulled=nulled[k],
                         decoded=copies.paths.get(shards[k].path) if copies else None)
                for k in kept]
        for job in jobs:  # a shard of a sub-folder is written to the same sub-folder
            make_folder(job.out.parent)
        reports = run_engine(scale.engine, fit_dir, fit.hash, jobs, columns, run, device,
                             scale.ray_address, progress)
        seconds["apply"] = time.perf_counter() - applying
    extra = {"empty_shards": empty} | ({} if embedded is None else {"embedded": {
        "towers": embedded.identity, "computed": embedded.computed, "cached": embedded.cached}})
    return _finish(request, out, to_folder, fit, reports, seconds, began, inputs, extra)


def _auto_method(columns: Columns, matcher: MatcherOptions, device: str) -> str:
    """The method ``auto`` stands for on the vector columns a sharded run reads (its own, or
    the embed stage's), as one pass decides it (:func:`~ncclean.methods.choose.auto_method`)."""
    from ncclean.methods.choose import auto_method
    from ncclean.models.resolve import matcher_config
    from ncclean.pipeline.vectors import vector_columns

    config, _ = matcher_config(vector_columns(columns), matcher.image_encoder,
                               matcher.text_encoder, matcher.embed_dim, matcher.image_size,
                               None, device, matcher.clip())  # towers only: nothing loaded
    return auto_method(config, None)


def _copies(shards: list[InputShard], columns: Columns, scratch: Path):
    """Decoded copies of the Parquet ``shards``' scored columns, made while the fit sample is
    drawn (:class:`~ncclean.data.held.DecodedCopies`), when the scratch folder's disk has room;
    else ``None``."""
    from ncclean.data.held import copies_for
    from ncclean.pipeline.shard import held_columns

    paths = [shard.path for shard in shards if shard.kind == "parquet"]
    if not paths:
        return None
    return copies_for(paths, held_columns(columns, pq.read_schema(paths[0])), scratch)


def _fit(request: ScoreRequest, shards, scan: IdScan, id_name: str, scratch: Path, progress,
         copies=None):
    """The fit: one pass (:func:`score_corpus`) over the sample, kept; ``copies``: see
    :func:`write_sample`."""
    from ncclean.methods.base import make_method
    from ncclean.pipeline.keep import fit_from_state
    from ncclean.pipeline.score import score_corpus
    from ncclean.stages.run import significance_mode

    method, columns, stages, run = request.method, request.columns, request.stages, request.run
    device, n = request.device, request.scale.sample_size
    chosen = make_method(method, request.params)
    sample, held_out = scratch / "sample.parquet", scratch / "held-out.parquet"
    write_sample(shards, scan, id_name, n, sample,
                 held_out if chosen.application.held_out else None, copies)
    total = scan.total
    states: dict = {}
    score_corpus(request.but(input=sample, output=scratch / "sample-scored.parquet",
                             corpus_pairs=total), progress,
                 on_scored=lambda state: states.update(state) or True)  # kept, not written
    from ncclean.pipeline.fit import check_towers_apply

    check_towers_apply(states["config"])
    fit = fit_from_state(states, chosen, run.seed, significance_mode(stages, states["result"]),
                         stages.pseudo_captions, n_corpus=total, device=device)
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
    return fit


def _finish(request: ScoreRequest, out: Path, to_folder: bool, fit, reports: list[dict],
            seconds: dict, began: float, inputs: list[Path], extra: dict | None = None):
    """The run record (written beside the output) and the summary of the whole run."""
    from ncclean.data.parquet import sidecar_path, write_json
    from ncclean.data.results import PARTITIONS
    from ncclean.pipeline.score import ScoreSummary

    input, scale, run, device = request.input, request.scale, request.run, request.device

    counts = {name: sum(r["partition_counts"].get(name, 0) for r in reports)
              for name in PARTITIONS}
    n_rows = sum(r["n_rows"] for r in reports)
    seconds["total"] = time.perf_counter() - began
    record = {
        "command": "score", "input": str(input), "method": fit.meta["method"],
        "params": fit.meta["params"], "seed": fit.meta["seed"], "device": device,
        "columns": {"image_emb": fit.meta["columns"]["image_emb"],
                    "text_emb": fit.meta["columns"]["text_emb"]},
        "matcher": {k: v for k, v in fit.meta["matcher"].items() if k != "vocab"},
        "fit": {"hash": fit.hash, "saved_to": str(scale.save_fit or scale.fit or "") or None,
                "sample": fit.meta["sample"], "signal": fit.meta["signal"]},
        "engine": scale.engine, "write": run.write,
        "options": request.options(),
        **request.provenance(inputs, input),
        "estimated_noise_rate": fit.meta["noise_rate"],
        "estimated_noise_ci95": fit.meta.get("noise_interval"), "cut": fit.meta["cut"],
        "n_rows": n_rows, "partition_counts": counts,
        "shards": [{k: v for k, v in r.items() if k != "partition_counts"} for r in reports],
        "seconds": seconds,
    } | (extra or {})
    write_json(out / RUN_SIDECAR if to_folder else sidecar_path(out), record)
    return ScoreSummary(
        input=Path(input), output=out, method=fit.meta["method"], device=device, n_pairs=n_rows,
        n_invalid=counts["invalid"], partition_counts=counts, noise_rate=fit.meta["noise_rate"],
        noise_interval=fit.meta.get("noise_interval"), seconds=seconds,
        n_pseudo_captions=sum(r["n_pseudo_captions"] for r in reports))
