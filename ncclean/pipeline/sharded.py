"""The scoring pipeline, one for every size and input (DESIGN.md, "Architecture"): read ->
embed -> fit on a deterministic sample -> apply shard by shard -> write. One file scored whole
is this pipeline with one shard, every pair in the fit.

1. The plan (:func:`plan_fit`), from the shards' row counts and ``--fit-sample`` alone: whether
   every pair is fitted (no saved fit, and no sample size or a corpus no larger than it), and
   whether the fit reads the input in place (every pair fitted, Parquet shards, and vectors
   already there or no fit to keep).
2. The embed stage, when a fit is kept and the corpus has no vector columns
   (:mod:`ncclean.pipeline.vectors`); otherwise the towers embed the pairs as the fit reads
   them.
3. The fit (:func:`ncclean.pipeline.score.fit_corpus`) on the input in place, or on the fit
   sample written from it (:mod:`ncclean.pipeline.sample`): every pair up to ``--fit-sample``,
   beyond that the smallest id hashes; kept as a :class:`~ncclean.pipeline.fit.Fit`
   (:mod:`ncclean.pipeline.keep`) and saved with ``--save-fit``. Or a saved fit (``--fit``), no
   training.
4. The application and the write. When every pair was fitted in place and the output is one
   file with no fit to keep, the application is the fit's own results, written with the run
   record of the fit (:func:`ncclean.pipeline.score.write_fitted`): no id is needed, and a
   method whose fit cannot score an unseen pair (towers trained from scratch) is fine. Otherwise
   every input shard goes through the engine (:mod:`ncclean.pipeline.engines`), each to
   ``DIR/<stem>.parquet``, skipping shards already complete, then the run's sidecar
   ``DIR/ncclean.json``; with one input shard and ``-o FILE`` the output is that file and its
   ``FILE.json``. A pair of the fit sample is written with the fit's own results either way, so
   a corpus no larger than the sample is scored alike in one file or in shards.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ncclean.data.schema import Columns
from ncclean.data.scored import FOLDER_RECORD
from ncclean.data.shards import InputShard, list_shards
from ncclean.errors import BadOptionError, EmptyInputError
from ncclean.options import MatcherOptions, ScaleOptions, ScoreRequest
from ncclean.pipeline.sample import (
    IdScan,
    id_column,
    scan_ids,
    write_sample,
)
from ncclean.progress import Progress, no_progress

PathLike = str | os.PathLike
RUN_SIDECAR = FOLDER_RECORD


@dataclass(frozen=True)
class FitPlan:
    """How a run fits: ``every_pair`` (every pair of the corpus is in the fit), ``in_place``
    (the fit reads the input as it is, no sample copy, no embed stage) and ``kept`` (a
    :class:`~ncclean.pipeline.fit.Fit` is kept, saved or applied shard by shard; else the fit's
    own results are the output)."""

    every_pair: bool
    in_place: bool
    kept: bool


def plan_fit(input: PathLike, shards: list[InputShard], scale: ScaleOptions, columns: Columns,
             to_folder: bool) -> FitPlan:
    """The :class:`FitPlan` of a run over the ``shards`` of ``input`` written to a folder
    (``to_folder``) or one file, from the Parquet footers' row counts and the sample size:
    every pair is fitted without a saved fit when there is no sample size or the corpus is no
    larger; the fit reads Parquet shards in place when every pair is fitted and the corpus has
    its vectors, or when nothing is kept (the towers embed it as it is read). A shard that is
    not Parquet, or a damaged one, is one line (:func:`~ncclean.data.parquet.open_pairs`)."""
    from ncclean.data.parquet import open_pairs
    from ncclean.pipeline.vectors import needs_vectors

    parquet = all(shard.kind == "parquet" for shard in shards)
    n = scale.sample_size
    every = scale.fit is None and (n is None or (parquet and open_pairs(input).n_rows <= n))
    own_results = every and parquet and not to_folder and scale.save_fit is None
    in_place = every and parquet and (own_results or not needs_vectors(columns))
    return FitPlan(every_pair=every, in_place=in_place, kept=not own_results)


def score_pipeline(request: ScoreRequest, progress: Progress = no_progress):
    """Score the request's ``input`` (see the module docstring): returns a
    :class:`~ncclean.pipeline.score.ScoreSummary` of the whole run. A saved fit refuses an
    option it fixes that the request names as ``given``
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
    from ncclean.pipeline.route import writes_folder
    from ncclean.pipeline.score import cache_path, fit_warnings, write_fitted
    from ncclean.pipeline.shard import ShardJob
    from ncclean.pipeline.vectors import check_towers, embed_stage, needs_vectors

    input, output, method, params = request.input, request.output, request.method, request.params
    columns, matcher = request.columns, request.matcher
    run, scale, device, given = request.run, request.scale, request.device, request.given
    began = time.perf_counter()
    seconds: dict[str, float] = {}
    shards = list_shards(input)
    inputs = [shard.path for shard in shards]  # the record's fingerprint is of these files
    out = Path(output)
    to_folder = writes_folder(input, out, scale)
    plan = plan_fit(input, shards, scale, columns, to_folder)
    if not to_folder and len(shards) > 1 and plan.kept:
        raise BadOptionError(f"{input} has {len(shards)} shards: write them to a folder "
                             "(-o DIR), one output shard per input shard")
    fit = None
    if scale.fit is not None:  # read and checked before any folder is made
        fit = load_fit(scale.fit, device)
        check_fit_options(fit.meta, scale.fit, method, params, request.cut, request.stages,
                          run, given)
        check_fit_columns(fit.meta, columns, scale.fit)
        method = fit.meta["method"]
    elif plan.kept:
        if method == AUTO_METHOD:  # as a fit picks for the vector columns the run reads
            method = _auto_method(columns, matcher, device)
        from ncclean.methods.base import make_method

        make_method(method, params)  # an unknown method or a bad parameter: before any work
    if needs_vectors(columns) and not plan.in_place:
        check_towers()
    check_shards(input, shards)
    id_name = id_column(shards[0], columns) if plan.kept else None  # pairs are keyed by id
    check_output(input, out, to_folder, shards, run.overwrite)
    check_save_fit(scale.save_fit)
    if scale.engine == "ray" and scale.ray_address:  # before the fit, not after it
        from ncclean.pipeline.ray_engine import check_address

        check_address(scale.ray_address)
    if not plan.kept:  # one shard, every pair fitted: its application is the fit's results
        return write_fitted(request, _fit(request, shards, None, None, None, progress, plan))
    from ncclean.provenance import input_sha256_soon

    fingerprint = input_sha256_soon(inputs, Path(input))  # beside the work, not after it
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
        if needs_vectors(columns) and not plan.in_place:
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
            warnings = [f"the saved fit {scale.fit}: {w}" for w in fit.meta.get("warnings", [])]
            warnings.append(f"the estimated noise rate is the saved fit's, read on its own "
                            f"sample ({fit.meta['sample']['n_pairs']:,} pairs), not on "
                            f"{input}; this corpus's partitions are its own")
        else:
            fitting = request.but(method=method, columns=columns)
            copies = None if plan.in_place else _copies([shards[k] for k in kept], columns,
                                                        scratch)
            state = _fit(fitting, shards, scan, id_name, scratch, progress, plan, copies)
            warnings = fit_warnings(state)
            fit = _keep(fitting, state, scan.total, scratch)
            if warnings:  # said again wherever the fit is applied
                fit.meta["warnings"] = warnings
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
    return _finish(request, out, to_folder, fit, reports, seconds, began, fingerprint, extra,
                   warnings)


