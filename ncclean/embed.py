"""``ncclean embed``: compute image and caption vectors once, so that scoring reads them.

The input streams batch by batch (never whole): images are decoded on the shared decoding pool
(:mod:`ncclean.data.pool`) and encoded in chunks, each batch's distinct captions once. Two
layouts:

- ``parquet``: the input's rows and columns with ``image_emb`` / ``text_emb`` added as fixed-size
  lists (float16 with ``half``; how LAION and DataComp ship embeddings) and ``embed_problem``
  (null, or why a vector is missing), in one file written atomically. Score it with
  ``--image-emb-col image_emb --text-emb-col text_emb``.
- ``clip-retrieval``: that tool's folder layout, ``img_emb/img_emb_{i}.npy``,
  ``text_emb/text_emb_{i}.npy`` and ``metadata/metadata_{i}.parquet``, row-aligned shards of
  ``shard_rows`` rows; the metadata holds every input column but the images, plus ``row`` (the
  input row) and ``embed_problem``. clip-retrieval leaves failed samples out; here every row stays
  and a failed one has a zero vector and its ``embed_problem``. The folder appears only when
  complete.

Encoders (:data:`EMBEDDERS`): ``imagenet+e5`` (the default: the default pipeline's towers,
EfficientNet-Lite ImageNet features for images and the bundled multilingual-e5-small for
captions, both offline, in one pass), ``clip`` (open_clip, both sides;
:mod:`ncclean.models.openclip`), ``e5`` (captions only) or ``imagenet`` (images only;
:mod:`ncclean.models.imagenet`).
Rows whose image or caption cannot be used keep a null vector on that side; no row is dropped.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.atomic import make_folder, scratch_folder
from ncclean.data.corpus import caption_problem
from ncclean.data.images import (
    DEFAULT_MAX_PIXELS,
    RowProblem,
    image_kind,
    image_values,
    load_image_bytes,
)
from ncclean.data.parquet import (
    PairSource,
    Shard,
    check_output_path,
    sidecar_path,
    write_json,
    write_pairs,
)
from ncclean.data.pool import image_pool
from ncclean.data.schema import ResolvedColumns
from ncclean.errors import BadOptionError, OutputError
from ncclean.models.registry import (
    ClipImage,
    ClipText,
    E5Text,
    ImagenetImage,
    ImageTower,
    TextTower,
)
from ncclean.progress import Progress, no_progress

LAYOUTS = ("parquet", "clip-retrieval")
PROBLEM_COL = "embed_problem"
_IMAGE_CHUNK = 256


# ``ncclean embed --encoder NAME``: the pretrained towers that embed images and captions
# (``None``: that side is not embedded).
EMBEDDERS: dict[str, tuple[type[ImageTower] | None, type[TextTower] | None]] = {
    "imagenet+e5": (ImagenetImage, E5Text),  # the default pipeline's towers, both offline
    "clip": (ClipImage, ClipText),
    "e5": (None, E5Text),
    "imagenet": (ImagenetImage, None),
}


def embeds_images(encoder: str) -> bool:
    """Whether ``ncclean embed --encoder encoder`` embeds images (so needs an image column)."""
    return encoder in EMBEDDERS and EMBEDDERS[encoder][0] is not None


def embed_clip_spec(encoder: str, model: str, pretrained: str | None,
                    checkpoint: str | None):
    """The checked :class:`ncclean.models.openclip.ClipSpec` for ``ncclean embed --encoder
    encoder`` when that encoder needs CLIP weights, else ``None``."""
    sides = [t for t in EMBEDDERS.get(encoder, ()) if t is not None]
    if not any("clip-weights" in t.needs for t in sides):
        return None
    from ncclean.models.openclip import ClipSpec

    return ClipSpec(model, pretrained, str(checkpoint) if checkpoint else None).check()


ENCODERS = tuple(EMBEDDERS)
DEFAULT_ENCODER = "imagenet+e5"


def default_encoder(clip_weights: bool) -> str:
    """The encoder ``embed`` uses when none is named: ``clip`` when CLIP weights are given,
    else :data:`DEFAULT_ENCODER`."""
    return "clip" if clip_weights else DEFAULT_ENCODER
"""What ``embed`` and a sharded run's embed stage use unless told otherwise."""


