"""Engines that apply a fit to every input shard: ``local`` (shard by shard in this process) and
``ray`` (Ray Data: a dataset of shard jobs, ``map_batches`` over an actor pool in which every
actor loads the fit once; each actor writes its shards through :func:`apply_shard`, so names,
atomic writes and completion marks are the same with either engine).

A shard whose output is complete (:func:`ncclean.data.shards.output_complete`) is skipped, so a
rerun after an interruption writes only the rest; every shard is written by one call, so two
engines given one fit write the same bytes. The work on one shard is
:mod:`ncclean.pipeline.shard`'s; the outputs a run plans are noted
(:func:`ncclean.data.atomic.plan_outputs`) so that an interrupted run can say what it kept.
"""

from __future__ import annotations

from pathlib import Path

from ncclean.data.atomic import plan_outputs
from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError
from ncclean.options import RunOptions
from ncclean.pipeline.shard import ShardJob, apply_shard
from ncclean.progress import Progress, no_progress


def run_local(fit_dir: Path, fit_hash: str, jobs: list[ShardJob], columns: Columns,
              run: RunOptions, device: str, address: str | None = None,
              progress: Progress = no_progress) -> list[dict]:
    """Every job in this process, in order; the fit is loaded once."""
    from ncclean.pipeline.fit import load_fit

    fit = load_fit(fit_dir, device)
    reports = []
    for k, job in enumerate(jobs):
        progress("apply", k, len(jobs), job.shard.stem)
        reports.append(apply_shard(fit, job, columns, run, device))
    progress("apply", len(jobs), len(jobs))
    return reports


def run_engine(engine: str, fit_dir: Path, fit_hash: str, jobs: list[ShardJob],
               columns: Columns, run: RunOptions, device: str, address: str | None,
               progress: Progress = no_progress) -> list[dict]:
    """Apply the fit saved at ``fit_dir`` to ``jobs`` with ``engine`` (:data:`ENGINES`)."""
    if engine not in ENGINES:
        raise BadOptionError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    plan_outputs(job.out for job in jobs if job.mark)  # kept complete if the run stops early
    return ENGINES[engine](fit_dir, fit_hash, jobs, columns, run, device, address, progress)


def _run_ray(*args, **kwargs) -> list[dict]:
    from ncclean.pipeline.ray_engine import run_ray

    return run_ray(*args, **kwargs)


ENGINES = {"local": run_local, "ray": _run_ray}