def _auto_method(columns: Columns, matcher: MatcherOptions, device: str) -> str:
    """The method ``auto`` stands for on the vector columns a sharded run reads (its own, or
    the embed stage's), as a fit of every pair decides it
    (:func:`~ncclean.methods.choose.auto_method`)."""
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
    import pyarrow.parquet as pq

    from ncclean.data.held import copies_for
    from ncclean.pipeline.shard import scored_columns

    paths = [shard.path for shard in shards if shard.kind == "parquet"]
    if not paths:
        return None
    return copies_for(paths, scored_columns(columns, pq.read_schema(paths[0])), scratch)


def _fit(request: ScoreRequest, shards, scan: IdScan | None, id_name: str | None,
         scratch: Path | None, progress, plan: FitPlan, copies=None) -> dict:
    """The fit in memory (:func:`~ncclean.pipeline.score.fit_corpus`): on the request's input
    in place (``plan.in_place``), else on the fit sample written from ``shards`` to
    ``scratch`` (with the held-out pairs beside it when the method's application calibrates on
    them; ``copies``: see :func:`~ncclean.pipeline.sample.write_sample`), its stages sharing
    their search budget with the whole corpus."""
    from ncclean.pipeline.score import fit_corpus

    if plan.in_place:
        return fit_corpus(request, progress)
    from ncclean.methods.base import make_method

    chosen = make_method(request.method, request.params)
    sample = scratch / "sample.parquet"
    write_sample(shards, scan, id_name, request.scale.sample_size, sample,
                 scratch / HELD_OUT if chosen.application.held_out else None, copies)
    return fit_corpus(request.but(input=sample, corpus_pairs=scan.total), progress)


HELD_OUT = "held-out.parquet"