@dataclass
class EmbedSummary:
    input: Path
    output: Path
    layout: str
    encoder: str
    n_rows: int
    dtype: str
    image_dim: int | None
    text_dim: int | None
    image_col: str | None
    text_col: str | None
    problems: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self) | {"input": str(self.input), "output": str(self.output)}


class Encoder:
    """One batch's vectors, float32 rows: images and captions, by the pretrained towers of the
    encoder's name (either side may be absent: its ``*_dim`` is ``None``)."""

    def __init__(self, name: str, clip_spec, device: str, max_pixels: int):
        self.max_pixels = max_pixels
        image_tower, text_tower = EMBEDDERS[name]
        self.image = image_tower.load_encoder(clip_spec, device) if image_tower else None
        self.text = text_tower.load_encoder(clip_spec, device) if text_tower else None
        self.image_dim: int | None = self.image.dim if self.image else None
        self.text_dim: int | None = self.text.dim if self.text else None
        names = [e.identity for e in (self.image, self.text) if e is not None]
        self.identity = " + ".join(dict.fromkeys(names))

    def texts(self, captions: list[str]) -> np.ndarray:
        return self.text.texts(captions)

    def prepare(self, value, base: Path):
        return self.image.prepare(load_image_bytes(value, base), self.max_pixels)

    def images(self, prepared: list) -> np.ndarray:
        return self.image.images(prepared)


