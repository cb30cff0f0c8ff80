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

An index applies by row position, so it is only right on rows in the order it was made for.
ncclean's own index files (:func:`write_index`, ``.npz``) carry the rows' ids, a digest of their
captions and the image grouping they were drawn on; :func:`align_index` follows the ids to rows in
another order and refuses rows it cannot account for. A published file (a bare ``.npy``) carries
none of these: :func:`align_index` refuses it when it moves far more captions on this corpus than
in its own order, the mark of rows in another order.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

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


# ------------------------------------------------------------------------------- index files

INDEX_SUFFIX = ".noise.npz"

# Without ids, an index applies by position to rows whose captions are, but for this share (typo
# fixes), those it was made on.
CAPTION_SLACK = 0.01

# A published index may move at most this much more of a corpus's captions than of its own order
# (5 points) before it is refused: rows in another order move almost every caption.
PUBLISHED_SLACK = 0.05


@dataclass(frozen=True)
class SavedIndex:
    """A noise index as read from a file. ``caption_to_image``: the saved integer array
    (``n_pairs`` or ``n_images`` entries). ``image_group``, ``ids`` and ``captions``:
    ``(n_pairs,)``, the grouping it was drawn on, the rows' ids (int64, or str) and their
    :func:`caption_digests`, ``None`` where the file does not carry them (published files,
    ncclean's older ``.npy``; ``ids`` for a corpus without an id column)."""

    caption_to_image: np.ndarray
    image_group: np.ndarray | None = None
    ids: np.ndarray | None = None
    captions: np.ndarray | None = None


def index_ids(ids: pa.Array) -> np.ndarray:
    """``(n,)`` ids as saved in an index: int64 for integer ids without nulls, else text."""
    if pa.types.is_integer(ids.type) and ids.null_count == 0:
        return ids.to_numpy(zero_copy_only=False).astype(np.int64)
    try:
        values = ids.cast(pa.string()).fill_null("").to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = [repr(value) for value in ids.to_pylist()]
    return np.asarray(values, dtype=str)


def caption_digests(captions: list[str]) -> np.ndarray:
    """``(n,) uint64``: a 64-bit hash of each caption's text, to tell whether rows still hold the
    captions an index was made for."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(),
                                       "little") for text in captions),
                       dtype=np.uint64, count=len(captions))


def write_index(dest: str | os.PathLike, caption_to_image: np.ndarray, image_group: np.ndarray,
                ids: pa.Array | None, captions: list[str] | None = None) -> None:
    """Save ``caption_to_image`` with the ``image_group`` it applies to, the :func:`caption_digests`
    of ``captions`` and, when the corpus has an id column, the rows' ``ids`` (all ``(n_pairs,)``),
    as an ``.npz`` (read by ``np.load``), atomically. The zip entries carry a fixed date, so the
    same index gives the same bytes."""
    from ncclean.data.parquet import atomic_path

    arrays = {"caption_to_image": np.asarray(caption_to_image, dtype=np.int64),
              "image_group": np.asarray(image_group, dtype=np.int64)}
    if ids is not None:
        arrays["ids"] = index_ids(ids)
    if captions is not None:
        arrays["captions"] = caption_digests(captions)
    with atomic_path(dest) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, array, allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)),
                             buffer.getvalue())


def read_index(path: str | os.PathLike) -> SavedIndex:
    """Read a noise index: ncclean's ``.npz`` or a bare ``.npy`` (ncclean's older files and the
    published NCR / BiCro / PC2 / L2RM / RCL ones). Raises :class:`IndexFileError`."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        # numpy takes any file that is not .npy or .npz for a pickle, and says so
        reason = "not a .npz or .npy file (an index is inject-noise's OUT.noise.npz, or a " \
            "published .npy)" if "pickle" in str(error) else error
        raise IndexFileError(f"cannot read noise index {path}: {reason}") from None
    if isinstance(loaded, np.ndarray):
        return SavedIndex(loaded)
    with loaded:
        if "caption_to_image" not in loaded.files:
            raise IndexFileError(f"cannot read noise index {path}: no caption_to_image array "
                                 f"(it holds {', '.join(loaded.files) or 'nothing'})")
        try:
            arrays = {name: loaded[name] for name in ("caption_to_image", "image_group", "ids",
                                                      "captions") if name in loaded.files}
        except (OSError, ValueError) as error:
            raise IndexFileError(f"cannot read noise index {path}: {error}") from None
    index = arrays["caption_to_image"]
    for name in ("image_group", "ids", "captions"):
        if name in arrays and arrays[name].shape != index.shape:
            raise IndexFileError(f"noise index {path}: {name} has {arrays[name].shape} entries "
                                 f"for {index.shape} in caption_to_image")
    return SavedIndex(index, arrays.get("image_group"), arrays.get("ids"), arrays.get("captions"))


