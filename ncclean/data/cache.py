"""An on-disk cache for work worth doing once per input: decoded images, frozen text vectors.

Entries are ``.npy`` files opened as memory maps, named by a hash of what they were computed from
(the input's content, the decoding size, the code version), with a JSON file beside each. The JSON
file is written last and marks the entry complete, so an interrupted run leaves no entry that a
later run would trust. The cache lives in ``$NCCLEAN_CACHE``, else ``$XDG_CACHE_HOME/ncclean``,
else ``~/.cache/ncclean``; deleting it is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ncclean.data.parquet import atomic_path, write_json


def default_cache_dir() -> Path:
    if os.environ.get("NCCLEAN_CACHE"):
        return Path(os.environ["NCCLEAN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ncclean"


def content_key(parts: Iterable[bytes | str | None]) -> str:
    """A short hex digest of a sequence of parts (``None`` counts as a part of its own)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = b"\x00<none>" if part is None else part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def cached_array(
    directory: Path,
    key: str,
    shape: tuple[int, ...],
    dtype: np.dtype | type,
    fill: Callable[[np.ndarray], dict[str, Any]],
) -> tuple[np.ndarray, dict[str, Any]]:
    """The array stored under ``key``, computed by ``fill(out)`` on a miss.

    ``fill`` writes into ``out`` (a writable memory map of ``shape`` and ``dtype``) and returns
    metadata worth keeping (say, which images failed); the array comes back as a read-only memory
    map with that metadata.
    """
    directory.mkdir(parents=True, exist_ok=True)
    data_path, meta_path = directory / f"{key}.npy", directory / f"{key}.json"
    if meta_path.exists() and data_path.exists():
        array = np.load(data_path, mmap_mode="r")
        if array.shape == tuple(shape) and array.dtype == np.dtype(dtype):
            return array, json.loads(meta_path.read_text())
    with atomic_path(data_path) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=tuple(shape))
        meta = fill(out)
        out.flush()
        del out
    write_json(meta_path, meta)
    return np.load(data_path, mmap_mode="r"), meta
