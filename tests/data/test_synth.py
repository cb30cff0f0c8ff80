import json
import re

import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.data.corpus import read_corpus
from ncclean.data.synth import synth_table
from ncclean.errors import BadOptionError

CJK = re.compile("[\u4e00-\u9fff]")


def test_columns_rows_and_ground_truth():
    table = synth_table(n_images=30, captions_per_image=4, lang="en", seed=0)
    assert table.column_names == ["id", "image_id", "image", "caption", "scene"]
    assert table.num_rows == 120
    assert table.column("image_id").to_pylist()[:8] == [0, 0, 0, 0, 1, 1, 1, 1]
    for text, scene in zip(table.column("caption").to_pylist(), table.column("scene").to_pylist()):
        shapes = json.loads(scene)["shapes"]
        assert 1 <= len(shapes) <= 3
        for shape in shapes:  # every caption names every shape and its colour
            assert shape["shape"] in text and shape["colour"] in text


def test_captions_of_an_image_are_paraphrases():
    table = synth_table(n_images=20, captions_per_image=5, seed=1)
    captions = table.column("caption").to_pylist()
    distinct_per_image = [len(set(captions[i:i + 5])) for i in range(0, 100, 5)]
    assert min(distinct_per_image) >= 4


def test_same_seed_same_table_different_seed_different():
    assert synth_table(10, 3, seed=5).equals(synth_table(10, 3, seed=5))
    assert not synth_table(10, 3, seed=5).equals(synth_table(10, 3, seed=6))


@pytest.mark.parametrize("lang", ["zh", "mixed"])
def test_chinese_and_mixed_captions(lang):
    captions = synth_table(n_images=30, captions_per_image=3, lang=lang, seed=0) \
        .column("caption").to_pylist()
    with_cjk = [c for c in captions if CJK.search(c)]
    with_latin = [c for c in captions if re.search("[a-z]", c)]
    if lang == "zh":
        assert len(with_cjk) == len(captions) and not with_latin
    else:
        assert with_cjk and with_latin
        assert any(CJK.search(c) and re.search("[a-z]", c) for c in captions)  # in one caption


def test_written_corpus_is_valid_and_decodes(tmp_path):
    summary = api.synth(tmp_path / "s.parquet", n_images=12, captions_per_image=2, seed=0)
    assert summary.n_pairs == 24
    corpus = read_corpus(summary.output, image_size=64, strict=True)
    assert corpus.n_images == 12
    assert (corpus.images < 250).any(axis=(1, 2, 3)).all()  # every picture has a shape on it
    assert pq.read_metadata(summary.output).num_rows == 24


def test_bad_arguments():
    with pytest.raises(BadOptionError):
        synth_table(n_images=0)
    with pytest.raises(BadOptionError, match="en, zh, mixed"):
        synth_table(lang="fr")


def test_same_seed_writes_identical_files(tmp_path):
    api.synth(tmp_path / "a.parquet", n_images=8, seed=3)
    api.synth(tmp_path / "b.parquet", n_images=8, seed=3)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
