"""What the towers' tables are built from: a group's first row, rows of a table, the
tokeniser's vocabulary and padded token ids."""

from __future__ import annotations

import numpy as np

from ncclean.data.text import Vocabulary, tokenize


def build_vocabulary(captions: list[str], min_freq: int = 2) -> Vocabulary:
    """The tokeniser's vocabulary of ``captions``: words seen at least ``min_freq`` times, so that
    ``<unk>`` is learned from the rare ones."""
    return Vocabulary.build((tokenize(c) for c in captions), min_freq=min_freq)


def first_rows(groups: np.ndarray, prefer: np.ndarray | None = None) -> np.ndarray:
    """The first row of every group, in group order; with ``prefer`` (a mask), the first row of
    each group where it holds, where one does."""
    if prefer is None:
        return np.unique(groups, return_index=True)[1]
    order = np.lexsort((~prefer, groups))  # stable: by group, preferred rows first, in order
    return order[np.unique(groups[order], return_index=True)[1]]


def rows_of(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``table[rows]``, without a copy when ``rows`` is every row in order (every pair its own
    image or caption: the usual case for large embedding corpora)."""
    if len(rows) == len(table) and (len(rows) == 0 or rows[-1] == len(rows) - 1):
        return table  # first-appearance rows are increasing, so this is arange(len(table))
    return table[rows]


def encode_tokens(texts: list[str], vocab: Vocabulary, max_tokens: int) \
        -> tuple[np.ndarray, np.ndarray]:
    """``(n, max_tokens) int64`` padded ids and ``(n,) int64`` lengths (truncated)."""
    ids = np.zeros((len(texts), max_tokens), dtype=np.int64)
    lengths = np.zeros(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        encoded = vocab.encode(tokenize(text))[:max_tokens]
        ids[i, : len(encoded)] = encoded
        lengths[i] = len(encoded)
    return ids, lengths