def align_index(saved: SavedIndex, image_group: np.ndarray, ids: pa.Array | None = None,
                captions: list[str] | None = None, *,
                name: str | os.PathLike = "noise index") -> np.ndarray:
    """``caption_to_image`` (``(n_pairs,) int64``) for this corpus from a saved index, checked.

    With ids in the file and ``ids`` given (the corpus's id column), rows are matched by id, in
    any order; with the file's ``image_group``, the corpus must group its images the same way;
    without ids, at most :data:`CAPTION_SLACK` of the rows may hold other ``captions`` than the
    file's. A file with none of these (published) is applied by position (:func:`apply_index`)
    and refused when it moves over :data:`PUBLISHED_SLACK` more of this corpus's captions than it
    does in its own order. Raises :class:`IndexFileError` saying which check failed.
    """
    image_group = np.asarray(image_group, dtype=np.int64)
    name = str(name)
    if saved.image_group is None:
        caption_to_image = apply_index(saved.caption_to_image, image_group)
        _check_published(saved.caption_to_image, caption_to_image, image_group, name)
        return caption_to_image
    index, old_group = saved.caption_to_image.astype(np.int64), saved.image_group
    if len(index) != len(image_group):
        raise IndexFileError(f"{name} was written for {len(index):,} rows; this corpus has "
                             f"{len(image_group):,}")
    matched = saved.ids is not None and ids is not None
    if matched:
        rows = _rows_of(saved.ids, index_ids(ids), name)
        index, old_group = index.copy(), old_group.copy()
        index[rows], old_group[rows] = saved.caption_to_image, saved.image_group
    caption_to_image = _renumber(index, old_group, image_group, name)
    if not matched and saved.captions is not None and captions is not None:
        differ = saved.captions != caption_digests(captions)
        if differ.mean() > CAPTION_SLACK:
            raise IndexFileError(
                f"{name} was written for other captions in these rows ({int(differ.sum()):,} of "
                f"{len(differ):,} differ, first: row {int(np.flatnonzero(differ)[0])}); apply it "
                "to the rows it was written for, in the same order"
            )
    return caption_to_image


def _rows_of(saved_ids: np.ndarray, ids: np.ndarray, name: str) -> np.ndarray:
    """The corpus row of every saved id (``(n,) int64``); the identity when the order is the
    same."""
    if saved_ids.dtype.kind == ids.dtype.kind and np.array_equal(saved_ids, ids):
        return np.arange(len(ids))
    if saved_ids.dtype.kind != ids.dtype.kind:
        kinds = {"i": "integer"}
        raise IndexFileError(f"{name} was written for {kinds.get(saved_ids.dtype.kind, 'text')} "
                             f"ids; this corpus's ids are {kinds.get(ids.dtype.kind, 'text')}")
    order = np.argsort(ids, kind="stable")
    at = np.minimum(np.searchsorted(ids[order], saved_ids), len(ids) - 1)
    rows = order[at]
    missing = ids[rows] != saved_ids
    if missing.any():
        first = saved_ids[np.flatnonzero(missing)[0]].item()
        raise IndexFileError(f"{name} names {int(missing.sum()):,} ids this corpus does not hold "
                             f"(first: {first!r}); it was written for another corpus")
    if len(np.unique(rows)) != len(rows):
        raise IndexFileError(f"{name}: the ids repeat, so rows in another order cannot be "
                             "matched; apply it to the rows in the order it was written for")
    return rows


def _renumber(index: np.ndarray, old_group: np.ndarray, image_group: np.ndarray,
              name: str) -> np.ndarray:
    """Translate image numbers of the grouping the index was drawn on (``old_group``, row by row
    as the corpus is now) into this corpus's ``image_group``; refuse groupings that differ."""
    pairs = np.unique(np.stack([old_group, image_group]), axis=1)
    new_per_old, old_per_new = np.bincount(pairs[0]), np.bincount(pairs[1])
    split = (new_per_old[old_group] > 1) | (old_per_new[image_group] > 1)
    if split.any():
        raise IndexFileError(
            f"{name} does not fit this corpus: its images are grouped differently (row "
            f"{int(np.flatnonzero(split)[0])} shares its image with other rows than when the index "
            "was written); apply it to the rows it was written for, in the same order"
        )
    new_of_old = np.full(int(max(old_group.max(), index.max())) + 1, -1, dtype=np.int64)
    new_of_old[pairs[0]] = pairs[1]
    caption_to_image = new_of_old[np.maximum(index, 0)]
    if (index < 0).any() or (caption_to_image < 0).any():
        raise IndexFileError(f"{name} moves captions to images its own grouping does not have")
    return caption_to_image


def _check_published(index: np.ndarray, caption_to_image: np.ndarray, image_group: np.ndarray,
                     name: str) -> None:
    """Refuse a caption-level index that moves far more captions here than in its own order.

    Noise is a permutation of images among captions, so the index's values sorted are the clean
    layout of the order it was made for (each image's captions together, images in order, as the
    reference code stores F30K and COCO), and ``index != sort(index)`` its own noise. On rows in
    another order nearly every caption moves. Only excess is refused: on a corpus stored in another
    layout (captions of one image apart) the sorted estimate overstates the file's own noise.
    """
    if len(index) != len(image_group) or not len(index):
        return  # an image permutation moves whole images: nothing row-wise to compare
    own = float(np.mean(index != np.sort(index)))
    here = float(np.mean(caption_to_image != image_group))
    if here > own + PUBLISHED_SLACK:
        raise IndexFileError(
            f"{name} moves {own:.1%} of captions in its own order but would move {here:.1%} of "
            "this corpus's: the rows are not in the order it was made for (a published index "
            "assumes the reference order, each image's captions next to each other)"
        )
