"""Each caption's writing system, read from its letters."""

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ncclean.data.scripts import NAMES, writing_systems


@pytest.mark.parametrize("caption, system", [
    ("A red apple", "latin"), ("Ein grüner Äpfel", "latin"), ("Ça va, Łódź", "latin"),
    ("Красное яблоко", "cyrillic"), ("Ελληνική σαλάτα", "greek"), ("تفاحة حمراء", "arabic"),
    ("תפוח אדום", "hebrew"), ("빨간 사과", "hangul"), ("红苹果", "cjk"), ("赤いリンゴ", "cjk"),
    ("弓兵", "cjk"),  # a Japanese name in kanji alone is CJK with the rest of its corpus
    ("CD プレーヤー", "cjk"),  # most letters decide
    ("an apple: яблоко", "latin"), ("लाल सेब", "devanagari"), ("แอปเปิ้ลแดง", "thai"),
    ("წითელი ვაშლი", "georgian"), ("ｆｕｌｌ ｗｉｄｔｈ", "latin"), ("𠀀𠀁", "cjk"),
    ("ᏣᎳᎩ", "other"),  # Cherokee: letters of a script not listed
    ("123 !!", "other"), ("", "other"), (None, "other"),
])
def test_a_caption_is_written_in_the_system_most_of_its_letters_are(caption, system):
    assert NAMES[writing_systems(pa.array([caption, "filler"], pa.string()))[0]] == system


@given(st.lists(st.text(alphabet=st.characters(codec="ascii"), max_size=30), max_size=20))
def test_ascii_captions_are_latin_where_they_hold_a_letter_and_other_where_not(captions):
    codes = writing_systems(captions)
    assert codes.dtype.name == "int8" and len(codes) == len(captions)
    for caption, code in zip(captions, codes, strict=True):
        assert NAMES[code] == ("latin" if any(c.isalpha() for c in caption) else "other")
