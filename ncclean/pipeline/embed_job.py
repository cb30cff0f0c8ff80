"""One shard embedded into a Parquet file of its rows with their vectors: the unit of work of the
embed stage and of ``ncclean embed`` on a corpus of shards, on any engine
(:mod:`ncclean.pipeline.vectors`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.parquet as pq

from ncclean.data.schema import Columns
from ncclean.data.shards import InputShard, read_shard

IMAGE_EMB, TEXT_EMB = "image_emb", "text_emb"
VERSION = "4"  # bump when what an embedded shard holds changes


@dataclass(frozen=True)
class EmbedSpec:
    """How shards are embedded: the encoder (:data:`ncclean.embed.EMBEDDERS`) and its CLIP
    weights, the vectors' dtype and column names, the largest image decoded."""

    encoder: str
    clip_spec: object = None
    half: bool = True
    image_col: str = IMAGE_EMB
    text_col: str = TEXT_EMB
    max_pixels: int = 0
    arithmetic: str = ""  # the image tower's (models.registry.frozen_arithmetic)

    def identity(self) -> str:
        """What an embedded shard's bytes depend on besides the input's (its cache key)."""
        clip = "" if self.clip_spec is None else f" {self.clip_spec!r}"
        arithmetic = f" {self.arithmetic}" if self.arithmetic else ""
        return (f"{self.encoder}{clip} {'float16' if self.half else 'float32'} "
                f"{self.image_col}/{self.text_col}{arithmetic} v{VERSION}")


@dataclass(frozen=True)
class EmbedJob:
    """One shard to embed into ``dest``, under ``key`` (:func:`shard_key`)."""

    shard: InputShard
    dest: Path
    key: str


def shard_key(shard: InputShard, identity: str) -> str:
    """A hash of the shard's bytes (and, for a saved dataset or a tar, of the files read with
    it) and of the towers: the name its vectors are cached under."""
    digest = hashlib.sha256(identity.encode() + b"\0" + shard.kind.encode() + b"\0")
    files = [shard.path]
    if shard.kind == "webdataset" and shard.path.with_suffix(".parquet").exists():
        files.append(shard.path.with_suffix(".parquet"))  # img2dataset's columns, read with it
    for path in files:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:32]


def done(job: EmbedJob) -> bool:
    """Whether ``job.dest`` holds the vectors of ``job.key`` (its record names the key)."""
    import json

    from ncclean.data.parquet import sidecar_path

    record = sidecar_path(job.dest)
    if not job.dest.exists() or not record.exists():
        return False
    try:
        return json.loads(record.read_text()).get("shard_key") == job.key
    except (OSError, ValueError):
        return False


def embed_shard(job: EmbedJob, columns: Columns, spec: EmbedSpec, encoder, scratch: Path,
                device: str) -> None:
    """Write ``job.shard`` with its vectors to ``job.dest`` (atomically), its record naming
    the job's key."""
    from ncclean.data.parquet import open_pairs
    from ncclean.data.schema import resolve_columns
    from ncclean.embed import embed_pairs, embeds_images

    path = job.shard.path
    if job.shard.kind != "parquet":  # a tar or an Arrow file, as a Parquet file to stream
        path = scratch / f"to-embed-{job.key}.parquet"
        pq.write_table(read_shard(job.shard), path)
    try:
        source = open_pairs(path)
        if job.shard.kind != "parquet":  # relative image paths and messages name the input
            source = replace(source, path=job.shard.path)
        resolved = resolve_columns(Columns(caption=columns.caption, image=columns.image,
                                           allow_absolute_paths=columns.allow_absolute_paths),
                                   source.schema, need_image=embeds_images(spec.encoder))
        embed_pairs(source, resolved, job.dest, encoder=spec.encoder, clip_spec=spec.clip_spec,
                    half=spec.half, image_col=spec.image_col, text_col=spec.text_col,
                    device=device, max_pixels=spec.max_pixels, loaded=encoder,
                    record={"shard_key": job.key, "input_shard": str(job.shard.path)})
    finally:
        if path != job.shard.path:
            path.unlink(missing_ok=True)
