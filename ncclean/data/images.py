"""Image values as they come in a Parquet column, and decoding them safely.

An image cell is PNG/JPEG bytes, a path (relative to the Parquet file that holds it), or the Hugging
Face ``{bytes, path}`` struct. A path that leaves the Parquet's folder (absolute, or climbing out
with ``..``) is refused unless the caller allows it: the path column comes with the data and is not
trusted to name any file on the machine. Per-row problems (no image, a file that is not there,
bytes PIL cannot decode, an image over the pixel limit) raise :class:`RowProblem` with the reason
that ends up in the output's ``invalid_reason`` column; they never stop a run. A reason is stable
text: the same input gives the same reason on every run (no memory addresses, no temp names).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import struct
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Literal

import numpy as np
import pyarrow as pa
from PIL import Image, ImageOps

from ncclean.errors import BadOptionError, SchemaError

ImageKind = Literal["bytes", "path", "struct"]

# PIL's own decompression-bomb limit (about 89.5 megapixels); ours is the same by default.
DEFAULT_MAX_PIXELS = 89_478_485

_DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError, struct.error, zlib.error,
                  Image.DecompressionBombError)

# "<_io.BytesIO object at 0x7f...>" and other object reprs: a new address on every run.
_OBJECT_REPR = re.compile(r"\s*<[^<>]*\bat 0x[0-9a-fA-F]+>")


class RowProblem(Exception):
    """A row cannot be used; ``str(self)`` is the reason recorded for it."""


def too_large(max_pixels: int) -> RowProblem:
    """The one reason for an image over the pixel limit, whoever noticed it (we from the header,
    or PIL before us)."""
    return RowProblem(f"image too large: more than {max_pixels:,} pixels (--max-image-pixels)")


def pil_pixel_ceiling() -> int | None:
    """The most pixels PIL opens at all (twice ``PIL.Image.MAX_IMAGE_PIXELS``), ``None`` when a
    program has switched PIL's guard off."""
    limit = Image.MAX_IMAGE_PIXELS
    return None if limit is None else 2 * int(limit)


def check_max_pixels(max_pixels: int) -> None:
    """Refuse a pixel limit PIL would undercut: above :func:`pil_pixel_ceiling` PIL refuses images
    before we see them, so the limit in force would not be the one asked for.
    Raises :class:`BadOptionError`."""
    ceiling = pil_pixel_ceiling()
    if max_pixels < 1:
        raise BadOptionError(f"--max-image-pixels must be at least 1, got {max_pixels:,}")
    if ceiling is not None and max_pixels > ceiling:
        raise BadOptionError(
            f"--max-image-pixels must be at most {ceiling:,} (PIL opens no larger image), "
            f"got {max_pixels:,}"
        )


@contextlib.contextmanager
def quiet_decompression_warnings() -> Iterator[None]:
    """Silence PIL's ``DecompressionBombWarning`` while the block runs, in every thread.

    Enter it in the thread that starts a decoding pool, around the whole pool: the warnings filter
    list is one per process, so the workers see the filter, and no worker swaps the list in and
    out (``warnings.catch_warnings`` in each worker is a race: one thread's exit restores the old
    filters while another decodes, and PIL's warning reaches stderr). The warning says nothing
    ours does not: every image over our limit is refused from its header with :func:`too_large`.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def stable_reason(prefix: str, error: BaseException) -> str:
    """``prefix: ErrorType: message`` with object reprs (memory addresses) removed, so one input
    gives one reason on every run."""
    if isinstance(error, Image.UnidentifiedImageError):
        return f"{prefix}: not an image format PIL reads"
    text = _OBJECT_REPR.sub("", str(error)).strip()
    return f"{prefix}: {type(error).__name__}: {text}" if text else \
        f"{prefix}: {type(error).__name__}"


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


def leaves_folder(value: str) -> bool:
    """Whether the path ``value`` points outside the folder it is relative to: absolute, or
    climbing out with ``..``. Judged on the text alone, so a symlink the folder's owner put inside
    the folder is followed (the data's path column is what is not trusted, not the disk)."""
    if PurePosixPath(value).is_absolute() or os.path.isabs(value):
        return True
    normal = os.path.normpath(value)
    return normal == ".." or normal.startswith(".." + os.sep)


def image_identity(value: bytes | str | None, base_dir: Path, *,
                   allow_absolute_paths: bool = False) -> bytes | None:
    """A 16-byte key equal for equal images: the hash of the bytes, or of the resolved path with
    the file's size and modification time (two paths to copies of one picture count as two
    images; a file changed in place is a new image). ``None`` for a missing image. A path outside
    ``base_dir`` (see :func:`leaves_folder`) is keyed by its text and never looked at unless
    ``allow_absolute_paths``."""
    if value is None:
        return None
    if isinstance(value, str):
        if _is_url(value):
            value = b"url:" + value.encode()
        elif leaves_folder(value) and not allow_absolute_paths:
            value = b"outside:" + value.encode()
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


def load_image_bytes(value: bytes | str | None, base_dir: Path, *,
                     allow_absolute_paths: bool = False) -> bytes:
    """The encoded image: the bytes themselves or the file's content. A path outside
    ``base_dir`` is refused unless ``allow_absolute_paths``. Raises :class:`RowProblem`."""
    if value is None or value == b"" or value == "":
        raise RowProblem("missing image")
    if isinstance(value, bytes):
        return value
    if _is_url(value):
        raise RowProblem("image is a URL: download the images first (for example with img2dataset)")
    if leaves_folder(value) and not allow_absolute_paths:
        raise RowProblem(f"image path outside the input folder: {value} "
                         "(allow it with --allow-absolute-paths)")
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
    for undecodable data or more than ``max_pixels`` pixels (:func:`too_large`); the size is
    checked from the header, before any pixel is decoded. ``draft``: let JPEG decode at a reduced
    scale near that side. PIL's warning for a large image is not silenced here (see
    :func:`quiet_decompression_warnings`, which a decoding pool enters once)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise too_large(max_pixels)
            if draft is not None:
                image.draft("RGB", (draft, draft))
            rgb = _to_rgb(image)
            rgb.load()
            return rgb
    except Image.DecompressionBombError:  # PIL refused before we saw the size: over ours too
        ceiling = pil_pixel_ceiling()  # (check_max_pixels keeps ours at or below PIL's)
        raise too_large(max_pixels if ceiling is None else min(max_pixels, ceiling)) from None
    except _DECODE_ERRORS as error:
        raise RowProblem(stable_reason("undecodable image", error)) from None


def decode_image(data: bytes, size: int, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode to an RGB ``(size, size, 3) uint8`` array (:func:`open_rgb`): the longer side scaled
    to ``size`` and the shorter one padded with white (clip art keeps its shape)."""
    rgb = open_rgb(data, max_pixels, draft=size)
    try:
        square = ImageOps.pad(rgb, (size, size), method=Image.Resampling.BILINEAR,
                              color=(255, 255, 255))
    except _DECODE_ERRORS as error:
        raise RowProblem(stable_reason("undecodable image", error)) from None
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
