"""The ``ray`` engine: Ray Data maps the shard jobs over an actor pool; each actor loads the fit
once and writes each of its shards through :func:`ncclean.pipeline.engines.apply_shard`, so the
output names, atomic writes, completion marks and bytes are the local engine's.

Without ``--ray-address`` a local Ray cluster is started for the run (two CPUs unless the
``NCCLEAN_RAY_CPUS`` environment variable says otherwise) and stopped after it; with one, the
cluster's workers must have ncclean installed and see the input and output paths (a shared file
system or object store mount). The fit itself runs once, on the driver, before this engine.

Ray replaces the process's SIGTERM handler when it starts (its own exits with code 15, and its
core prints a stack dump), so the caller's SIGINT and SIGTERM handlers are put back once it has
started: an interrupted run ends as the local engine's does. Such a run stops its own cluster
first, then keeps the shards complete on disk and removes what its workers left (their
temporary files and scratch folders, named by their process ids).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
import warnings
from pathlib import Path

from ncclean import errors
from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError, NcCleanError
from ncclean.options import RunOptions
from ncclean.progress import Progress, no_progress


class ShardApplier:
    """A Ray Data actor: loads the fit at ``fit_dir`` once, then applies it to every shard job
    of each batch it is given (one job per row). An :class:`NcCleanError` comes back in the
    job's report, by name and message, for :func:`run_ray` to raise."""

    def __init__(self, fit_dir: str, columns: Columns, run: RunOptions, device: str) -> None:
        from ncclean.pipeline.fit import load_fit

        self.fit = load_fit(fit_dir, device)
        self.columns, self.run, self.device = columns, run, device

    def __call__(self, batch: dict) -> dict:
        from ncclean.data.shards import InputShard
        from ncclean.pipeline.shard import ShardJob, apply_shard

        reports = []
        for path, stem, kind, out, mark, extra in zip(
                batch["path"], batch["stem"], batch["kind"], batch["out"], batch["mark"],
                batch["extra"], strict=True):
            extra = json.loads(str(extra))
            decoded = extra.get("decoded")  # read only where this worker can see it
            job = ShardJob(InputShard(Path(path), str(stem), str(kind)), Path(out), bool(mark),
                           tuple(extra["duplicates"]), tuple(extra["hidden"]),
                           tuple(extra["nulled"]), Path(decoded) if decoded else None)
            try:
                report = apply_shard(self.fit, job, self.columns, self.run, self.device)
            except NcCleanError as error:  # sent back as data: Ray's wrapping loses its type
                report = {"error": [type(error).__name__, str(error)]}
            reports.append(json.dumps(report))
        return {"index": batch["index"], "report": reports}


def _import_ray():
    try:
        import ray
    except ImportError:
        raise BadOptionError("--engine ray needs Ray: pip install 'ncclean[ray]'") from None
    return ray


@contextlib.contextmanager
def _session(address: str | None):
    """Ray, connected to ``address`` or to a local cluster started here (and stopped after,
    its worker processes with it); yields whether the cluster is this run's own. The caller's
    SIGINT and SIGTERM handlers are the ones in place while it runs (:func:`_handlers`)."""
    ray = _import_ray()
    started = not ray.is_initialized()
    handlers = _handlers()
    try:
        if started:
            _init(ray, address, handlers)
        yield started and not address
    finally:
        if started:
            ray.shutdown()  # a cluster of our own: its raylet stops the workers
        _restore(handlers)


def _init(ray, address: str | None, handlers: dict) -> None:
    """``ray.init`` for :func:`_session`, then the caller's ``handlers`` back in place: Ray's
    SIGTERM handler exits with code 15 (the stack dump is its core's), skipping the caller's
    clean-up. A SIGTERM that Ray's handler took while starting is sent again, to the caller's."""
    try:
        if address:
            check_address(address)
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
            except (ConnectionError, RuntimeError, ValueError) as error:
                reason = " ".join(str(error).split())
                raise BadOptionError(
                    f"--ray-address {address}: cannot join a Ray cluster there ({reason}); "
                    "start one with 'ray start --head', and where it asks for a token run "
                    "with RAY_AUTH_MODE=token") from None
        else:
            root = str(Path(__file__).resolve().parents[2])  # this ncclean, for the workers
            env = {"PYTHONPATH": os.pathsep.join(filter(None, [root,
                                                               os.environ.get("PYTHONPATH")]))}
            if "OMP_NUM_THREADS" in os.environ:
                env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
            ray.init(num_cpus=int(os.environ.get("NCCLEAN_RAY_CPUS", "2")),
                     include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     runtime_env={"env_vars": env})
    except SystemExit as exit_:
        _restore(handlers)
        if exit_.code == signal.SIGTERM and signal.SIGTERM in handlers:
            os.kill(os.getpid(), signal.SIGTERM)  # the caller's handler runs (and raises)
        raise
    _restore(handlers)


