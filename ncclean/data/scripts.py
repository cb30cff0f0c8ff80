"""The writing system of each caption, read from its letters: a language group found without a
label.

A multilingual text encoder keeps each language's captions apart by a direction of their own, so
a corpus that mixes languages ranks its pairs worse than each language alone
(``benchmarks/results/languages.md``). The letters tell many such groups apart with no model:
Latin, Cyrillic, Greek, Arabic, Hebrew, Hangul and CJK (ideographs and kana together: Japanese
names written in kanji alone would otherwise part from the rest of a Japanese corpus). A caption
belongs to the system most of its letters are written in; one with no letters of these is
:data:`OTHER`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OTHER = 0
_LETTERS = {
    "latin": "A-Za-z\u00c0-\u024f\u1e00-\u1eff",
    "cyrillic": "\u0400-\u052f",
    "greek": "\u0370-\u03ff\u1f00-\u1fff",
    "arabic": "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff",
    "hebrew": "\u0590-\u05ff",
    "hangul": "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af",
    "cjk": "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f",
}
#: Code ``k`` is ``NAMES[k]``.
NAMES = ("other", *_LETTERS)


def writing_systems(captions: Sequence[str] | pa.Array) -> np.ndarray:
    """``(n,) int8``: each caption's writing system, a code into :data:`NAMES`. A caption with
    no letter outside Latin costs one pass over its text, the rest one per system."""
    text = captions if isinstance(captions, pa.Array) else pa.array(captions, pa.string())
    text = text.fill_null("")
    codes = np.where(pc.match_substring_regex(text, f"[{_LETTERS['latin']}]")
                     .to_numpy(zero_copy_only=False), NAMES.index("latin"), OTHER)
    others = "".join(letters for name, letters in _LETTERS.items() if name != "latin")
    mixed = np.flatnonzero(pc.match_substring_regex(text, f"[{others}]")
                           .to_numpy(zero_copy_only=False))
    if len(mixed):
        part = text.take(pa.array(mixed))
        counts = np.stack([pc.count_substring_regex(part, f"[{letters}]")
                           .to_numpy(zero_copy_only=False) for letters in _LETTERS.values()])
        codes[mixed] = counts.argmax(axis=0) + 1
    return codes.astype(np.int8)
