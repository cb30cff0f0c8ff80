"""Frozen image vectors of a corpus: every image group through a pretrained image encoder, once.

Shared by the frozen image towers (``clip``, ``imagenet``): images are read and prepared on the
one decoding pool (:mod:`ncclean.data.pool`, through :func:`ncclean.data.corpus.map_images`), the
encoder runs on each record batch's prepared images, and the vectors are cached by the encoder's
identity and the images' content (:mod:`ncclean.data.cache`), so a second run reads them back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ncclean.progress import Progress, no_progress


class ImageEncoder(Protocol):
    """What :func:`frozen_image_vectors` needs of a loaded encoder."""

    dim: int

    def prepare(self, data: bytes, max_pixels: int) -> Any:
        """Encoded image -> the model's input (runs on decoding threads; raises
        :class:`ncclean.data.images.RowProblem` for an unusable image)."""

    def images(self, prepared: list) -> np.ndarray:
        """``(len(prepared), dim) float32`` vectors."""


def frozen_image_vectors(corpus, load: Callable[[], ImageEncoder], *, kind: str, identity: str,
                         dim: int, label: str, max_pixels: int,
                         cache_dir: Path | None = None,
                         progress: Progress = no_progress) -> np.ndarray:
    """``(n_images, dim) float32`` vectors of every image group of ``corpus`` by the encoder
    ``load()`` returns (loaded only on a cache miss); rows of images that cannot be used are
    marked invalid and their vectors are zero. Cached in ``cache_dir / kind`` under a key of
    ``kind``'s images, ``identity``, ``max_pixels`` and the images' content."""
    from ncclean.data.corpus import group_digests, map_images, mark_image_problems

    def fill(out: np.ndarray) -> dict:
        encoder = load()
        problems: dict[int, str] = {}
        for results in map_images(corpus, lambda data: encoder.prepare(data, max_pixels),
                                  label, progress):
            good = [(g, r) for g, r in results if not isinstance(r, str)]
            problems.update((g, r) for g, r in results if isinstance(r, str))
            for group, _ in results:
                out[group] = 0.0
            if good:
                out[[g for g, _ in good]] = encoder.images([r for _, r in good])
        return {"encoder": identity, "problems": problems}

    shape = (corpus.n_images, dim)
    if cache_dir is None:
        vectors = np.empty(shape, dtype=np.float32)
        problems = fill(vectors)["problems"]
    else:
        from ncclean.data.cache import cached_array, content_key

        key = content_key([f"{kind}-images", identity, str(max_pixels), *group_digests(corpus)])
        vectors, meta = cached_array(Path(cache_dir) / kind, key, shape, np.float32, fill)
        problems = {int(group): reason for group, reason in meta["problems"].items()}
    mark_image_problems(corpus, problems)
    return vectors
