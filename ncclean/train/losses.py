"""Per-sample losses over a batch's similarity matrix, and NCR's adaptive prediction.

Every function takes ``sims``, the ``(B, B)`` cosine matrix of a batch (``sims[i, j]`` = image
of pair ``i`` against caption of pair ``j``, positives on the diagonal), and ``negatives``, a
``(B, B)`` bool mask of the entries that may serve as negatives (:func:`negative_mask`). Each
returns one value per pair, ``(B,)``, so methods can weight, select or sum them.
"""

from __future__ import annotations

import torch

from ncclean.models.features import negative_mask

__all__ = ["negative_mask"]  # a batch's valid negatives live with the batch (models.features)


def _mean_weights(mask: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """``mask`` divided by its count along ``dim`` (at least 1), in ``dtype``: a mean over the
    valid entries is then one product and one sum, and the division stays out of the autograd
    graph."""
    return mask.to(dtype) / mask.sum(dim, keepdim=True).clamp(min=1)


def _per_anchor(margin: torch.Tensor | float) -> tuple[torch.Tensor | float,
                                                      torch.Tensor | float]:
    """A margin per pair, shaped to broadcast over rows (image anchors) and columns (texts)."""
    if isinstance(margin, torch.Tensor) and margin.dim() == 1:
        return margin[:, None], margin[None, :]
    return margin, margin


def mean_hinge(sims: torch.Tensor, negatives: torch.Tensor,
               margin: torch.Tensor | float = 0.2) -> torch.Tensor:
    """NCR's warm-up and division loss L_w (Eq. 1-2, code form): for each pair the mean over its
    valid negatives of ``[margin - S_ii + S_ij]_+`` (image to text) plus the same over images
    (text to image). ``margin`` is a number or one per pair, ``(B,)``.

    Departure: NCR's code divides the sum by the batch size ``b``; dividing by the number of valid
    negatives is the same when nothing is masked (up to ``b / (b - 1)``) and does not make pairs
    with many masked duplicates look cleaner than they are.
    """
    positive = sims.diagonal()
    row_margin, column_margin = _per_anchor(margin)
    image_to_text = torch.relu(row_margin - positive[:, None] + sims)
    text_to_image = torch.relu(column_margin - positive[None, :] + sims)
    return (image_to_text * _mean_weights(negatives, 1, sims.dtype)).sum(1) + \
        (text_to_image * _mean_weights(negatives, 0, sims.dtype)).sum(0)


def hardest_negative_hinge(sims: torch.Tensor, negatives: torch.Tensor,
                           margins: torch.Tensor | float) -> torch.Tensor:
    """VSE++'s hinge against the hardest valid negative in each direction, with a per-pair
    margin (NCR's L_soft, Eq. 6). A pair without any valid negative in the batch has loss 0."""
    positive = sims.diagonal()
    masked = sims.masked_fill(~negatives, float("-inf"))
    hardest_text = masked.max(dim=1).values
    hardest_image = masked.max(dim=0).values
    return (margins - positive + hardest_text).clamp(min=0) + \
        (margins - positive + hardest_image).clamp(min=0)


def contrastive_ce(sims: torch.Tensor, negatives: torch.Tensor,
                   temperature: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """The two cross-entropies of InfoNCE, ``(B,)`` each: image-to-text (row softmax) and
    text-to-image (column softmax) of the positive against the valid negatives, logits
    ``sims / temperature``."""
    keep = negatives | torch.eye(len(sims), dtype=torch.bool, device=sims.device)
    logits = (sims / temperature).masked_fill(~keep, float("-inf"))
    image_to_text = -torch.log_softmax(logits, dim=1).diagonal()
    text_to_image = -torch.log_softmax(logits, dim=0).diagonal()
    return image_to_text, text_to_image


def info_nce(sims: torch.Tensor, negatives: torch.Tensor,
             temperature: float = 0.05) -> torch.Tensor:
    """Symmetric InfoNCE: the mean of :func:`contrastive_ce`'s two directions."""
    image_to_text, text_to_image = contrastive_ce(sims, negatives, temperature)
    return (image_to_text + text_to_image) / 2


def soft_margin(label: torch.Tensor, margin: float = 0.2, base: float = 10.0) -> torch.Tensor:
    """NCR's Eq. 7: ``margin * (base**y - 1) / (base - 1)``; 0 for y = 0, ``margin`` for y = 1."""
    return margin * (base ** label - 1) / (base - 1)


def adaptive_prediction(sims: torch.Tensor, negatives: torch.Tensor,
                        margin: float = 0.2) -> torch.Tensor:
    """NCR's P(I, T) (Eq. 5, code form), ``(B,)`` in [0, 1].

    ``p = margin - mean_hinge / 2`` clamped to ``[0, margin]`` is each pair's similarity margin
    over its negatives; ``tau``, the mean of the largest ``floor(B/10) + 1`` values, is the margin
    of the surely clean pairs, so ``P = clamp(p / tau, 0, 1)``. A batch whose largest margin is 0
    predicts 0 for everyone (the reference code divides by zero there).
    """
    p = (margin - mean_hinge(sims, negatives, margin) / 2).clamp(0.0, margin)
    return relative_to_top(p)


def relative_to_top(p: torch.Tensor, share: float = 0.1) -> torch.Tensor:
    """``clamp(p / tau, 0, 1)`` with ``tau`` the mean of the top ``floor(share * n) + 1`` values."""
    top = torch.topk(p, k=min(len(p), int(share * len(p)) + 1)).values
    tau = top.mean()
    if tau <= 0:
        return torch.zeros_like(p)
    return (p / tau).clamp(0.0, 1.0)
