import numpy as np
import pyarrow as pa
import pytest

from ncclean.data.images import (
    RowProblem,
    decode_image,
    image_identity,
    image_kind,
    image_values,
    load_image_bytes,
)
from ncclean.errors import SchemaError
from tests.helpers import png_bytes


def test_decode_pads_to_a_white_square():
    array = decode_image(png_bytes((200, 30, 30), size=(40, 20)), 16)
    assert array.shape == (16, 16, 3) and array.dtype == np.uint8
    assert tuple(array[8, 8]) == (200, 30, 30)  # the picture, scaled
    assert tuple(array[0, 8]) == (255, 255, 255)  # the padding


def test_transparency_is_composited_on_white():
    array = decode_image(png_bytes((0, 0, 0), mode="RGBA"), 8)
    assert 120 <= array[4, 4, 0] <= 135  # half-transparent black on white is mid grey


def test_corrupt_png_is_a_row_problem():
    data = png_bytes()
    with pytest.raises(RowProblem, match="undecodable image"):
        decode_image(data[:40] + b"\x00" * 40, 8)
    with pytest.raises(RowProblem, match="undecodable image"):
        decode_image(b"definitely not an image", 8)


def test_decompression_bomb_is_refused_from_the_header(huge_png_bytes):
    with pytest.raises(RowProblem, match=r"^image too large: more than 89,478,485 pixels "
                                         r"\(--max-image-pixels\)$"):
        decode_image(huge_png_bytes, 8)
    with pytest.raises(RowProblem, match="^image too large: more than 100 pixels"):
        decode_image(png_bytes(size=(32, 20)), 8, max_pixels=100)


def test_values_from_bytes_paths_and_structs(tmp_path):
    data = png_bytes()
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(data)
    assert load_image_bytes("img/a.png", tmp_path) == data
    assert load_image_bytes(data, tmp_path) == data
    with pytest.raises(RowProblem, match="missing image: no file img/b.png"):
        load_image_bytes("img/b.png", tmp_path)
    with pytest.raises(RowProblem, match="URL"):
        load_image_bytes("https://example.com/a.png", tmp_path)
    with pytest.raises(RowProblem, match="missing image"):
        load_image_bytes(None, tmp_path)

    struct = pa.array([{"bytes": data, "path": None}, {"bytes": None, "path": "img/a.png"}, None])
    assert image_kind("image", struct.type) == "struct"
    assert image_values(struct, "struct") == [data, "img/a.png", None]


def test_image_kind_rejects_other_types():
    with pytest.raises(SchemaError, match="expected image bytes"):
        image_kind("image", pa.int64())


def test_identity_is_by_content_or_resolved_path(tmp_path):
    a, b = png_bytes((1, 2, 3)), png_bytes((3, 2, 1))
    assert image_identity(a, tmp_path) == image_identity(bytes(a), tmp_path)
    assert image_identity(a, tmp_path) != image_identity(b, tmp_path)
    assert image_identity("x/../a.png", tmp_path) == image_identity("a.png", tmp_path)
    assert image_identity(None, tmp_path) is None
