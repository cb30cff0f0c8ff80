"""The embed stage of a sharded run: a corpus of images and captions without vectors gets them
from the default pipeline's offline towers (ImageNet EfficientNet-Lite0 for images, the bundled
multilingual-e5-small for captions: ``ncclean embed``'s ``imagenet+e5``), shard by shard, before
the fit on a sample and its application read them as vector columns.

Each shard's vectors are written once, with the shard's rows and columns, to a Parquet file
named by a hash of the shard's bytes and the towers (:func:`shard_key`) in the cache
(``--cache-dir``; with ``--no-cache``, the run's scratch folder): a rerun, an interrupted run
resumed, or a second method over the same corpus embeds nothing again. Memory holds one shard.
A tar's image bytes are not written to the output (its ``image_ref`` says where they are), nor
are the vectors (they stay in the cache); the rows whose image or caption could not be embedded
say why in ``embed_problem``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ncclean.data.schema import Columns
from ncclean.data.shards import InputShard
from ncclean.errors import BadOptionError
from ncclean.pipeline.embed_job import (
    IMAGE_EMB,
    TEXT_EMB,
    EmbedJob,
    EmbedSpec,
    done,
    embed_shard,
    shard_key,
)
from ncclean.progress import Progress, no_progress


@dataclass(frozen=True)
class Embedded:
    """What the embed stage gives: the shards to score (Parquet files with the vector columns,
    the input shards' stems), the columns to read them with, the columns not to write back
    (``hidden``), and how many shards were embedded now or found in the cache."""

    shards: list[InputShard]
    columns: Columns
    hidden: tuple[str, ...]
    computed: int
    cached: int
    identity: str


def needs_vectors(columns: Columns) -> bool:
    """Whether a sharded run must embed its corpus first (no vector columns named)."""
    return not (columns.image_emb and columns.text_emb)


def vector_columns(columns: Columns) -> Columns:
    """The columns a sharded run reads its vectors from: ``columns``' own, or the embed
    stage's."""
    if not needs_vectors(columns):
        return columns
    return replace(columns, image_emb=IMAGE_EMB, text_emb=TEXT_EMB)


def check_towers() -> None:
    """:class:`BadOptionError` unless the default pipeline's pretrained towers are installed."""
    from ncclean.models.registry import pretrained_installed

    if not pretrained_installed():
        raise BadOptionError("scoring images shard by shard embeds them with the pretrained "
                             "towers (pip install 'ncclean[imagenet,e5]'), which are not "
                             "installed; or name precomputed vectors with --image-emb-col and "
                             "--text-emb-col")


def embed_jobs(jobs: list[EmbedJob], columns: Columns, spec: EmbedSpec, scratch: Path,
               device: str, engine: str = "local", address: str | None = None,
               progress: Progress = no_progress) -> int:
    """Embed every job whose ``dest`` does not already hold its key's vectors (a rerun or a
    resumed run embeds nothing again), on ``engine``; returns how many were embedded. Memory
    holds one shard per worker."""
    todo = [job for job in jobs if not done(job)]
    if engine == "ray" and todo:
        from ncclean.pipeline.ray_engine import embed_on_ray

        embed_on_ray(todo, columns, spec, scratch, device, address, progress)
        return len(todo)
    encoder = None
    for k, job in enumerate(todo):
        progress("embedding shards", k, len(todo), job.shard.stem)
        if encoder is None:
            from ncclean.embed import Encoder

            encoder = Encoder(spec.encoder, spec.clip_spec, device, spec.max_pixels)
        embed_shard(job, columns, spec, encoder, scratch, device)
    progress("embedding shards", len(todo), len(todo))
    return len(todo)


def embed_stage(shards: list[InputShard], columns: Columns, cache: Path | None,
                scratch: Path, device: str, max_pixels: int, engine: str = "local",
                address: str | None = None, progress: Progress = no_progress) -> Embedded:
    """Every shard of ``shards`` with its vectors (see the module docstring); ``cache``: the
    folder embedded shards are kept in (``None``: ``scratch``, for this run only)."""
    from ncclean.embed import DEFAULT_ENCODER

    folder = (cache / "shard-vectors") if cache is not None else scratch / "shard-vectors"
    folder.mkdir(parents=True, exist_ok=True)
    from ncclean.models.registry import frozen_arithmetic

    spec = EmbedSpec(DEFAULT_ENCODER, max_pixels=max_pixels,
                     arithmetic=frozen_arithmetic(device))
    identity = spec.identity()
    jobs = []
    for shard in shards:
        key = shard_key(shard, identity)
        jobs.append(EmbedJob(shard, folder / f"{key}.parquet", key))
    computed = embed_jobs(jobs, columns, spec, scratch, device, engine, address, progress)
    return Embedded(shards=[InputShard(job.dest, job.shard.stem, "parquet") for job in jobs],
                    columns=vector_columns(columns), hidden=(IMAGE_EMB, TEXT_EMB),
                    computed=computed, cached=len(shards) - computed, identity=identity)


def embed_folder(input, output: Path, columns: Columns, spec: EmbedSpec, device: str,
                 engine: str = "local", address: str | None = None,
                 progress: Progress = no_progress):
    """``ncclean embed`` on a corpus of shards (a folder of Parquet files or tars, a tar, a
    saved dataset): each shard written with its vectors to ``output/<shard name>.parquet`` on
    ``engine``; a rerun embeds only the shards whose output is missing or was made from other
    bytes or another encoder. Returns an :class:`~ncclean.embed.EmbedSummary` of the whole."""
    import json
    import time

    from ncclean.data.atomic import make_folder, scratch_folder
    from ncclean.data.parquet import sidecar_path
    from ncclean.data.shards import list_shards
    from ncclean.embed import EmbedSummary
    from ncclean.pipeline.preflight import check_output, check_shards

    began = time.perf_counter()
    shards = list_shards(input)
    check_shards(input, shards)
    check_output(input, output, True)
    if engine == "ray" and address:
        from ncclean.pipeline.ray_engine import check_address

        check_address(address)
    identity = spec.identity()
    jobs = [EmbedJob(shard, output / f"{shard.stem}.parquet", shard_key(shard, identity))
            for shard in shards]
    for job in jobs:  # a shard of a sub-folder is written to the same sub-folder
        make_folder(job.dest.parent)
    with scratch_folder(output) as scratch:
        embed_jobs(jobs, columns, spec, scratch, device, engine, address, progress)
    records = [json.loads(sidecar_path(job.dest).read_text()) for job in jobs]
    problems: dict[str, int] = {}
    for record in records:
        for reason, count in record.get("problems", {}).items():
            problems[reason] = problems.get(reason, 0) + count
    first = records[0]
    return EmbedSummary(
        input=Path(input), output=output, layout="parquet", encoder=spec.encoder,
        n_rows=sum(r["n_rows"] for r in records), dtype=first["dtype"],
        image_dim=first["image_dim"], text_dim=first["text_dim"], image_col=first["image_col"],
        text_col=first["text_col"], problems=dict(sorted(problems.items())),
        seconds=time.perf_counter() - began)


def embed_input(input, output, *, encoder: str | None, caption_col: str, image_col: str,
                half: bool, layout: str, image_emb_col: str, text_emb_col: str,
                clip_model: str, clip_pretrained: str | None, clip_checkpoint,
                shard_rows: int, device: str, max_image_pixels: int | None, engine: str,
                ray_address: str | None, overwrite: bool = False,
                progress: Progress = no_progress):
    """:func:`ncclean.api.embed`: one file embedded whole, or a corpus of shards shard by
    shard into a folder (:func:`embed_folder`)."""
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.data.parquet import open_pairs
    from ncclean.data.schema import resolve_columns
    from ncclean.device import resolve_device
    from ncclean.embed import embed_clip_spec, embed_pairs, embeds_images
    from ncclean.errors import BadOptionError
    from ncclean.options import ENGINES

    if shard_rows < 1:
        raise BadOptionError(f"--shard-rows must be at least 1, got {shard_rows}")
    if image_emb_col == text_emb_col:
        raise BadOptionError("the image and text embedding columns need different names")
    if encoder is None:
        from ncclean.embed import default_encoder

        encoder = default_encoder(bool(clip_checkpoint or clip_pretrained))
    spec = embed_clip_spec(encoder, clip_model, clip_pretrained, clip_checkpoint)
    if engine not in ENGINES:
        raise BadOptionError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    source_path, out_path = Path(input), Path(output)
    if out_path.suffix != ".parquet" and layout == "parquet" and (
            source_path.is_dir() or source_path.suffix == ".tar"):
        from ncclean.models.registry import frozen_arithmetic

        device = resolve_device(device)
        return embed_folder(input, out_path, Columns(caption=caption_col, image=image_col),
                            EmbedSpec(encoder, spec, half, image_emb_col, text_emb_col,
                                      max_image_pixels or DEFAULT_MAX_PIXELS,
                                      frozen_arithmetic(device)),
                            device, engine, ray_address, progress)
    if engine != "local":
        raise BadOptionError("--engine ray embeds a corpus of shards (a folder or tars) into a "
                             "folder; one file is embedded here")
    if layout == "parquet":
        from ncclean.data.parquet import check_not_foreign

        check_not_foreign(output, overwrite, input)
    source = open_pairs(input)
    resolved = resolve_columns(Columns(caption=caption_col, image=image_col), source.schema,
                               need_image=embeds_images(encoder))
    return embed_pairs(source, resolved, Path(output), encoder=encoder, clip_spec=spec,
                       half=half, layout=layout, image_col=image_emb_col,
                       text_col=text_emb_col, shard_rows=shard_rows,
                       device=resolve_device(device),
                       max_pixels=max_image_pixels or DEFAULT_MAX_PIXELS, progress=progress)