def _vector_array(vectors: np.ndarray, missing: np.ndarray, dtype) -> pa.Array:
    """``(n, d)`` rows as a fixed-size list array, null where ``missing``."""
    n, d = vectors.shape
    values = pa.array(vectors.astype(dtype, copy=False).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(values, d, mask=pa.array(missing))


class _BatchEmbedder:
    def __init__(self, encoder: Encoder, resolved: ResolvedColumns, kind, pool):
        self.encoder, self.resolved, self.kind, self.pool = encoder, resolved, kind, pool
        self.problems: dict[str, int] = {}

    def __call__(self, batch: pa.RecordBatch, base: Path) -> dict[str, object]:
        """``images`` and ``texts`` vectors (``None`` for a side the encoder does not embed),
        zero where that side's ``image_missing`` / ``text_missing``, and ``problems``: the
        reasons per row or ``None``."""
        n = batch.num_rows
        problems: list[list[str]] = [[] for _ in range(n)]
        image_missing = np.zeros(n, dtype=bool)
        text_of = np.full(n, -1)
        texts = None
        if self.encoder.text_dim is not None:
            captions = batch.column(self.resolved.caption).to_pylist()
            distinct: dict[str, int] = {}
            for i, text in enumerate(captions):
                problem = caption_problem(text)
                if problem:
                    problems[i].append(problem)
                else:
                    text_of[i] = distinct.setdefault(text, len(distinct))
            texts = np.zeros((n, self.encoder.text_dim), dtype=np.float32)
            if distinct:
                encoded = self.encoder.texts(list(distinct))
                texts[text_of >= 0] = encoded[text_of[text_of >= 0]]

        images = None
        if self.encoder.image_dim is not None:
            images = np.zeros((n, self.encoder.image_dim), dtype=np.float32)
            values = image_values(batch.column(self.resolved.image), self.kind)
            for start in range(0, n, _IMAGE_CHUNK):
                rows = range(start, min(n, start + _IMAGE_CHUNK))
                done = list(self.pool.map(lambda i: self._prepare(values[i], base), rows))
                good = [i for i, item in zip(rows, done) if not isinstance(item, str)]
                for i, item in zip(rows, done):
                    if isinstance(item, str):
                        problems[i].append(item)
                        image_missing[i] = True
                if good:
                    images[good] = self.encoder.images([done[i - start] for i in good])
        joined = ["; ".join(p) if p else None for p in problems]
        for reasons in problems:
            for reason in reasons:
                kind = reason.split(":")[0]
                self.problems[kind] = self.problems.get(kind, 0) + 1
        return {"images": images, "texts": texts, "image_missing": image_missing,
                "text_missing": text_of < 0, "problems": joined}

    def _prepare(self, value, base: Path):
        try:
            return self.encoder.prepare(value, base)
        except RowProblem as problem:
            return str(problem)


def embed_pairs(source: PairSource, resolved: ResolvedColumns, output: Path, *, encoder: str,
                clip_spec=None, half: bool = False, layout: str = "parquet",
                image_col: str = "image_emb", text_col: str = "text_emb",
                shard_rows: int = 1_000_000, batch_rows: int = 2048, device: str = "cpu",
                max_pixels: int = DEFAULT_MAX_PIXELS, progress: Progress = no_progress,
                loaded: Encoder | None = None, record: dict | None = None) -> EmbedSummary:
    """Embed every row of ``source`` (see the module docstring) and write ``output``;
    ``loaded``: an :class:`Encoder` of ``encoder`` already loaded, for many calls; ``record``:
    more entries for the output's record."""
    if encoder not in ENCODERS:
        raise BadOptionError(f"--encoder must be one of {', '.join(ENCODERS)}, got {encoder!r}")
    if layout not in LAYOUTS:
        raise BadOptionError(f"--layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if EMBEDDERS[encoder][0] is not None and not resolved.image:
        raise BadOptionError(f"--encoder {encoder} embeds images: the input needs an image "
                             "column (--image-col)")
    if layout == "parquet":
        output = check_output_path(output, source)
    elif output.exists():
        raise OutputError(f"{output} exists; give a new folder for the clip-retrieval layout")
    began = time.perf_counter()
    chosen = loaded or Encoder(encoder, clip_spec, device, max_pixels)
    dtype = np.float16 if half else np.float32
    kind = image_kind(resolved.image, source.schema.field(resolved.image).type) \
        if chosen.image_dim is not None else None
    n = source.n_rows
    with image_pool() as pool:
        embedder = _BatchEmbedder(chosen, resolved, kind, pool)
        progress("embedding", 0, n)

        def compute(shard: Shard, first_row: int, batch: pa.RecordBatch) \
                -> dict[str, pa.Array]:
            got = embedder(batch, shard.path.parent)
            made = {PROBLEM_COL: pa.array(got["problems"], pa.string())}
            if got["texts"] is not None:
                made[text_col] = _vector_array(got["texts"], got["text_missing"], dtype)
            if got["images"] is not None:
                made[image_col] = _vector_array(got["images"], got["image_missing"], dtype)
            progress("embedding", first_row + batch.num_rows, n)
            return made

        value_type = pa.float16() if half else pa.float32()
        fields = []
        if chosen.image_dim is not None:
            fields.append(pa.field(image_col, pa.list_(value_type, chosen.image_dim)))
        if chosen.text_dim is not None:
            fields.append(pa.field(text_col, pa.list_(value_type, chosen.text_dim)))
        fields.append(pa.field(PROBLEM_COL, pa.string()))
        if layout == "parquet":
            write_pairs(source, output, {}, batch_rows=batch_rows, computed=(fields, compute))
        else:
            _write_retrieval(source, resolved, output, compute, image_col, text_col,
                             shard_rows, batch_rows, chosen, dtype)
    summary = EmbedSummary(
        input=source.path, output=output, layout=layout, encoder=encoder, n_rows=n,
        dtype=np.dtype(dtype).name, image_dim=chosen.image_dim, text_dim=chosen.text_dim,
        image_col=image_col if chosen.image_dim is not None else None,
        text_col=text_col if chosen.text_dim is not None else None,
        problems=dict(sorted(embedder.problems.items())),
        seconds=time.perf_counter() - began)
    meta = summary.as_dict() | {"command": "embed", "model": chosen.identity} | (record or {})
    write_json(sidecar_path(output) if layout == "parquet" else output / "ncclean-embed.json",
               meta)
    return summary


def _write_retrieval(source, resolved, output: Path, compute, image_col: str, text_col: str,
                     shard_rows: int, batch_rows: int, chosen: Encoder, dtype) -> None:
    """clip-retrieval's layout, built in a scratch folder beside ``output`` and renamed: an
    interrupted run leaves neither it nor the folders it created, and the next run removes the
    scratch folder of a killed one (:func:`ncclean.data.atomic.scratch_folder`)."""
    with scratch_folder(make_folder(output.parent)) as scratch:
        tmp = scratch / output.name
        tmp.mkdir()
        n = source.n_rows
        n_shards = max(1, -(-n // shard_rows))
        width = len(str(n_shards - 1))
        sides = {}
        if chosen.text_dim is not None:
            sides["text_emb"] = (text_col, chosen.text_dim)
        if chosen.image_dim is not None:
            sides["img_emb"] = (image_col, chosen.image_dim)
        for folder in [*sides, "metadata"]:
            (tmp / folder).mkdir()
        meta_columns = [c for c in source.schema.names if c != resolved.image]
        arrays: dict[str, np.ndarray] = {}
        writer = None
        shard = -1
        for shard_of_input, first_row, batch in source.iter_batches(None, batch_rows):
            made = compute(shard_of_input, first_row, batch)
            row = first_row
            while row < first_row + batch.num_rows:
                if row // shard_rows != shard:
                    if writer is not None:
                        writer.close()
                    for array in arrays.values():
                        array.flush()
                    shard = row // shard_rows
                    tag = str(shard).zfill(width)
                    size = min(shard_rows, n - shard * shard_rows)
                    arrays = {folder: np.lib.format.open_memmap(
                        tmp / folder / f"{folder}_{tag}.npy", mode="w+", dtype=dtype,
                        shape=(size, dim)) for folder, (_, dim) in sides.items()}
                    meta_schema = pa.schema(
                        [source.schema.field(c) for c in meta_columns]
                        + [pa.field("row", pa.int64()), pa.field(PROBLEM_COL, pa.string())])
                    writer = pq.ParquetWriter(tmp / "metadata" / f"metadata_{tag}.parquet",
                                              meta_schema, compression="zstd")
                end = min(first_row + batch.num_rows, (shard + 1) * shard_rows)
                lo, hi = row - first_row, end - first_row
                for folder, (col, dim) in sides.items():
                    arrays[folder][row - shard * shard_rows:end - shard * shard_rows] = \
                        _filled(made[col].slice(lo, hi - lo), dim)
                columns = [batch.column(c).slice(lo, hi - lo) for c in meta_columns]
                columns += [pa.array(np.arange(row, end, dtype=np.int64)),
                            made[PROBLEM_COL].slice(lo, hi - lo)]
                writer.write_table(pa.Table.from_arrays(columns, schema=meta_schema))
                row = end
        if writer is not None:
            writer.close()
        for array in arrays.values():
            array.flush()
        os.replace(tmp, output)


def _filled(vectors: pa.Array, dim: int) -> np.ndarray:
    """A fixed-size list array as ``(len, dim)`` numpy rows, zeros for the nulls."""
    out = np.zeros((len(vectors), dim), dtype=np.float32)
    present = ~vectors.is_null().to_numpy(zero_copy_only=False)
    if present.any():
        out[present] = vectors.filter(pa.array(present)).flatten() \
            .to_numpy(zero_copy_only=False).reshape(-1, dim)
    return out
