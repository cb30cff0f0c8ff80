"""Image values as they come in a Parquet column, and decoding them safely.

An image cell is PNG/JPEG bytes, a path (relative to the Parquet file that holds it, or absolute),
or the Hugging Face ``{bytes, path}`` struct. Per-row problems (no image, a file that is not there,
bytes PIL cannot decode, an image over the pixel limit) raise :class:`RowProblem` with the reason
that ends up in the output's ``invalid_reason`` column; they never stop a run.
"""

from __future__ import annotations

import hashlib
import io
import struct
import warnings
import zlib
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
from PIL import Image, ImageOps

from ncclean.errors import SchemaError

ImageKind = Literal["bytes", "path", "struct"]

# PIL's own decompression-bomb limit (about 89.5 megapixels); ours is the same by default.
DEFAULT_MAX_PIXELS = 89_478_485

_DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError, struct.error, zlib.error,
                  Image.DecompressionBombError)


class RowProblem(Exception):
    """A row cannot be used; ``str(self)`` is the reason recorded for it."""


def image_kind(name: str, field_type: pa.DataType) -> ImageKind:
    """How the image column ``name`` stores images; :class:`SchemaError` when it is none of the
    supported forms."""
    if pa.types.is_binary(field_type) or pa.types.is_large_binary(field_type) \
            or pa.types.is_binary_view(field_type):
        return "bytes"
    if pa.types.is_string(field_type) or pa.types.is_large_string(field_type) \
            or pa.types.is_string_view(field_type):
        return "path"
    if pa.types.is_struct(field_type) and {"bytes", "path"} <= {f.name for f in field_type}:
        return "struct"
    raise SchemaError(
        f"image column {name!r} holds {field_type}; expected image bytes, a path, "
        "or a {bytes, path} struct"
    )


def image_values(column: pa.Array, kind: ImageKind) -> list:
    """One Python value per row: ``bytes``, a path ``str`` or ``None``."""
    if kind != "struct":
        return column.to_pylist()
    data = column.field("bytes").to_pylist()
    paths = column.field("path").to_pylist()
    valid = column.is_valid().to_pylist()
    return [(b if b is not None else p) if ok else None for b, p, ok in zip(data, paths, valid)]


def image_identity(value: bytes | str | None, base_dir: Path) -> bytes | None:
    """A 16-byte key equal for equal images: the hash of the bytes, or of the resolved path with
    the file's size and modification time (two paths to copies of one picture count as two
    images; a file changed in place is a new image). ``None`` for a missing image."""
    if value is None:
        return None
    if isinstance(value, str):
        if _is_url(value):
            value = b"url:" + value.encode()
        else:
            path = (base_dir / value).resolve()
            try:
                stat = path.stat()
                stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
            except OSError:
                stamp = "absent"
            value = f"path:{path}|{stamp}".encode()
    return hashlib.blake2b(value, digest_size=16).digest()


def _is_url(value: str) -> bool:
    return value.split("://", 1)[0].lower() in {"http", "https", "s3", "gs", "ftp"}


def load_image_bytes(value: bytes | str | None, base_dir: Path) -> bytes:
    """The encoded image: the bytes themselves or the file's content. Raises :class:`RowProblem`."""
    if value is None:
        raise RowProblem("missing image")
    if isinstance(value, bytes):
        if not value:
            raise RowProblem("missing image: empty bytes")
        return value
    if _is_url(value):
        raise RowProblem("image is a URL; download the images first (for example with img2dataset)")
    path = base_dir / value
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise RowProblem(f"missing image: no file {value}") from None
    except OSError as error:
        raise RowProblem(f"unreadable image file {value}: {error.strerror or error}") from None


def open_rgb(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS,
             draft: int | None = None) -> Image.Image:
    """Decode to an RGB PIL image, transparency composited on white. Raises :class:`RowProblem`
    for undecodable data or more than ``max_pixels`` pixels; the size is checked from the header,
    before any pixel is decoded. ``draft``: let JPEG decode at a reduced scale near that side."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                if width * height > max_pixels:
                    raise RowProblem(
                        f"image too large: {width}x{height} pixels, over the limit of "
                        f"{max_pixels:,} (--max-image-pixels)"
                    )
                if draft is not None:
                    image.draft("RGB", (draft, draft))
                rgb = _to_rgb(image)
                rgb.load()
                return rgb
    except Image.DecompressionBombError as error:  # PIL refuses before we see the size
        raise RowProblem(f"image too large: {error}") from None
    except _DECODE_ERRORS as error:
        raise RowProblem(f"undecodable image: {type(error).__name__}: {error}") from None


def decode_image(data: bytes, size: int, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode to an RGB ``(size, size, 3) uint8`` array (:func:`open_rgb`): the longer side scaled
    to ``size`` and the shorter one padded with white (clip art keeps its shape)."""
    rgb = open_rgb(data, max_pixels, draft=size)
    try:
        square = ImageOps.pad(rgb, (size, size), method=Image.Resampling.BILINEAR,
                              color=(255, 255, 255))
    except _DECODE_ERRORS as error:
        raise RowProblem(f"undecodable image: {type(error).__name__}: {error}") from None
    return np.asarray(square, dtype=np.uint8)


def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    if image.mode in ("I", "I;16", "I;16B", "F"):
        array = np.asarray(image, dtype=np.float64)
        span = float(array.max() - array.min()) or 1.0
        image = Image.fromarray(((array - array.min()) / span * 255).astype(np.uint8))
    return image.convert("RGB")
