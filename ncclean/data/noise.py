"""Synthetic noisy correspondence: the two published protocols, and the ground truth they leave.

A noise index is a ``(n_pairs,) int64`` array ``caption_to_image``: the image group each caption
sits on after injection (for a clean corpus it equals ``Corpus.image_group``). Both protocols come
from the reference code (``landscape.md`` section A.0):

- ``per-caption`` (NCR, PC2, BiCro, CRCL's ``NCR`` mode): choose ``floor(r * n_pairs)`` captions
  and permute their images among them. A caption may keep its image under other captions of the
  same picture.
- ``per-image`` (DECL, RCL): choose ``floor(r * n_images)`` images and permute them, so all
  captions of a chosen image move to the same other image together.

One departure from the reference code, on purpose: its plain shuffle leaves some chosen captions on
their own image (NCR's released F30K 20% file realises 0.19999), so the realised ratio drifts below
the request by chance. Here the shuffle is repaired into a derangement by image, so every chosen
caption lands on another image and the realised ratio equals the request whenever that is possible
(it is not when one image holds more than half of the chosen captions). Published index files are
re-applied exactly with :func:`apply_index`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ncclean.errors import BadOptionError, IndexFileError

Protocol = Literal["per-caption", "per-image"]
PROTOCOLS: tuple[str, ...] = ("per-caption", "per-image")


def derange_by_value(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random permutation of ``values`` in which, wherever possible, no position keeps a value
    equal to its own: a uniform shuffle, then each position that kept its value swaps with a random
    position where the swap moves both."""
    shuffled = values[rng.permutation(len(values))]
    for i in np.flatnonzero(shuffled == values):
        if shuffled[i] != values[i]:
            continue  # an earlier swap moved it already
        candidates = np.flatnonzero((shuffled != values[i]) & (values != values[i]))
        if len(candidates):
            j = candidates[rng.integers(len(candidates))]
            shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
    return shuffled


def sample_noise(
    image_group: np.ndarray, ratio: float, protocol: Protocol, seed: int
) -> np.ndarray:
    """Draw a noise index for a corpus whose pair ``i`` shows image ``image_group[i]``.

    Returns ``caption_to_image``, ``(n_pairs,) int64``. ``ratio`` is the share of captions
    (``per-caption``) or of images (``per-image``) to move.
    """
    if not 0.0 <= ratio <= 1.0:
        raise BadOptionError(f"--ratio must lie in [0, 1], got {ratio}")
    if protocol not in PROTOCOLS:
        raise BadOptionError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    rng = np.random.default_rng(seed)
    image_group = np.asarray(image_group, dtype=np.int64)
    if protocol == "per-caption":
        chosen = rng.permutation(len(image_group))[: int(ratio * len(image_group))]
        caption_to_image = image_group.copy()
        caption_to_image[chosen] = derange_by_value(image_group[chosen], rng)
        return caption_to_image
    n_images = int(image_group.max()) + 1 if len(image_group) else 0
    chosen = rng.permutation(n_images)[: int(ratio * n_images)]
    new_image = np.arange(n_images, dtype=np.int64)
    new_image[chosen] = derange_by_value(chosen, rng)
    return new_image[image_group]


def apply_index(index: np.ndarray, image_group: np.ndarray) -> np.ndarray:
    """Turn a saved index into ``caption_to_image`` for this corpus.

    Accepts a caption-to-image array (``n_pairs`` entries: ncclean's own files and the published
    NCR / BiCro / PC2 / L2RM files) or an image permutation (``n_images`` entries: RCL's files,
    caption ``i`` moving to ``index[image of i]``). Image numbers are image groups in order of
    first appearance, which for a corpus stored image by image (F30K, COCO) is the reference
    code's image order. Raises :class:`IndexFileError` when the index does not fit.
    """
    index = np.asarray(index)
    n_pairs = len(image_group)
    n_images = int(image_group.max()) + 1 if n_pairs else 0
    if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
        raise IndexFileError(
            f"a noise index is a 1-D integer array; this one is {index.dtype} "
            f"of shape {index.shape}"
        )
    if len(index) and (index.min() < 0 or index.max() >= n_images):
        raise IndexFileError(
            f"noise index refers to images {index.min()}..{index.max()}, "
            f"but the corpus has {n_images} images (0..{n_images - 1})"
        )
    if len(index) == n_pairs:
        return index.astype(np.int64)
    if len(index) == n_images:
        return index.astype(np.int64)[image_group]
    raise IndexFileError(
        f"noise index has {len(index)} entries; this corpus needs {n_pairs} "
        f"(one per caption) or {n_images} (one per image)"
    )


def image_rows(caption_to_image: np.ndarray, image_group: np.ndarray) -> np.ndarray:
    """``(n_pairs,) int64``: the row whose image side each row shows after injection: itself when
    its caption kept its image, else the first row of its new image."""
    first_row = np.unique(image_group, return_index=True)[1]
    moved = caption_to_image != image_group
    return np.where(moved, first_row[caption_to_image], np.arange(len(image_group)))


def noisy_ground_truth(
    caption_to_image: np.ndarray, image_group: np.ndarray, text_group: np.ndarray
) -> np.ndarray:
    """``(n_pairs,) bool``: the caption sits on an image that is not its own *and* its text differs
    from every caption that image had. Swapping two identical captions ("gramastar") is no noise."""
    moved = caption_to_image != image_group
    n_texts = int(text_group.max()) + 1 if len(text_group) else 1
    own_pairs = np.unique(image_group.astype(np.int64) * n_texts + text_group)
    now_pairs = caption_to_image.astype(np.int64) * n_texts + text_group
    return moved & ~np.isin(now_pairs, own_pairs)