def _keep(request: ScoreRequest, state: dict, n_corpus: int, scratch: Path):
    """The :class:`~ncclean.pipeline.fit.Fit` kept from the fit ``state`` of a corpus of
    ``n_corpus`` pairs (:func:`~ncclean.pipeline.keep.fit_from_state`), recalibrated on the
    held-out pairs when they were written to ``scratch``."""
    from ncclean.methods.base import make_method
    from ncclean.pipeline.fit import check_towers_apply
    from ncclean.pipeline.keep import fit_from_state
    from ncclean.stages.run import significance_mode

    stages, run, device = request.stages, request.run, request.device
    check_towers_apply(state["config"])
    fit = fit_from_state(state, make_method(request.method, request.params), run.seed,
                         significance_mode(stages, state["result"]), stages.pseudo_captions,
                         n_corpus=n_corpus, device=device)
    fit.meta["sample"] |= {"n_corpus": n_corpus, "fit_sample": request.scale.sample_size}
    held_out = scratch / HELD_OUT
    if held_out.exists():
        from ncclean.data.corpus import read_corpus
        from ncclean.models.features import build_features
        from ncclean.pipeline.keep import calibrate, rescale_sample

        corpus = read_corpus(held_out, request.columns, strict=False, image_size=None,
                             cache_dir=None)
        posterior = calibrate(fit, corpus, build_features(corpus, state["config"],
                                                          cache_dir=None, device=device), device)
        if posterior is not None:  # the sample's clean_prob on the same scale (keep.py)
            rescale_sample(fit, state, posterior)
    return fit


def _finish(request: ScoreRequest, out: Path, to_folder: bool, fit, reports: list[dict],
            seconds: dict, began: float, fingerprint, extra: dict | None = None,
            warnings: list[str] | None = None):
    """The run record (written beside the output) and the summary of the whole run, with the
    fit's ``warnings``; ``fingerprint()``: the input's fingerprint
    (:func:`~ncclean.provenance.input_sha256_soon`)."""
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
                "sample": fit.meta["sample"], "signal": fit.meta["signal"],
                **{key: fit.meta[key] for key in ("alignment", "scripts") if key in fit.meta}},
        "engine": scale.engine, "write": run.write,
        "options": request.options(),
        **request.provenance([], input, fingerprint),
        "estimated_noise_rate": fit.meta["noise_rate"],
        "estimated_noise_ci95": fit.meta.get("noise_interval"), "cut": fit.meta["cut"],
        "noise_estimated_on": "the saved fit's sample" if scale.fit else "this run's fit",
        "n_rows": n_rows, "partition_counts": counts, "warnings": list(warnings or []),
        "detection_vs_noisy_gt": (detection := _detection([r["output"] for r in reports])),
        "shards": [{k: v for k, v in r.items() if k != "partition_counts"} for r in reports],
        "seconds": seconds,
    } | (extra or {})
    write_json(out / RUN_SIDECAR if to_folder else sidecar_path(out), record)
    return ScoreSummary(
        input=Path(input), output=out, method=fit.meta["method"], device=device, n_pairs=n_rows,
        n_invalid=counts["invalid"], partition_counts=counts, noise_rate=fit.meta["noise_rate"],
        noise_interval=fit.meta.get("noise_interval"), seconds=seconds,
        n_pseudo_captions=sum(r["n_pseudo_captions"] for r in reports),
        warnings=list(warnings or []), detection=detection,
        resumed=(sum(bool(r.get("skipped")) for r in reports), len(reports)) if to_folder
        else None)


DETECTION_MAX_PAIRS = 20_000_000
"""The most pairs whose detection against ``noisy_gt`` a sharded run measures (three columns
of each read into memory: about 10 bytes a pair)."""


def _detection(outputs: list[str]) -> dict | None:
    """Detection against ``noisy_gt`` (:func:`~ncclean.evaluate.detection.detection_metrics`)
    over the valid pairs of every output shard, as a run on one file measures it, where the
    input had the column (injected noise) and holds at most :data:`DETECTION_MAX_PAIRS`."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ncclean.data.results import INVALID, NOISY
    from ncclean.data.schema import NOISY_GT
    from ncclean.evaluate.detection import detection_metrics

    if not outputs or NOISY_GT not in pq.read_schema(outputs[0]).names or sum(
            pq.ParquetFile(path).metadata.num_rows for path in outputs) > DETECTION_MAX_PAIRS:
        return None
    table = pa.concat_tables(pq.read_table(path, columns=[NOISY_GT, "clean_prob", "partition"])
                             .replace_schema_metadata(None) for path in outputs)
    parts = table.column("partition").cast(pa.string())
    valid = pc.not_equal(parts, INVALID).to_numpy(zero_copy_only=False)
    truth = pc.fill_null(table.column(NOISY_GT), False).to_numpy(zero_copy_only=False)[valid]
    clean_prob = table.column("clean_prob").to_numpy(zero_copy_only=False)[valid]
    flagged = pc.equal(parts, NOISY).to_numpy(zero_copy_only=False)[valid]
    return detection_metrics(truth.astype(bool), clean_prob, flagged=flagged).as_dict()
