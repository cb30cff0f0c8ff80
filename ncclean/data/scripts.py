"""The writing system of each caption, read from its letters: a language group found without a
label.

A multilingual text encoder keeps each language's captions apart by a direction of their own, so
a corpus that mixes languages ranks its pairs worse than each language alone
(``benchmarks/results/languages.md``). The letters tell many such groups apart with no model: a
caption belongs to the Unicode script most of its letters are written in (:data:`NAMES`), where
ideographs and kana are one system, CJK (Japanese names written in kanji alone would otherwise
part from the rest of a Japanese corpus). A caption with no letters, or whose letters are mostly
of a script not listed, is :data:`OTHER`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OTHER = 0
_SCRIPTS = ("Latin", "Cyrillic", "Greek", "Arabic", "Hebrew", "Hangul", "Devanagari", "Bengali",
            "Gurmukhi", "Gujarati", "Tamil", "Telugu", "Kannada", "Malayalam", "Sinhala", "Thai",
            "Lao", "Khmer", "Myanmar", "Tibetan", "Georgian", "Armenian", "Ethiopic")
_LETTERS = {**{name.lower(): rf"\p{{{name}}}" for name in _SCRIPTS},
            "cjk": r"\p{Han}\p{Hiragana}\p{Katakana}"}
#: Code ``k`` is ``NAMES[k]``.
NAMES = ("other", *_LETTERS)


def writing_systems(captions: Sequence[str] | pa.Array) -> np.ndarray:
    """``(n,) int8``: each caption's writing system, a code into :data:`NAMES`. Two passes over
    a caption whose letters are all Latin; one more per system for the rest."""
    text = captions if isinstance(captions, pa.Array) else pa.array(captions, pa.string())
    text = text.fill_null("")
    codes = np.where(pc.match_substring_regex(text, r"\p{Latin}").to_numpy(zero_copy_only=False),
                     NAMES.index("latin"), OTHER)
    rest = np.flatnonzero(pc.match_substring_regex(text, r"[^\P{L}\p{Latin}]")
                          .to_numpy(zero_copy_only=False))  # a letter of another script
    if len(rest):
        part = text.take(pa.array(rest))
        counts = np.stack([pc.count_substring_regex(part, f"[{letters}]")
                           .to_numpy(zero_copy_only=False) for letters in _LETTERS.values()])
        codes[rest] = np.where(counts.max(axis=0) > 0, counts.argmax(axis=0) + 1, OTHER)
    return codes.astype(np.int8)
