"""Features: the caption table's entries and their writing systems."""

import numpy as np

from ncclean.data.corpus import read_corpus
from ncclean.data.schema import Columns
from ncclean.data.scripts import NAMES
from ncclean.models.features import build_features, complete_config
from ncclean.models.matcher import MatcherConfig
from tests.helpers import write_parquet


def test_a_caption_is_read_from_its_first_usable_row(tmp_path, rng):
    """A caption whose first row lacks its vector (so is unusable) takes the vector of its first
    row that has one, not that row's zeros."""
    vectors = rng.normal(size=(6, 4)).astype(np.float32)
    path = write_parquet(tmp_path / "pairs.parquet", {
        "caption": ["shared", "one", "Красный", "shared", "two", "shared"],
        "img": list(rng.normal(size=(6, 3)).astype(np.float32)),
        "txt": [None, *vectors[1:]]})
    corpus = read_corpus(path, Columns(image_emb="img", text_emb="txt"))
    config = complete_config(MatcherConfig(image_tower="column", text_tower="column"), corpus)
    features = build_features(corpus, config)
    assert list(features.rows) == [1, 2, 3, 4, 5]
    by_row = dict(zip(features.rows, features.text_group, strict=True))
    np.testing.assert_array_equal(features.text_data[by_row[3]], vectors[3])
    assert by_row[3] == by_row[5]
    assert [NAMES[features.text_script[by_row[r]]] for r in (1, 2, 3)] == [
        "latin", "cyrillic", "latin"]
