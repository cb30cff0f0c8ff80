"""Helpers for building test inputs."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image


def png_bytes(colour: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (32, 20),
              mode: str = "RGB") -> bytes:
    image = Image.new(mode, size, colour if mode == "RGB" else (*colour, 128))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def huge_png(width: int = 20000, height: int = 20000) -> bytes:
    """A genuine, valid 1-bit PNG of ``width x height`` pixels, a few kB on disk."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + b"\x00" * ((width + 7) // 8)
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    signature = b"\x89PNG\r\n\x1a\n"
    return signature + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def write_parquet(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def retrain_corpus(folder: Path) -> Path:
    """A tiny corpus for scoring and retraining in ``folder``: ``noisy.parquet`` (30 images,
    90 pairs, 40% noise injected) and a held-out ``test.parquet`` (12 images, 24 pairs)."""
    from ncclean import api

    api.synth(folder / "clean.parquet", n_images=30, captions_per_image=3, seed=0)
    api.synth(folder / "test.parquet", n_images=12, captions_per_image=2, seed=9)
    api.inject_noise(folder / "clean.parquet", folder / "noisy.parquet", ratio=0.4, seed=0)
    return folder
