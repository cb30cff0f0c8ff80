import pyarrow as pa
import pytest

from ncclean.data.schema import Columns, resolve_columns
from ncclean.errors import SchemaError

SCHEMA = pa.schema([("id", pa.string()), ("image", pa.binary()), ("caption", pa.string()),
                    ("emb", pa.list_(pa.float32())), ("label", pa.int64())])


def test_defaults_use_id_when_present_and_skip_absent_image_id():
    resolved = resolve_columns(Columns(), SCHEMA)
    assert (resolved.caption, resolved.image, resolved.id, resolved.image_id) == \
        ("caption", "image", "id", None)
    assert resolved.needed() == ["caption", "image", "id"]


def test_missing_caption_column_lists_available_columns():
    with pytest.raises(SchemaError) as error:
        resolve_columns(Columns(caption="text"), SCHEMA)
    message = str(error.value)
    assert "'text'" in message and "--caption-col" in message
    assert "id, image, caption, emb, label" in message


def test_explicitly_named_optional_column_must_exist():
    with pytest.raises(SchemaError, match="'pair'.*available columns"):
        resolve_columns(Columns(id="pair"), SCHEMA)
    with pytest.raises(SchemaError, match="'img'"):
        resolve_columns(Columns(image_id="img"), SCHEMA)


def test_caption_must_be_text_and_embeddings_lists_of_numbers():
    with pytest.raises(SchemaError, match="not text"):
        resolve_columns(Columns(caption="label"), SCHEMA)
    with pytest.raises(SchemaError, match="list of floats"):
        resolve_columns(Columns(image_emb="caption"), SCHEMA)


def test_image_embeddings_replace_the_image_column():
    schema = pa.schema([("caption", pa.string()), ("emb", pa.list_(pa.float16(), 4))])
    resolved = resolve_columns(Columns(image_emb="emb"), schema)
    assert resolved.image is None and resolved.image_emb == "emb"
    assert resolved.image_side == ("emb",)
    with pytest.raises(SchemaError, match="--image-col or --image-emb-col"):
        resolve_columns(Columns(), schema)
