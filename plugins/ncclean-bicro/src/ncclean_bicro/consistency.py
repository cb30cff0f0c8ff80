"""BiCro's soft correspondence label: bidirectional cross-modal similarity consistency.

The idea (BiCro's abstract): similar images should have similar captions, and vice versa. Take a
set of *anchor* pairs that are surely clean. For a pair ``(I_i, T_i)``:

- image to text: find the anchor ``a`` whose image is closest to ``I_i``; if the pair is
  matched, its caption ``T_i`` should be about as close to the anchor's caption ``T_a`` as
  ``I_i`` is to ``I_a``. The consistency is the ratio of the two similarities, the smaller over
  the larger: ``rho_IT = min(s_I, s_T) / max(s_I, s_T)`` with ``s_I = cos(I_i, I_a)`` and
  ``s_T = cos(T_i, T_a)``;
- text to image: the same from the anchor whose caption is closest to ``T_i``, ``rho_TI``;
- the soft label is their mean, ``y_i = (rho_IT + rho_TI) / 2`` in [0, 1].

The authors' code offers the ratio on Euclidean distances or on cosines; its ``predict``
(``SIM_PAIR``/``SIM_SELE`` in ``model.py``), which labels the training batches, takes
cosine similarities and the smaller-over-larger ratio, which is what we do. Cosines at or
below zero count as ``1e-4``.
"""

from __future__ import annotations

import numpy as np
import torch

_BLOCK = 2048
_FLOOR = 1e-4


def _ratio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.clamp(min=_FLOOR), b.clamp(min=_FLOOR)
    return torch.minimum(a, b) / torch.maximum(a, b)


def consistency_labels(image_vectors: np.ndarray, text_vectors: np.ndarray,
                       image_group: np.ndarray, text_group: np.ndarray,
                       anchors: np.ndarray) -> np.ndarray:
    """``(n_pairs,) float32`` in [0, 1]: each pair's bidirectional consistency ``y`` with its
    nearest anchors (see the module docstring).

    ``image_vectors`` ``(n_images, d)`` and ``text_vectors`` ``(n_texts, d)``: unit vectors of the
    matcher; ``image_group``/``text_group`` ``(n_pairs,) int``: each pair's row in them;
    ``anchors`` ``(n_anchors,) int``: the anchor pairs. A pair is never its own anchor, nor is an
    anchor sharing its image or its caption text. A pair with no usable anchor gets 0.
    """
    n = len(image_group)
    out = np.zeros(n, dtype=np.float32)
    if len(anchors) == 0 or n == 0:
        return out
    images = torch.from_numpy(np.asarray(image_vectors, dtype=np.float32))
    texts = torch.from_numpy(np.asarray(text_vectors, dtype=np.float32))
    image_group = torch.from_numpy(np.asarray(image_group, dtype=np.int64))
    text_group = torch.from_numpy(np.asarray(text_group, dtype=np.int64))
    anchors = torch.from_numpy(np.asarray(anchors, dtype=np.int64))
    anchor_images, anchor_texts = images[image_group[anchors]], texts[text_group[anchors]]
    for start in range(0, n, _BLOCK):
        rows = torch.arange(start, min(n, start + _BLOCK))
        image_sims = images[image_group[rows]] @ anchor_images.T  # (b, n_anchors)
        text_sims = texts[text_group[rows]] @ anchor_texts.T
        usable = (image_group[rows][:, None] != image_group[anchors][None, :]) & \
            (text_group[rows][:, None] != text_group[anchors][None, :])
        has_anchor = usable.any(dim=1)
        nearest_by_image = image_sims.masked_fill(~usable, float("-inf")).argmax(dim=1)
        nearest_by_text = text_sims.masked_fill(~usable, float("-inf")).argmax(dim=1)
        image_to_text = _ratio(image_sims.gather(1, nearest_by_image[:, None])[:, 0],
                               text_sims.gather(1, nearest_by_image[:, None])[:, 0])
        text_to_image = _ratio(text_sims.gather(1, nearest_by_text[:, None])[:, 0],
                               image_sims.gather(1, nearest_by_text[:, None])[:, 0])
        label = (image_to_text + text_to_image) / 2
        out[start:start + len(rows)] = torch.where(has_anchor, label, 0.0).numpy()
    return out


def pick_anchors(losses: np.ndarray, clean: np.ndarray, share: float) -> np.ndarray:
    """``(n_anchors,) int64``: the ``share`` of the clean pairs (``clean`` ``(n,) bool``) with
    the lowest ``losses`` ``(n,)``, at least one when any pair is clean. The authors' code takes,
    in every batch of the clean split, the ``B // 10 + 1`` pairs with the largest adaptive
    prediction; this is the same rule over the whole clean split."""
    clean_index = np.flatnonzero(clean)
    if len(clean_index) == 0:
        return clean_index.astype(np.int64)
    count = max(1, int(round(share * len(clean_index))))
    order = np.argsort(np.asarray(losses)[clean_index], kind="stable")
    return np.sort(clean_index[order[:count]]).astype(np.int64)
