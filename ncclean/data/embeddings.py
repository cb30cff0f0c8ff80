"""Embedding columns read batch by batch into one array, and the rows that cannot be used.

A precomputed embedding is unusable when it is missing, has the wrong length, holds NaN or
infinity, is all zeros, or has one value in every dimension: no embedding model emits the last two,
a failed or padded embedding job does. Such rows are kept and marked invalid with a reason. A column
that holds one vector in every row is an error, not a corpus of identical pairs: it would make every
pair look equally well (or badly) matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ncclean.errors import SchemaError

if TYPE_CHECKING:
    from ncclean.data.corpus import Corpus

CHUNK = 65536  # rows per block when scanning embeddings, so temporaries stay small


class EmbeddingColumn:
    """One embedding column read batch by batch.

    A fixed-size list column (how LAION and DataComp ship embeddings, and what ``ncclean embed``
    writes) goes straight into one preallocated ``(n, d)`` array, float16 when the values are
    float16 (half the memory), float32 otherwise: memory is the array itself, whatever N is.
    Variable-length lists are kept as Arrow chunks until the end, where ``d`` is the most common
    length.
    """

    def __init__(self, name: str, type_: pa.DataType, n: int):
        self.name = name
        self.n = n
        self.fixed = pa.types.is_fixed_size_list(type_)
        self.dtype = np.float16 if pa.types.is_float16(type_.value_type) else np.float32
        self.null = np.zeros(n, dtype=bool)
        self.wrong_length = np.zeros(n, dtype=bool)
        self.chunks: list[pa.Array] = []
        self.out = np.zeros((n, type_.list_size), dtype=self.dtype) if self.fixed else None

    def add(self, first_row: int, array: pa.Array) -> None:
        if not self.fixed:
            self.chunks.append(array)
            return
        d = self.out.shape[1]
        if array.null_count == 0:  # the values buffer as is, no flattening copy
            values = array.values.to_numpy(zero_copy_only=False)
            block = values[array.offset * d:(array.offset + len(array)) * d]
            self.out[first_row:first_row + len(array)] = block.reshape(-1, d)
            return
        null = array.is_null().to_numpy(zero_copy_only=False)
        values = pc.list_flatten(array).to_numpy(zero_copy_only=False)
        self.out[first_row + np.flatnonzero(~null)] = values.reshape(-1, d)
        self.null[first_row:first_row + len(array)] = null

    def finish(self, corpus: Corpus, which: str,
               content: Sequence | pa.ChunkedArray | None = None) -> np.ndarray:
        """The ``(n, d)`` array; rows with a null, a wrong length, NaN or infinity are zero and
        marked invalid, and so are all-zero and one-value rows (:func:`check_vectors`).
        ``content``: what each row's vector encodes (its caption, its image's key), where
        known."""
        out = self.out if self.fixed else self._from_lists(corpus, which)
        corpus.mark(self.null, f"missing {which} embedding")
        finite = np.ones(len(out), dtype=bool)
        for start in range(0, len(out), CHUNK):
            finite[start:start + CHUNK] = _finite_rows(out[start:start + CHUNK])
        corpus.mark(~finite, f"{which} embedding holds NaN or infinity")
        out[~finite] = 0
        check_vectors(corpus, out, ~self.null & ~self.wrong_length & finite, which, self.name,
                      content)
        return out

    def _from_lists(self, corpus: Corpus, which: str) -> np.ndarray:
        array = pa.chunked_array(self.chunks).combine_chunks()
        self.chunks = []
        lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
        self.null = array.is_null().to_numpy(zero_copy_only=False)
        present = lengths[~self.null].astype(np.int64)
        if len(present) == 0:
            return np.zeros((len(array), 0), dtype=self.dtype)
        dim = int(np.bincount(present).argmax())
        good_length = (~self.null) & (np.nan_to_num(lengths, nan=-1) == dim)
        values = pc.list_flatten(array.filter(pa.array(good_length))).to_numpy(
            zero_copy_only=False)
        out = np.zeros((len(array), dim), dtype=self.dtype)
        out[good_length] = values.astype(self.dtype, copy=False).reshape(-1, dim)
        self.wrong_length = ~self.null & ~good_length
        for row in np.flatnonzero(self.wrong_length):
            corpus.mark(row, f"{which} embedding has {int(lengths[row])} values, expected {dim}")
        return out


def check_vectors(corpus: Corpus, vectors: np.ndarray, usable: np.ndarray, which: str,
                  name: str, content: Sequence | pa.ChunkedArray | None = None) -> None:
    """Mark rows of ``vectors`` (``(n, d)``) that are all zeros or hold one value in every
    dimension; raise :class:`SchemaError` when all ``usable`` rows (at least two) are one vector,
    unless their ``content`` (each row's caption or image key, where known) is one too: a shard
    of one collection's label is one caption, not a failed job.
    ``usable``: ``(n,) bool``, the rows not already marked for this column."""
    n, d = vectors.shape
    rows = np.flatnonzero(usable)
    if d == 0 or len(rows) == 0:
        return
    reference = _comparable(vectors[rows[0]:rows[0] + 1])[0]
    zero = np.zeros(n, dtype=bool)
    flat = np.zeros(n, dtype=bool)
    same = np.zeros(n, dtype=bool)
    for start in range(0, n, CHUNK):
        block = _comparable(vectors[start:start + CHUNK])
        zero[start:start + len(block)] = ~block.any(axis=1)
        if d > 1:
            flat[start:start + len(block)] = (block == block[:, :1]).all(axis=1)
        same[start:start + len(block)] = (block == reference).all(axis=1)
    if len(rows) >= 2 and same[rows].all() and (zero[rows[0]] or not _one(content, rows)):
        what = "all zeros" if zero[rows[0]] else "one vector"
        raise SchemaError(
            f"{corpus.source.path}: embedding column {name!r} holds {what} in all "
            f"{len(rows):,} usable rows, so every pair would look alike; check the job that "
            "computed it"
        )
    corpus.mark(usable & zero, f"{which} embedding is all zeros")
    corpus.mark(usable & flat & ~zero, f"{which} embedding has one value in every dimension")


def _one(content: Sequence | pa.ChunkedArray | None, rows: np.ndarray) -> bool:
    """Whether ``content`` (``None``: unknown) holds one value over ``rows``: read only where
    every row holds one vector, which is rare."""
    if content is None:
        return False
    if isinstance(content, pa.ChunkedArray):
        content = content.take(pa.array(rows)).to_pylist()
        return len(set(content)) == 1
    return len({content[row] for row in rows}) == 1


def _comparable(block: np.ndarray) -> np.ndarray:
    """``block``'s finite floats as unsigned integers of their width, -0 made +0: equal exactly
    where the floats are equal, and compared several times faster (numpy emulates float16
    arithmetic). Other dtypes as they are."""
    if block.dtype not in (np.float16, np.float32, np.float64):
        return block
    bits = block.view(f"u{block.itemsize}")
    negative_zero = bits.dtype.type(1 << (8 * block.itemsize - 1))
    return np.where(bits == negative_zero, bits.dtype.type(0), bits)


def _finite_rows(block: np.ndarray) -> np.ndarray:
    """``(len(block),) bool``: rows without NaN or infinity. float16 is checked on its bits (all
    exponent bits set), 3x faster than numpy's emulated float16 ``isfinite``."""
    if block.dtype == np.float16:
        return ~((block.view(np.uint16) & 0x7C00) == 0x7C00).any(axis=1)
    return np.isfinite(block).all(axis=1)


def row_hashes(vectors: np.ndarray) -> pa.Array:
    """A 128-bit hash of every row's bytes as ``binary(16)``: equal rows, equal hashes. Two
    independent random linear hashes over the row's widest machine words (wrapping uint64
    arithmetic), block by block, so a million 512-d rows need no per-row Python objects."""
    row_bytes = vectors.shape[1] * vectors.itemsize
    word = next(w for w in (8, 4, 2, 1) if row_bytes % w == 0)
    words = np.ascontiguousarray(vectors).view(f"u{word}").reshape(len(vectors), -1)
    weights = np.random.default_rng(0x6E63).integers(
        1, 2**63, size=(2, words.shape[1]), dtype=np.uint64) | np.uint64(1)
    out = np.empty((len(vectors), 2), dtype=np.uint64)
    for start in range(0, len(words), CHUNK):
        block = words[start:start + CHUNK].astype(np.uint64, copy=False)
        for k in range(2):
            out[start:start + len(block), k] = (block * weights[k]).sum(axis=1)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(out),
                                                [None, pa.py_buffer(out.tobytes())])
