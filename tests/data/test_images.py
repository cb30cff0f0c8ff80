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


def test_reasons_are_stable_text():
    from ncclean.data.images import stable_reason

    with pytest.raises(RowProblem) as first:
        decode_image(b"definitely not an image", 8)
    with pytest.raises(RowProblem) as second:
        decode_image(b"definitely not an image", 8)
    assert str(first.value) == str(second.value) == \
        "undecodable image: not an image format PIL reads"
    error = OSError("cannot read <_io.BytesIO object at 0x7f5fa89d3d30> at all")
    assert stable_reason("undecodable image", error) == \
        "undecodable image: OSError: cannot read at all"


def test_empty_bytes_and_null_are_one_reason(tmp_path):
    for value in (None, b"", ""):
        with pytest.raises(RowProblem, match="^missing image$"):
            load_image_bytes(value, tmp_path)


@pytest.mark.parametrize("value, outside", [
    ("a.png", False), ("img/a.png", False), ("img/../a.png", False), ("./a.png", False),
    ("../a.png", True), ("img/../../a.png", True), ("..", True), ("/etc/passwd", True),
    ("../../../../etc/passwd", True), ("..a.png", False),
])
def test_paths_that_leave_the_folder(value, outside):
    from ncclean.data.images import leaves_folder

    assert leaves_folder(value) is outside


def test_paths_outside_the_folder_are_refused_unless_allowed(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "secret.png").write_bytes(png_bytes())
    base = tmp_path / "data"
    for value in ("../secret.png", str(tmp_path / "secret.png")):
        with pytest.raises(RowProblem, match="image path outside the input folder: .*"
                                             r"\(allow it with --allow-absolute-paths\)"):
            load_image_bytes(value, base)
        assert load_image_bytes(value, base, allow_absolute_paths=True) == png_bytes()
    # Never looked at for its key either: the same text, the same key, whatever is on disk.
    assert image_identity("../secret.png", base) != \
        image_identity("../secret.png", base, allow_absolute_paths=True)


def test_a_pixel_limit_pil_would_undercut_is_refused():
    from ncclean.data.images import check_max_pixels
    from ncclean.errors import BadOptionError

    check_max_pixels(178_956_970)
    with pytest.raises(BadOptionError, match="at most 178,956,970"):
        check_max_pixels(178_956_971)
    with pytest.raises(BadOptionError, match="at least 1"):
        check_max_pixels(0)


def test_pil_warning_is_silenced_inside_pool_workers():
    import warnings
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    from ncclean.data.images import quiet_decompression_warnings
    from tests.helpers import huge_png

    big = huge_png(10000, 10000)  # between PIL's warning and its refusal

    def decode(_):
        with pytest.raises(RowProblem, match="more than 89,478,485 pixels"):
            decode_image(big, 8)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_decompression_warnings(), ThreadPoolExecutor(4) as pool:
            list(pool.map(decode, range(16)))
        decode(None)  # outside the block PIL warns as usual
    bombs = [w for w in seen if issubclass(w.category, Image.DecompressionBombWarning)]
    assert len(bombs) == 1
