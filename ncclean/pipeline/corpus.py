"""Making and looking at corpora: the synthetic corpus, injected noise, and what a corpus holds."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ncclean.data.schema import Columns
from ncclean.progress import Progress, no_progress
from ncclean.records import Summary

PathLike = str | os.PathLike


@dataclass(frozen=True)
class SynthSummary(Summary):
    """What :func:`write_synth` wrote."""

    output: Path
    n_pairs: int
    n_images: int
    lang: str
    seed: int


def write_synth(output: PathLike, n_images: int, captions_per_image: int, lang: str,
                seed: int) -> SynthSummary:
    """Write the synthetic shapes corpus (:mod:`ncclean.data.synth`) to ``output``."""
    from ncclean.data.parquet import check_output_path, write_table
    from ncclean.data.synth import synth_table

    out = check_output_path(output)
    table = synth_table(n_images, captions_per_image, lang, seed)  # type: ignore[arg-type]
    write_table(out, table)
    return SynthSummary(out, table.num_rows, n_images, lang, seed)


@dataclass(frozen=True)
class NoiseSummary(Summary):
    """What :func:`inject_noise` did.

    ``requested``: ``floor(ratio * n)`` in the protocol's ``unit`` (captions or images);
    ``moved``: captions now on another image; ``noisy``: of those, the ones whose text differs
    from every caption of the new image (the ``noisy_gt`` column). ``protocol`` is ``"index"``
    when a saved index was applied.
    """

    input: Path
    output: Path
    index_file: Path
    protocol: str
    ratio: float
    seed: int
    applied_index: Path | None
    n_pairs: int
    n_images: int
    unit: str
    requested: int
    moved: int
    noisy: int
    image_columns: tuple[str, ...]

    @property
    def realised_ratio(self) -> float:
        return self.noisy / self.n_pairs

    def as_dict(self) -> dict:
        return super().as_dict() | {"realised_ratio": self.realised_ratio}



def inject_noise(
    input: PathLike,
    output: PathLike,
    *,
    ratio: float = 0.5,
    protocol: str = "per-caption",
    seed: int = 0,
    index: PathLike | None = None,
    columns: Columns = Columns(),
    move_with_image: Sequence[str] = (),
    overwrite: bool = False,
    progress: Progress = no_progress,
) -> NoiseSummary:
    """Mismatch a share of the pairs of ``input`` and write the result to ``output``.

    Captions stay in their rows; the image side of a row (the image column, ``image_id``, the image
    embedding and the ``move_with_image`` columns) is replaced by that of its new image. The image
    column moves where the pairs are read from their vectors too, and a column named as ``ncclean
    embed`` names image vectors (``image_emb``) whether or not ``columns`` names it (unless
    ``columns`` names it as the caption side): left behind, pictures and vectors would disagree,
    and every score read from the stale side would be wrong.
    Adds ``noisy_gt`` and ``original_image_id`` (and ``image_id`` when the input has none: image
    groups by content). Saves the index as ``<output>.noise.npz`` (re-apply it with ``index=``)
    and a JSON sidecar ``<output>.json``.
    """
    import pyarrow as pa

    from ncclean.data.corpus import read_corpus
    from ncclean.data.noise import (
        INDEX_SUFFIX,
        align_index,
        image_rows,
        noisy_ground_truth,
        read_index,
        sample_noise,
        write_index,
    )
    from ncclean.data.parquet import (
        check_not_foreign,
        check_output_path,
        sidecar_path,
        write_json,
        write_pairs,
    )
    from ncclean.data.schema import IMAGE_ID, NOISY_GT, ORIGINAL_IMAGE_ID
    from ncclean.errors import SchemaError
    from ncclean.pipeline.embed_job import IMAGE_EMB
    from ncclean.provenance import versions

    check_not_foreign(output, overwrite, input)
    corpus = read_corpus(input, columns, progress=progress)
    source, resolved = corpus.source, corpus.columns
    out = check_output_path(output, source)
    if NOISY_GT in source.schema.names:
        import pyarrow.compute as pc

        if (n := int(pc.sum(source.read_columns([NOISY_GT]).column(0)).as_py() or 0)):
            raise SchemaError(f"{input} already holds injected noise ({NOISY_GT}: {n:,} noisy "
                              "pairs), which a second injection would relabel clean; inject "
                              "into the clean corpus (a higher --ratio for more noise)")
    missing = [c for c in move_with_image if c not in source.schema.names]
    if missing:
        raise SchemaError(f"--move-with-image: no column {', '.join(map(repr, missing))}; "
                          f"available columns: {', '.join(source.schema.names)}")

    ids = corpus.ids if resolved.id else None
    if index is not None:
        caption_to_image = align_index(read_index(index), corpus.image_group, ids,
                                       corpus.captions, name=index)
    else:
        caption_to_image = sample_noise(corpus.image_group, ratio, protocol,  # type: ignore[arg-type]
                                        seed)
    noisy = noisy_ground_truth(caption_to_image, corpus.image_group, corpus.text_group)
    moved = caption_to_image != corpus.image_group
    if index is not None:
        protocol, unit, requested = "index", "captions", int(moved.sum())
    elif protocol == "per-image":
        unit, requested = "images", int(ratio * corpus.n_images)
    else:
        unit, requested = "captions", int(ratio * corpus.n_pairs)

    caption_side = {resolved.caption, resolved.text_emb, resolved.id}
    present = [name for name in (columns.image, IMAGE_EMB)
               if name in source.schema.names and name not in caption_side]
    image_columns = list(dict.fromkeys([*resolved.image_side, *present, *move_with_image]))
    rows = image_rows(caption_to_image, corpus.image_group)
    taken = source.read_columns(image_columns).take(pa.array(rows))
    updates: dict[str, pa.Array | pa.ChunkedArray] = {c: taken.column(c) for c in image_columns}
    if resolved.image_id:
        updates[ORIGINAL_IMAGE_ID] = source.read_columns([resolved.image_id]).column(0)
    else:
        updates[IMAGE_ID] = pa.array(caption_to_image)
        updates[ORIGINAL_IMAGE_ID] = pa.array(corpus.image_group)
    updates[NOISY_GT] = pa.array(noisy)

    write_pairs(source, out, updates)
    index_file = out.with_name(out.name + INDEX_SUFFIX)
    write_index(index_file, caption_to_image, corpus.image_group, ids, corpus.captions)
    summary = NoiseSummary(
        input=Path(input), output=out, index_file=index_file, protocol=protocol, ratio=ratio,
        seed=seed, applied_index=Path(index) if index is not None else None,
        n_pairs=corpus.n_pairs, n_images=corpus.n_images, unit=unit, requested=requested,
        moved=int(moved.sum()), noisy=int(noisy.sum()), image_columns=tuple(image_columns),
    )
    write_json(sidecar_path(out),
               {"command": "inject-noise", **summary.as_dict(),
                "versions": versions("numpy", "pyarrow")})
    return summary


@dataclass(frozen=True)
class CorpusSummary(Summary):
    """What a corpus holds and which rows cannot be used."""

    input: Path
    n_pairs: int
    n_images: int
    n_unique_captions: int
    columns: dict[str, str | None]
    invalid: dict[str, int]
    invalid_examples: list[tuple[int, str, str]]
    top_captions: list[tuple[str, int]]
    cjk_captions: int  # with Chinese characters or kana
    n_invalid: int
    images_decoded: bool
    n_shards: int = 1
    shard_kind: str = "parquet"
    vector_columns: list[str] = field(default_factory=list)
    writing_systems: dict[str, int] = field(default_factory=dict)


def inspect_corpus(input: PathLike, columns: Columns = Columns(), *, strict: bool = False,
                   decode: bool = True, image_size: int = 64,
                   max_image_pixels: int | None = None,
                   progress: Progress = no_progress) -> CorpusSummary:
    """Read ``input`` as scoring would (decoding every image unless ``decode=False``) and say what
    it holds: sizes, repeated captions, scripts, every kind of invalid row with examples, its
    shards and the columns that hold vectors (candidates for ``--image-emb-col`` and
    ``--text-emb-col``). Every input ``score`` reads is read: a Parquet file or folder, webdataset
    tars, a Hugging Face dataset saved to disk."""
    from ncclean.data.corpus import read_corpus
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.data.scripts import NAMES, writing_systems
    from ncclean.data.text import _CJK

    with _as_parquet(input) as (path, shards):
        corpus = read_corpus(path, columns, strict=strict,
                             image_size=image_size if decode else None,
                             max_image_pixels=max_image_pixels or DEFAULT_MAX_PIXELS,
                             progress=progress)
        schema = corpus.source.schema
    counts = Counter(corpus.captions)
    examples = [(row, str(corpus.ids[row].as_py()), reason)
                for row, reason in enumerate(corpus.reasons) if reason is not None][:5]
    cjk = re.compile(f"[{_CJK}\u3040-\u30ff]")  # ideographs, hiragana and katakana
    systems = Counter(NAMES[code] for code in writing_systems(corpus.captions))
    return CorpusSummary(
        input=Path(input),
        n_pairs=corpus.n_pairs,
        n_images=corpus.n_images,
        n_unique_captions=len(counts),
        columns=asdict(corpus.columns),
        invalid=corpus.invalid_counts(),
        n_invalid=corpus.n_invalid,
        invalid_examples=examples,
        top_captions=[(text, n) for text, n in counts.most_common(5) if n > 1],
        cjk_captions=sum(1 for text in corpus.captions if cjk.search(text)),
        images_decoded=decode and corpus.columns.image is not None,
        n_shards=len(shards),
        shard_kind=shards[0].kind,
        vector_columns=[f.name for f in schema if _is_vector(f.type)],
        writing_systems=dict(systems.most_common()),
    )


@contextmanager
def _as_parquet(input: PathLike) -> Iterator[tuple[Path, list]]:
    """``(path, shards)``: ``input`` itself when its shards are Parquet, else its shards
    (webdataset tars, the Arrow files of a saved Hugging Face dataset) as ``score`` reads them
    (:func:`ncclean.data.shards.read_shard`), written on one schema to a temporary folder that
    :func:`ncclean.data.corpus.read_corpus` opens; ``shards``: the input's shards."""
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ncclean.data.shards import list_shards, read_shard
    from ncclean.errors import EmptyInputError, SchemaError

    shards = list_shards(input)
    if all(shard.kind == "parquet" for shard in shards):
        yield Path(input), shards
        return
    with tempfile.TemporaryDirectory(prefix="ncclean-inspect-") as scratch:
        files = [Path(scratch) / f"{k:06d}.parquet" for k in range(len(shards))]
        schemas, n_rows = [], 0
        for shard, file in zip(shards, files, strict=True):
            table = read_shard(shard)
            schemas.append(table.schema)
            n_rows += table.num_rows
            pq.write_table(table, file)
        if not n_rows:
            raise EmptyInputError(f"{input}: no pairs in its {len(shards)} shard(s)")
        try:
            schema = pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            why = " ".join(str(error).split())
            raise SchemaError(f"{input}: its shards disagree on a column's type ({why}); all "
                              "shards must share one schema") from None
        for file, own in zip(files, schemas, strict=True):
            if not own.equals(schema):
                table = pq.read_table(file)
                pq.write_table(pa.table({f.name: table.column(f.name).cast(f.type)
                                         if f.name in own.names
                                         else pa.nulls(table.num_rows, f.type)
                                         for f in schema}, schema=schema), file)
        yield Path(scratch), shards


def _is_vector(type_) -> bool:
    import pyarrow as pa

    return (pa.types.is_list(type_) or pa.types.is_large_list(type_) or
            pa.types.is_fixed_size_list(type_)) and \
        (pa.types.is_floating(type_.value_type) or pa.types.is_integer(type_.value_type))
