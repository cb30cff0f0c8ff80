import numpy as np
import pyarrow as pa
import pytest

from ncclean.data.corpus import read_corpus
from ncclean.data.schema import Columns
from ncclean.errors import SchemaError
from tests.helpers import write_parquet


@pytest.mark.parametrize("value_type", [pa.float32(), pa.float16()])
@pytest.mark.parametrize("fixed", [True, False])
def test_zero_and_one_value_vectors_are_invalid_rows(tmp_path, value_type, fixed):
    rows = np.random.default_rng(0).normal(size=(6, 4))
    rows[1] = 0
    rows[3] = 0.5
    rows[4] = -0.0
    list_type = pa.list_(value_type, 4) if fixed else pa.list_(value_type)
    path = write_parquet(tmp_path / "p.parquet", {
        "caption": list("abcdef"), "img": pa.array(list(rows), list_type)})
    corpus = read_corpus(path, Columns(image_emb="img"))
    assert corpus.reasons == [None, "image embedding is all zeros", None,
                              "image embedding has one value in every dimension",
                              "image embedding is all zeros", None]


@pytest.mark.parametrize("fill, what", [(0.0, "all zeros"), (0.3, "one vector")])
def test_a_column_of_one_vector_is_an_error(tmp_path, fill, what):
    rows = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    path = write_parquet(tmp_path / "p.parquet", {
        "caption": list("abcde"), "img": pa.array(list(rows), pa.list_(pa.float32(), 3)),
        "txt": pa.array([[fill, 2 * fill, 3 * fill]] * 4 + [None], pa.list_(pa.float32(), 3))})
    with pytest.raises(SchemaError, match=f"embedding column 'txt' holds {what} in all 4 usable "
                                          "rows"):
        read_corpus(path, Columns(image_emb="img", text_emb="txt"))


def test_one_usable_row_is_not_a_constant_column(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", {
        "caption": ["a", "b"], "img": pa.array([[1.0, 2.0], None], pa.list_(pa.float32(), 2))})
    corpus = read_corpus(path, Columns(image_emb="img"))
    assert corpus.reasons == [None, "missing image embedding"]
