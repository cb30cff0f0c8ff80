"""Reading a Parquet corpus of image-caption pairs into plain arrays.

:func:`read_corpus` makes one streaming pass over the columns scoring needs (never the others) and
returns a :class:`Corpus`: ids, captions, which image each pair shows, optional embeddings and,
when asked, the decoded images. Image bytes are read batch by batch and dropped as soon as they are
hashed or decoded. Rows that cannot be used are kept and carry a reason (``invalid_reason``);
``strict=True`` turns any such row into an error instead.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ncclean.data.embeddings import EmbeddingColumn, row_hashes
from ncclean.data.images import (
    DEFAULT_MAX_PIXELS,
    RowProblem,
    check_max_pixels,
    decode_image,
    image_identity,
    image_kind,
    image_values,
    load_image_bytes,
    quiet_decompression_warnings,
)
from ncclean.data.parquet import PairSource, open_pairs
from ncclean.data.pool import image_pool
from ncclean.data.schema import Columns, ResolvedColumns, resolve_columns
from ncclean.data.text import caption_problem
from ncclean.errors import InvalidRowsError
from ncclean.progress import Progress, no_progress

T = TypeVar("T")


@dataclass
class Corpus:
    """A corpus as arrays, one entry per input row, in input order.

    - ``ids``: the id column, or the row number (int64) when there is none.
    - ``captions``: ``n_pairs`` strings (``""`` where the caption is missing).
    - ``image_group``: ``(n_pairs,) int64`` in ``[0, n_images)``, numbered in order of first
      appearance; rows share a group when they hold the same image bytes (or path, or embedding)
      and, when there is an ``image_id`` column, the same ``image_id``. A row whose image differs
      from the rest of its ``image_id`` is a group of its own (``image_id_splits``: how many
      groups this added): every row is scored against, and checked on, its own image.
    - ``image_emb``, ``text_emb``: ``(n_pairs, d) float32`` or ``None``.
    - ``images``: ``(n_images, s, s, 3) uint8`` indexed by ``image_group``, or ``None`` when not
      decoded.
    - ``image_digests``: per image group, the 16-byte identity of its image (content hash or
      resolved path), when the image column was read; ``None`` otherwise.
    - ``reasons``: why each row cannot be used, ``None`` for a usable row; several problems are
      joined with ``"; "``, which no single reason contains.
    - ``allow_absolute_paths``: image paths may leave the Parquet's folder (see
      :func:`ncclean.data.images.leaves_folder`).
    """

    source: PairSource
    columns: ResolvedColumns
    ids: pa.Array
    captions: list[str]
    image_group: np.ndarray
    reasons: list[str | None]
    image_emb: np.ndarray | None = None
    text_emb: np.ndarray | None = None
    images: np.ndarray | None = None
    image_digests: list[bytes | None] | None = field(default=None, repr=False)
    allow_absolute_paths: bool = False
    image_id_splits: int = 0
    _text_group: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_pairs(self) -> int:
        return len(self.captions)

    @property
    def n_images(self) -> int:
        return int(self.image_group.max()) + 1 if len(self.image_group) else 0

    @property
    def valid(self) -> np.ndarray:
        """``(n_pairs,) bool``: rows without a problem."""
        return np.array([r is None for r in self.reasons], dtype=bool)

    @property
    def text_group(self) -> np.ndarray:
        """``(n_pairs,) int64``: equal for captions with the same text (case and runs of
        whitespace ignored), numbered in order of first appearance."""
        if self._text_group is None:
            self._text_group = text_groups(self.captions)
        return self._text_group

    @property
    def n_invalid(self) -> int:
        return sum(r is not None for r in self.reasons)

    def invalid_counts(self) -> dict[str, int]:
        """Rows per kind of problem (a reason up to its colon); a row with two problems counts
        under both."""
        return dict(Counter(problem.split(":", 1)[0] for r in self.reasons if r is not None
                            for problem in r.split("; ")))

    def mark(self, rows: np.ndarray | int, reason: str) -> None:
        """Record ``reason`` for ``rows``: one row number, an array of them, or a boolean mask.
        ``"; "`` inside ``reason`` becomes ``", "`` (it separates a row's problems)."""
        reason = reason.replace("; ", ", ")
        rows = np.asarray(rows)
        for row in np.flatnonzero(rows) if rows.dtype == bool else rows.reshape(-1):
            current = self.reasons[row]
            self.reasons[row] = reason if current is None else f"{current}; {reason}"


def text_groups(captions: list[str]) -> np.ndarray:
    """``(n,) int64`` ids equal for equal normalised text (lowercase, whitespace collapsed)."""
    normalised = pc.utf8_trim_whitespace(
        pc.replace_substring_regex(pc.utf8_lower(pa.array(captions, pa.string())), r"\s+", " ")
    )
    return _first_appearance_codes(normalised)


def _first_appearance_codes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Dictionary codes numbered by first appearance; each null gets a code of its own."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = values.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    nulls = encoded.indices.is_null().to_numpy(zero_copy_only=False)
    if not nulls.any():
        return codes.astype(np.int64)
    codes = np.where(nulls, 0, codes).astype(np.int64)
    codes[nulls] = len(encoded.dictionary) + np.arange(int(nulls.sum()))
    # Renumber so that codes follow the order of first appearance again.
    _, first = np.unique(codes, return_index=True)
    order = np.empty(len(first), dtype=np.int64)
    order[np.argsort(first, kind="stable")] = np.arange(len(first))
    return order[np.unique(codes, return_inverse=True)[1]]


def read_corpus(
    path: str | os.PathLike | PairSource,
    columns: Columns = Columns(),
    *,
    strict: bool = False,
    image_size: int | None = None,
    max_image_pixels: int = DEFAULT_MAX_PIXELS,
    cache_dir: Path | None = None,
    progress: Progress = no_progress,
) -> Corpus:
    """Read the pairs at ``path`` (a Parquet file or a folder of shards, or an opened source such
as one of :func:`ncclean.data.parquet.windows`).

    Every row's image cell is read once and hashed (bytes) or looked up (paths), whether or not
    there is an ``image_id`` column, so that no row is scored against another row's image (see
    ``Corpus.image_group``). With ``image_size``, images are decoded to ``(image_size,
    image_size, 3)`` once per image group (see :func:`load_images`; with ``cache_dir``, once per
    input) and undecodable ones mark their rows invalid. Raises the :class:`NcCleanError`
    subclasses of :func:`open_pairs` and :func:`resolve_columns`, :class:`BadOptionError` for a
    pixel limit PIL would undercut, :class:`SchemaError` for an embedding column holding one
    vector in every row, and :class:`InvalidRowsError` under ``strict`` when any row is invalid.
    """
    if image_size is not None:
        check_max_pixels(max_image_pixels)
    source = path if isinstance(path, PairSource) else open_pairs(path)
    resolved = resolve_columns(columns, source.schema)
    kind = image_kind(resolved.image, source.schema.field(resolved.image).type) \
        if resolved.image else None

    allow = columns.allow_absolute_paths
    n = source.n_rows
    captions: list[str] = []
    reasons: list[str | None] = []
    ids: list[pa.Array] = []
    image_ids: list[pa.Array] = []
    image_keys: list[bytes | None] = []
    embeddings = {c: EmbeddingColumn(c, source.schema.field(c).type, n)
                  for c in (resolved.image_emb, resolved.text_emb) if c is not None}
    read = [resolved.caption] + [c for c in (resolved.id, resolved.image_id) if c]
    read += list(embeddings)
    if resolved.image:
        read.append(resolved.image)

    progress("reading", 0, n)
    for shard, first_row, batch in source.iter_batches(read):
        texts = batch.column(resolved.caption).to_pylist()
        captions += ["" if text is None else text for text in texts]
        plain = _has_ascii_word(batch.column(resolved.caption))
        reasons += [None if fine else caption_problem(text) for text, fine in zip(texts, plain)]
        if resolved.id:
            ids.append(batch.column(resolved.id))
        if resolved.image_id:
            image_ids.append(batch.column(resolved.image_id))
        if resolved.image:
            base = shard.path.parent
            image_keys += [image_identity(v, base, allow_absolute_paths=allow)
                           for v in image_values(batch.column(resolved.image), kind)]
        for name, column in embeddings.items():
            column.add(first_row, batch.column(name))
        progress("reading", first_row + batch.num_rows, n)

    corpus = Corpus(
        source=source,
        columns=resolved,
        ids=_ids(ids, resolved, n),
        captions=captions,
        image_group=np.zeros(n, dtype=np.int64),
        reasons=reasons,
        allow_absolute_paths=allow,
    )
    if resolved.id:
        _mark_duplicate_ids(corpus)
    for name, column in embeddings.items():
        which = "image" if name == resolved.image_emb else "text"
        content = captions if which == "text" else image_keys if resolved.image else \
            pa.chunked_array(image_ids) if resolved.image_id else None
        emb = column.finish(corpus, which, content)
        if name == resolved.image_emb:
            corpus.image_emb = emb
        else:
            corpus.text_emb = emb

    if resolved.image:
        corpus.image_group = _first_appearance_codes(pa.array(image_keys, pa.binary(16)))
        if resolved.image_id:
            by_id = _first_appearance_codes(pa.chunked_array(image_ids))
            corpus.image_group = _first_appearance_codes(
                pa.array(by_id * np.int64(n) + corpus.image_group))
            corpus.image_id_splits = int(corpus.image_group.max() - by_id.max())
        first_rows = np.unique(corpus.image_group, return_index=True)[1]
        corpus.image_digests = [image_keys[row] for row in first_rows]
    elif resolved.image_id:
        corpus.image_group = _first_appearance_codes(pa.chunked_array(image_ids))
    else:  # images only as embeddings: equal vectors are the same image
        corpus.image_group = _first_appearance_codes(row_hashes(corpus.image_emb))

    if image_size is not None and resolved.image:
        load_images(corpus, image_size, max_pixels=max_image_pixels, cache_dir=cache_dir,
                    progress=progress)
    if strict:
        check_strict(corpus)
    return corpus


def _has_ascii_word(captions: pa.Array) -> list[bool]:
    """Which captions hold an ASCII letter or digit (so :func:`caption_problem` has nothing to
    say of them), found by Arrow in one pass; every one ``False`` (asked one by one) when the
    column is not text."""
    import pyarrow.compute as pc

    if not (pa.types.is_string(captions.type) or pa.types.is_large_string(captions.type)):
        return [False] * len(captions)
    return pc.fill_null(pc.match_substring_regex(captions, "[0-9A-Za-z]"), False).to_pylist()


def _ids(chunks: list[pa.Array], resolved: ResolvedColumns, n: int) -> pa.Array:
    if not resolved.id:
        return pa.array(np.arange(n, dtype=np.int64))
    return pa.chunked_array(chunks).combine_chunks()


def _mark_duplicate_ids(corpus: Corpus) -> None:
    ids = corpus.ids
    corpus.mark(ids.is_null().to_numpy(zero_copy_only=False), "missing id")
    codes = _first_appearance_codes(ids)
    first = np.zeros(len(codes), dtype=bool)
    first[np.unique(codes, return_index=True)[1]] = True
    for row in np.flatnonzero(~first):
        corpus.mark(row, f"duplicate id: {ids[int(row)].as_py()!r} appears earlier")


def mark_repeated_ids(corpus: Corpus, rows: np.ndarray, strict: bool = False) -> None:
    """Mark ``rows`` (whose id appeared earlier in a larger corpus this one is part of: another
    shard, an earlier part) invalid as :func:`read_corpus` marks a repeated id, unless already
    marked so; under ``strict``, :class:`InvalidRowsError`."""
    ids = corpus.ids
    for row in np.asarray(rows, dtype=np.int64):
        reason = f"duplicate id: {ids[int(row)].as_py()!r} appears earlier"
        if reason not in (corpus.reasons[row] or ""):
            corpus.mark(int(row), reason)
    if strict and len(rows):
        check_strict(corpus)


# Bump when decoding changes (resampling, padding, reason texts): cached images of older
# versions are ignored.
DECODE_VERSION = "2"


def load_images(corpus: Corpus, size: int, *, max_pixels: int = DEFAULT_MAX_PIXELS,
                cache_dir: Path | None = None, progress: Progress = no_progress) -> np.ndarray:
    """Set ``corpus.images`` to the decoded images, ``(n_images, size, size, 3) uint8``, and mark
    the rows of unusable images. With ``cache_dir`` the images are decoded once per input and
    kept there as a memory map keyed by the images' content, so a second run reads them back."""
    check_max_pixels(max_pixels)
    shape = (corpus.n_images, size, size, 3)
    if cache_dir is None:
        images = np.empty(shape, dtype=np.uint8)
        problems = decode_images(corpus, images, max_pixels, progress)
    else:
        from ncclean.data.cache import cached_array, content_key

        key = content_key(["images", DECODE_VERSION, str(size), str(max_pixels),
                           *group_digests(corpus)])
        images, meta = cached_array(
            Path(cache_dir) / "images", key, shape, np.uint8,
            lambda out: {"problems": decode_images(corpus, out, max_pixels, progress)},
        )
        problems = {int(group): reason for group, reason in meta["problems"].items()}
    mark_image_problems(corpus, problems)
    corpus.images = images
    return images


def mark_image_problems(corpus: Corpus, problems: dict[int, str]) -> None:
    """Mark every row showing an image group in ``problems`` invalid, with its reason."""
    if not problems:
        return
    bad_rows = np.flatnonzero(np.isin(corpus.image_group, np.fromiter(problems, np.int64)))
    for row in bad_rows:
        corpus.mark(row, problems[int(corpus.image_group[row])])


def _first_rows(corpus: Corpus) -> np.ndarray:
    """The first row of every image group, in group order."""
    return np.unique(corpus.image_group, return_index=True)[1]


def group_digests(corpus: Corpus) -> list[bytes | None]:
    """Image identities per group (:func:`ncclean.data.images.image_identity`), for cache keys;
    read from the image column when grouping came from image ids."""
    if corpus.image_digests is not None:
        return corpus.image_digests
    digests: list[bytes | None] = [None] * corpus.n_images
    for items in image_items(corpus):
        for group, value, base in items:
            digests[group] = image_identity(value, base,
                                            allow_absolute_paths=corpus.allow_absolute_paths)
    corpus.image_digests = digests
    return digests


def image_items(corpus: Corpus) -> Iterator[list[tuple[int, bytes | str | None, Path]]]:
    """``(group, value, base_dir)`` for the first row of every image group, one list per record
    batch of the image column (so only one batch of image bytes is in memory at a time)."""
    source, resolved = corpus.source, corpus.columns
    kind = image_kind(resolved.image, source.schema.field(resolved.image).type)
    is_first = np.zeros(corpus.n_pairs, dtype=bool)
    is_first[_first_rows(corpus)] = True
    for shard, start, batch in source.iter_batches([resolved.image]):
        selected = np.flatnonzero(is_first[start:start + batch.num_rows])
        if len(selected) == 0:
            continue
        values = image_values(batch.column(0).take(pa.array(selected)), kind)
        yield [(int(corpus.image_group[start + i]), v, shard.path.parent)
               for i, v in zip(selected, values)]


def map_images(corpus: Corpus, work: Callable[[bytes], T], label: str,
               progress: Progress = no_progress) -> Iterator[list[tuple[int, T | str]]]:
    """``work(encoded image)`` for every image group on a thread pool (PIL releases the GIL), one
    list of ``(group, result)`` per record batch; ``result`` is the reason string where the image
    cannot be used (:class:`RowProblem`). PIL's decompression-bomb warning is silenced for the
    whole pool (:func:`ncclean.data.images.quiet_decompression_warnings`)."""
    allow = corpus.allow_absolute_paths

    def run(item: tuple[int, bytes | str | None, Path]) -> tuple[int, T | str]:
        group, value, base = item
        try:
            return group, work(load_image_bytes(value, base, allow_absolute_paths=allow))
        except RowProblem as problem:
            return group, str(problem)

    done = 0
    progress(label, 0, corpus.n_images)
    with quiet_decompression_warnings(), image_pool() as pool:
        for items in image_items(corpus):
            yield list(pool.map(run, items))
            done += len(items)
            progress(label, done, corpus.n_images)


def decode_images(corpus: Corpus, out: np.ndarray, max_pixels: int = DEFAULT_MAX_PIXELS,
                  progress: Progress = no_progress) -> dict[int, str]:
    """Decode the image of every image group (one per distinct image) into ``out[group]``
    (``(n_images, S, S, 3) uint8``, S taken from ``out``). Returns ``{group: reason}`` for images
    that cannot be used; those are left white."""
    size = out.shape[1]
    problems: dict[int, str] = {}
    for results in map_images(corpus, lambda data: decode_image(data, size, max_pixels),
                              "decoding images", progress):
        for group, result in results:
            if isinstance(result, str):
                problems[group] = result
                out[group] = 255
            else:
                out[group] = result
    return problems


def check_strict(corpus: Corpus) -> None:
    """Raise :class:`InvalidRowsError` when any row is invalid, naming the first one."""
    counts = corpus.invalid_counts()
    if not counts:
        return
    total = corpus.n_invalid
    first = next(i for i, r in enumerate(corpus.reasons) if r is not None)
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))
    raise InvalidRowsError(
        f"{total} invalid row{'s' if total > 1 else ''} ({summary}); first: row {first} "
        f"(id {corpus.ids[first].as_py()!r}): {corpus.reasons[first]}. "
        "Without --strict they are kept and marked in invalid_reason"
    )
