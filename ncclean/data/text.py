"""Caption tokens: lowercase words for alphabetic scripts, jieba for runs of Chinese characters;
and which captions cannot be used at all (:func:`caption_problem`).

One regular-expression pass splits a caption into runs of CJK ideographs and runs of other word
characters, so a mixed caption ("a red 圆形 on the left") is tokenised in one go. jieba is imported
only when a caption holds CJK text, and its start-up log is silenced.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef"
# Group 1: a run of CJK ideographs. Group 2: a run of other letters/digits (underscore excluded).
_RUN = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")

PAD = "<pad>"
UNK = "<unk>"


@lru_cache(maxsize=1)
def _jieba():
    import jieba

    jieba.setLogLevel(logging.WARNING)  # silence "Building prefix dict ..." on first use
    return jieba


def tokenize(text: str) -> list[str]:
    """Lowercase tokens of ``text``: words of alphabetic scripts as they stand, CJK runs segmented
    by jieba. Punctuation and whitespace are dropped.

    >>> tokenize("A red circle, 左上角有一个红色的圆形")
    ['a', 'red', 'circle', '左上角', '有', '一个', '红色', '的', '圆形']
    """
    tokens: list[str] = []
    for cjk, word in _RUN.findall(text.lower()):
        if word:
            tokens.append(word)
        else:
            tokens.extend(t for t in _jieba().cut(cjk, HMM=True) if t.strip())
    return tokens


#: Characters that draw nothing beyond the separators (Z*), controls (Cc) and format marks (Cf,
#: such as the zero-width space, word joiner and byte-order mark): the Hangul fillers and the
#: blank Braille pattern, which render as blanks.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def caption_problem(text: str | None) -> str | None:
    """Why a caption cannot be used, or ``None``: ``missing caption`` (null), ``empty caption``
    (nothing but whitespace), ``caption has no visible character`` (nothing but invisible
    characters: zero-width spaces, NUL and other controls, byte-order marks, blank fillers)."""
    if text is None:
        return "missing caption"
    if not text.strip():
        return "empty caption"
    return None if any(_visible(c) for c in text) else "caption has no visible character"


def _visible(char: str) -> bool:
    category = unicodedata.category(char)
    return category[0] != "Z" and category not in ("Cc", "Cf") and char not in _BLANK_LETTERS


@dataclass
class Vocabulary:
    """Token <-> id. Id 0 is ``<pad>``, id 1 is ``<unk>``; the rest are ordered by frequency
    (descending), ties by token, so the same captions always give the same ids."""

    tokens: list[str] = field(default_factory=lambda: [PAD, UNK])
    min_freq: int = 1

    def __post_init__(self) -> None:
        self._ids = {token: i for i, token in enumerate(self.tokens)}

    @classmethod
    def build(cls, tokenised: Iterable[Sequence[str]], min_freq: int = 1,
              max_size: int | None = None) -> Vocabulary:
        """Keep tokens seen at least ``min_freq`` times (at most ``max_size`` of them)."""
        counts = Counter(token for tokens in tokenised for token in tokens)
        kept = sorted((t for t, c in counts.items() if c >= min_freq),
                      key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        return cls(tokens=[PAD, UNK, *kept], min_freq=min_freq)

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self._ids

    @property
    def unk_id(self) -> int:
        return 1

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Token ids, ``<unk>`` for tokens not in the vocabulary."""
        return [self._ids.get(token, 1) for token in tokens]

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    def to_json(self) -> str:
        return json.dumps({"tokens": self.tokens, "min_freq": self.min_freq}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Vocabulary:
        payload = json.loads(text)
        return cls(tokens=list(payload["tokens"]), min_freq=int(payload["min_freq"]))
