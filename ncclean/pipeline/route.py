"""The form of a scoring run's output, decided from the input, the output and the scale options
alone, before anything is read but footers: one file, or a folder with one output shard per
input shard (:func:`writes_folder`), and which output checks run first (:func:`wants_shards`).
Every run goes through the one pipeline (:mod:`ncclean.pipeline.sharded`), whichever form.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.schema import Columns
from ncclean.data.shards import list_shards
from ncclean.errors import NcCleanError
from ncclean.options import ScaleOptions

PathLike = str | os.PathLike


def wants_shards(input: PathLike, output: PathLike, scale: ScaleOptions | None) -> bool:
    """Whether a scoring run's output is planned shard by shard (checked by
    :func:`ncclean.pipeline.preflight.check_output`, a folder when :func:`writes_folder`):
    anything of ``scale`` asked for, an output folder (an existing one, or a name without a
    suffix for a folder input), or webdataset tars or a saved Hugging Face dataset in. Else the
    output is one file, checked as :func:`ncclean.pipeline.score.prepare_output` checks it."""
    out, source = Path(output), Path(input)
    if scale is not None and scale.asked:
        return True
    if out.is_dir() or (source.is_dir() and out.suffix == ""):
        return True
    from ncclean.data.shards import is_retrieval_folder

    return source.suffix == ".tar" or (source.is_dir() and (
        any(source.glob("*.tar")) or any(source.rglob("state.json"))
        or is_retrieval_folder(source)))


def writes_folder(input: PathLike, output: PathLike, scale: ScaleOptions | None) -> bool:
    """Whether a scoring run writes a folder, one output shard per input shard (else one file):
    a run planned shard by shard (:func:`wants_shards`) to an existing folder or a name
    without the ``.parquet`` suffix."""
    out = Path(output)
    return wants_shards(input, out, scale) and (out.is_dir() or out.suffix != ".parquet")


def resolve_scale(input: PathLike, output: PathLike | None, columns: Columns,
                  scale: ScaleOptions | None) -> ScaleOptions | None:
    """``scale`` with ``--fit-sample auto`` resolved: :data:`~ncclean.options.AUTO_FIT_SAMPLE`
    when the corpus is one Parquet file or a folder written to a folder (``output``), has more
    pairs than that, an id column and both vector columns (every method has a fit); else
    ``scale`` unchanged (every pair fitted)."""
    from ncclean.options import AUTO_FIT_SAMPLE

    scale = scale or ScaleOptions()
    if scale.fit_sample != "auto" or scale.fit is not None or output is None:
        return scale
    if not (columns.image_emb and columns.text_emb):
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
        return scale  # the fit reports what is wrong with the input
    if n <= AUTO_FIT_SAMPLE or (columns.id or "id") not in names:
        return scale
    from dataclasses import replace

    return replace(scale, fit_sample=AUTO_FIT_SAMPLE)

