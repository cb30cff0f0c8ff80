"""A prior space: a ridge CCA of the default towers' vectors fitted once on named icons and
shipped with ncclean, in which a corpus too small to fit a good space of its own can read its
pairs.

The default towers (ImageNet EfficientNet-Lite0 for images, e5 for captions) are the same on
every corpus, so a CCA fitted on other corpora's pairs is a fixed space like a CLIP's. The one
shipped (``priors/icons.safetensors``) is fitted on Material Design Icons (Apache-2.0) and
Tabler Icons (MIT), each icon's picture with its name (``benchmarks/kernels/prior_space.py``
builds it).
It carries over to corpora of its kind only, and pays where a corpus is small: the cosine in it
is one more side of ``clip``'s neighbours' term (:mod:`ncclean.methods.neighbours`), weighed
by the same discriminant between the corpus's pairs and shuffled ones, which weighs it near or
at zero where it does not part them (``benchmarks/results/prior.md``).

A corpus's vectors are read in the prior where their widths are the default towers'
(:data:`IMAGE_WIDTH`, :data:`TEXT_WIDTH`). Other towers of those widths lose the prior's gain,
but they cost little. Rotated vectors, the worst case, moved AUROC by -0.003 to +0.004
([results](../../benchmarks/results/prior.md#towers-of-the-defaults-widths-that-are-not-the-defaults)).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from ncclean.errors import NcCleanError
from ncclean.methods.align import Alignment

BUNDLED = Path(__file__).parent / "priors" / "icons.safetensors"
IMAGE_WIDTH, TEXT_WIDTH = 1280, 384
#: The prior's fit: directions and ridge (relative to each covariance's mean eigenvalue), on
#: unit rows.
DIMS, RIDGE = 256, 0.1
_NAMES = ("image_mean", "text_mean", "image_projection", "text_projection")


def bundled_prior(choice: str, image_width: int, text_width: int) -> Alignment | None:
    """The shipped prior for ``clip``'s ``prior`` (``auto``: where the vectors' widths are the
    default towers'; ``off``: never)."""
    if choice == "off" or (image_width, text_width) != (IMAGE_WIDTH, TEXT_WIDTH):
        return None
    if not BUNDLED.is_file():  # an install without its package data: say so, never score less
        raise NcCleanError(f"ncclean's prior space is missing ({BUNDLED}): reinstall ncclean, "
                           "or pass -p prior=off")
    return load_prior(BUNDLED)


@functools.lru_cache(maxsize=2)
def load_prior(path: Path) -> Alignment:
    from safetensors.numpy import load_file

    return prior_from_arrays(load_file(str(path)), "")


def save_prior(prior: Alignment, path: Path, metadata: dict[str, str]) -> None:
    """``prior`` as float16 safetensors (the means float32), with ``metadata``."""
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(prior_arrays(prior, ""), str(path), metadata=metadata)


def prior_arrays(prior: Alignment, prefix: str) -> dict[str, np.ndarray]:
    """What a file or a saved fit keeps of ``prior``: its projections as float16, which is what
    every reading uses (:func:`prior_from_arrays`), so a fit and its application agree."""
    return {f"{prefix}{name}": np.ascontiguousarray(getattr(prior, name), dtype=np.float16 if
                                                    name.endswith("projection") else np.float32)
            for name in _NAMES}


def prior_from_arrays(arrays: dict[str, np.ndarray], prefix: str) -> Alignment | None:
    if f"{prefix}image_projection" not in arrays:
        return None
    tables = [np.asarray(arrays[f"{prefix}{name}"], np.float16 if name.endswith("projection")
                         else np.float32).astype(np.float32) for name in _NAMES]
    return Alignment(*tables, np.zeros(tables[2].shape[1]), RIDGE)


def in_prior(prior: Alignment, images: np.ndarray, texts: np.ndarray) \
        -> tuple[np.ndarray, np.ndarray]:
    """Each image and caption vector (raw tables, any length) as a unit vector of the prior,
    which was fitted on unit rows."""
    from ncclean.methods.unit import unit_rows

    return prior.project_images(unit_rows(images)), prior.project_texts(unit_rows(texts))
