"""The one thread pool that decodes images, shared by every reader of image bytes.

PIL releases the GIL while it decodes and resizes, so threads decode in parallel. Corpus reading
(:func:`ncclean.data.corpus.map_images`), frozen image vectors and ``ncclean embed`` all submit
to this pool; it is made on first use, once per process (again in a forked child, whose copy of
the parent's threads does not run).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_owner: int | None = None


def decode_workers() -> int:
    """How many threads decode: the CPU count, at most 32 (a GPU's image tower is fed by them:
    on 16 cores, 8 threads decoded 1,750 clip-art images/s, below what the network takes;
    benchmarks/results/gpu.md)."""
    return min(32, os.cpu_count() or 1)


@contextmanager
def image_pool() -> Iterator[ThreadPoolExecutor]:
    """The process's image-decoding pool. A context manager so that callers read as with any
    executor; leaving it does not shut the pool down (the next caller reuses the threads)."""
    global _pool, _owner
    with _lock:
        if _pool is None or _owner != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=decode_workers(),
                                       thread_name_prefix="ncclean-decode")
            _owner = os.getpid()
        pool = _pool
    yield pool