def _handlers() -> dict:
    """The SIGINT and SIGTERM handlers in place now (none off the main thread, where neither
    Ray nor we can set them, or where one was not set from Python)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    return {sig: handler for sig, handler in handlers.items() if handler is not None}


def _restore(handlers: dict) -> None:
    """Put ``handlers`` (:func:`_handlers`) back in place: setting one from Python also takes
    the signal back from a handler that Ray's core installed in C (the one printing the dump)."""
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def check_address(address: str) -> None:
    """:class:`BadOptionError` at once when nothing listens at a ``HOST:PORT`` address (Ray
    itself retries for minutes); ``auto`` and other forms are left to Ray."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise BadOptionError(f"--ray-address {address}: no Ray cluster answers there "
                             f"({error.strerror or error}); start one with 'ray start --head' "
                             "or leave --ray-address out for a local one") from None


def _map(ray, actor, kwargs: dict, items: list[dict], workers: int, own: bool,
         **resources) -> list[dict]:
    """``items`` through an actor pool of ``workers`` ``actor``s (one item per call); their
    reports in item order; the first error of ours (in item order, as the local engine stops
    at) raised as itself, and one that Ray wrapped unwrapped (:func:`_ours`)."""
    # a cluster of our own: no actor restarts (a restarted actor would meet the same error),
    # which also keeps Ray's warning about restarting them off the terminal
    restarts = {"max_restarts": 0} if own else {}
    try:
        with _quiet_ray_data(), warnings.catch_warnings():
            # max_restarts has no named parameter in map_batches yet: Ray's deprecation of the
            # remote-args form says nothing a user can act on
            warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
            rows = ray.data.from_items(items).map_batches(
                actor, fn_constructor_kwargs=kwargs, batch_size=1, concurrency=workers,
                **resources, **restarts).take_all()
    except BaseException as error:
        ours = _ours(error)
        if ours is None or ours is error:
            raise
        raise ours from error
    reports = [json.loads(row["report"]) for row in sorted(rows, key=lambda r: int(r["index"]))]
    failed = next((report["error"] for report in reports if "error" in report), None)
    if failed is not None:
        raise getattr(errors, failed[0], NcCleanError)(failed[1])
    return reports


def run_ray(fit_dir: Path, fit_hash: str, jobs: list, columns: Columns, run: RunOptions,
            device: str, address: str | None = None,
            progress: Progress = no_progress) -> list[dict]:
    """Apply the fit at ``fit_dir`` to ``jobs`` on Ray Data; the reports in job order. An error
    of ours in a worker (bad input, a full disk) is raised here as itself, not wrapped in Ray's
    exceptions; Ray's own log lines stay in its session's log files unless they are errors.
    A run that fails or is interrupted keeps the shards complete on disk (its cluster, when its
    own, stopped first: no worker writes after that) and removes what its workers left."""
    own = False
    try:
        with _session(address) as own:
            return _apply(fit_dir, fit_hash, jobs, columns, run, device, own, progress)
    except BaseException:
        from ncclean.data.atomic import mark_complete
        from ncclean.pipeline.shard import found_complete

        if own:
            _remove_workers_files({job.out.parent for job in jobs})
        for job in jobs:  # the workers' notes are in their processes: look at the files
            if found_complete(job, fit_hash, run.write):
                mark_complete(job.out)
        raise


def _apply(fit_dir: Path, fit_hash: str, jobs: list, columns: Columns, run: RunOptions,
           device: str, own: bool, progress: Progress) -> list[dict]:
    import ray

    items = [{"index": k, "path": str(job.shard.path), "stem": job.shard.stem,
              "kind": job.shard.kind, "out": str(job.out), "mark": job.mark,
              "extra": json.dumps({"duplicates": list(job.duplicates),
                                   "hidden": list(job.hidden),
                                   "nulled": list(job.nulled),
                                   "decoded": str(job.decoded) if job.decoded else None})}
             for k, job in enumerate(jobs)]
    workers = max(1, min(len(jobs), int(ray.available_resources().get("CPU", 1))))
    progress("apply", 0, len(jobs), f"ray, {workers} actors")
    reports = _map(ray, ShardApplier, {"fit_dir": str(fit_dir), "columns": columns,
                                       "run": run, "device": device},
                   items, workers, own, num_cpus=1)
    progress("apply", len(jobs), len(jobs))
    return reports


WORKERS_EXIT_S = 10.0
"""How long a stopped cluster's workers are given to exit (they do within a second or two of
their raylet) before what they left in the output folders is removed."""


def _remove_workers_files(folders: set[Path], timeout: float = WORKERS_EXIT_S) -> None:
    """Remove the temporary files and scratch folders that the workers of a stopped local
    cluster left in ``folders``, once their processes are gone (waiting for them up to
    ``timeout`` seconds): each name carries its writer's process id. This process's own are
    its caller's to remove; another live run's are kept."""
    from ncclean.data.atomic import (
        SCRATCH_MARK,
        TEMP_MARK,
        remove_stale_scratch,
        remove_stale_temps,
    )

    mine = (f"{TEMP_MARK}{os.getpid()}-", f"{SCRATCH_MARK}{os.getpid()}-")
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for folder in filter(Path.is_dir, folders):
            remove_stale_scratch(folder)
            for entry in folder.iterdir():
                name = entry.name
                temp = name.endswith(".tmp") and TEMP_MARK in name  # .<output>.ncclean-<pid>-...
                if temp:
                    remove_stale_temps(folder / name[1:name.rindex(TEMP_MARK)])
                if ((temp or name.startswith(SCRATCH_MARK)) and entry.exists()
                        and not any(mark in name for mark in mine)):
                    left.append(entry)  # a writer still alive
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.1)


class ShardEmbedder:
    """A Ray Data actor: loads the encoder once (on its GPU when it was given one), then embeds
    the shard of each job it is given (:func:`ncclean.pipeline.vectors.embed_shard`)."""

    def __init__(self, columns: Columns, spec, work_dir: str, device: str) -> None:
        from ncclean.embed import Encoder

        self.columns, self.spec, self.scratch, self.device = columns, spec, Path(work_dir), device
        self.encoder = Encoder(spec.encoder, spec.clip_spec, device, spec.max_pixels)

    def __call__(self, batch: dict) -> dict:
        from ncclean.data.shards import InputShard
        from ncclean.pipeline.embed_job import EmbedJob, embed_shard

        reports = []
        for path, stem, kind, dest, key in zip(batch["path"], batch["stem"], batch["kind"],
                                               batch["dest"], batch["key"], strict=True):
            job = EmbedJob(InputShard(Path(path), str(stem), str(kind)), Path(dest), str(key))
            try:
                embed_shard(job, self.columns, self.spec, self.encoder, self.scratch,
                            self.device)
                report: dict = {}
            except NcCleanError as error:
                report = {"error": [type(error).__name__, str(error)]}
            reports.append(json.dumps(report))
        return {"index": batch["index"], "report": reports}


def embed_on_ray(jobs: list, columns: Columns, spec, scratch: Path, device: str,
                 address: str | None = None, progress: Progress = no_progress) -> None:
    """Embed ``jobs`` (:class:`~ncclean.pipeline.vectors.EmbedJob`) on an actor pool: one actor
    per GPU where the cluster has GPUs (each on its own, ``cuda``), else one per CPU."""
    with _session(address) as own:
        import ray

        items = [{"index": k, "path": str(job.shard.path), "stem": job.shard.stem,
                  "kind": job.shard.kind, "dest": str(job.dest), "key": job.key}
                 for k, job in enumerate(jobs)]
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus:
            workers, resources, device = min(len(jobs), gpus), {"num_gpus": 1}, "cuda"
        else:
            workers = max(1, min(len(jobs), int(ray.available_resources().get("CPU", 1))))
            resources = {"num_cpus": 1}
        progress("embedding shards", 0, len(jobs),
                 f"ray, {workers} {'GPU ' if gpus else ''}actors")
        _map(ray, ShardEmbedder, {"columns": columns, "spec": spec,
                                  "work_dir": str(scratch), "device": device},
             items, workers, own, **resources)
        progress("embedding shards", len(jobs), len(jobs))


def _ours(error: BaseException) -> BaseException | None:
    """The error of ncclean's (an :class:`NcCleanError`, a full disk or no permission) that
    Ray wrapped in ``error`` (a ``RayTaskError``, a ``UserCodeException``, or both at once),
    ``None`` when there is none: the CLI then reports ``error`` as the bug it is."""
    from ray.exceptions import RayError

    from ncclean.data.atomic import is_write_error

    seen, todo = set(), [error]
    while todo:
        inner = todo.pop()
        if inner is None or id(inner) in seen:
            continue
        seen.add(id(inner))
        if not isinstance(inner, RayError) and (isinstance(inner, NcCleanError)
                                                or is_write_error(inner)):
            return inner
        todo += [getattr(inner, "cause", None), inner.__cause__, inner.__context__]
    return None


@contextlib.contextmanager
def _quiet_ray_data():
    """Ray Data without its progress bars and execution notes, and without the log line that
    announces a worker's exception (which :func:`run_ray` raises itself); other errors it logs
    still show. Its settings are restored afterwards."""
    import ray.data

    context = ray.data.DataContext.get_current()
    saved = context.enable_progress_bars, context.print_on_execution_start
    context.enable_progress_bars = context.print_on_execution_start = False
    consoles = [h for h in logging.getLogger("ray.data").handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
    levels = [h.level for h in consoles]
    for handler in consoles:
        handler.setLevel(max(handler.level, logging.ERROR))
        handler.addFilter(_not_user_code)
    try:
        yield
    finally:
        context.enable_progress_bars, context.print_on_execution_start = saved
        for handler, level in zip(consoles, levels, strict=True):
            handler.setLevel(level)
            handler.removeFilter(_not_user_code)


def _not_user_code(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Exception occurred in user code")
