"""The ``ray`` engine: Ray Data maps the shard jobs over an actor pool; each actor loads the fit
once and writes each of its shards through :func:`ncclean.pipeline.engines.apply_shard`, so the
output names, atomic writes, completion marks and bytes are the local engine's.

Without ``--ray-address`` a local Ray cluster is started for the run (two CPUs unless the
``NCCLEAN_RAY_CPUS`` environment variable says otherwise) and stopped after it; with one, the
cluster's workers must have ncclean installed and see the input and output paths (a shared file
system or object store mount). The fit itself runs once, on the driver, before this engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError
from ncclean.options import RunOptions
from ncclean.progress import Progress, no_progress


class ShardApplier:
    """A Ray Data actor: loads the fit at ``fit_dir`` once, then applies it to every shard job
    of each batch it is given (one job per row)."""

    def __init__(self, fit_dir: str, columns: Columns, run: RunOptions, device: str) -> None:
        from ncclean.pipeline.fit import load_fit

        self.fit = load_fit(fit_dir, device)
        self.columns, self.run, self.device = columns, run, device

    def __call__(self, batch: dict) -> dict:
        from ncclean.data.shards import InputShard
        from ncclean.pipeline.engines import ShardJob, apply_shard

        reports = []
        for path, stem, kind, out, mark in zip(batch["path"], batch["stem"], batch["kind"],
                                               batch["out"], batch["mark"], strict=True):
            job = ShardJob(InputShard(Path(path), str(stem), str(kind)), Path(out), bool(mark))
            reports.append(json.dumps(apply_shard(self.fit, job, self.columns, self.run,
                                                  self.device)))
        return {"index": batch["index"], "report": reports}


def run_ray(fit_dir: Path, fit_hash: str, jobs: list, columns: Columns, run: RunOptions,
            device: str, address: str | None = None,
            progress: Progress = no_progress) -> list[dict]:
    """Apply the fit at ``fit_dir`` to ``jobs`` on Ray Data; the reports in job order."""
    try:
        import ray
    except ImportError:
        raise BadOptionError("--engine ray needs Ray: pip install 'ncclean[ray]'") from None
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            root = str(Path(__file__).resolve().parents[2])  # this ncclean, for the workers
            env = {"PYTHONPATH": os.pathsep.join(filter(None, [root,
                                                               os.environ.get("PYTHONPATH")]))}
            if "OMP_NUM_THREADS" in os.environ:
                env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
            ray.init(num_cpus=int(os.environ.get("NCCLEAN_RAY_CPUS", "2")),
                     include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": env})
    try:
        items = [{"index": k, "path": str(job.shard.path), "stem": job.shard.stem,
                  "kind": job.shard.kind, "out": str(job.out), "mark": job.mark}
                 for k, job in enumerate(jobs)]
        workers = max(1, min(len(jobs), int(ray.available_resources().get("CPU", 1))))
        progress("apply", 0, len(jobs), f"ray, {workers} actors")
        rows = ray.data.from_items(items).map_batches(
            ShardApplier, fn_constructor_kwargs={"fit_dir": str(fit_dir), "columns": columns,
                                                 "run": run, "device": device},
            batch_size=1, concurrency=workers, num_cpus=1).take_all()
        progress("apply", len(jobs), len(jobs))
        reports = sorted(rows, key=lambda row: int(row["index"]))
        return [json.loads(row["report"]) for row in reports]
    finally:
        if started:
            ray.shutdown()
