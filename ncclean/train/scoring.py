"""Deterministic per-pair scores of a trained matcher over a whole corpus.

The reference code measures each pair's loss against the other pairs of a randomly shuffled batch,
so the same model gives different losses on every pass. Here the matcher embeds every image and
caption once (eval mode), and each pair's loss is measured against either

- a fixed **pool** of ``pool_size`` pairs drawn once from the seed (more negatives than a batch,
  the same for every pair and every epoch), or
- fixed **batches**: one seeded permutation cut into batches, as the reference code does but
  without reshuffling.

Both are computed from the embeddings with blocked matrix products, so they cost a fraction of a
training epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ncclean.models.features import Features
from ncclean.models.linear import linear
from ncclean.seeds import derive_rng
from ncclean.train.losses import mean_hinge, negative_mask

NEGATIVES = ("pool", "batches")
_EMBED_BATCH = 512
_BLOCK = 2048
HALF_FROM = 250_000  # image and caption entries from which kept embeddings are float16


def kept_dtype(features: Features) -> type:
    """The dtype of the embeddings a method keeps for the later stages: float16 from
    :data:`HALF_FROM` image and caption entries on (a million pairs through a two-network
    ensemble: 2 GB instead of 4), float32 below, so small corpora score exactly as before."""
    entries = len(features.image_data) + len(features.text_data)
    return np.float16 if entries >= HALF_FROM else np.float32


@dataclass
class Embeddings:
    """Unit vectors of every entry of a :class:`Features`' tables: ``images`` ``(n_images, d)``
    and ``texts`` ``(n_texts, d)``, on the CPU: float32, or float16 where they are precomputed
    half-precision vectors used as they are (consumers compute in float32 block by block)."""

    images: np.ndarray
    texts: np.ndarray

    def pair_similarity(self, features: Features) -> np.ndarray:
        """``(n_pairs,) float32``: the cosine of each pair."""
        return self.similarity(features.image_group, features.text_group)

    def similarity(self, image_entries: np.ndarray, text_entries: np.ndarray) -> np.ndarray:
        """``(n,) float32``: the cosine of ``images[image_entries[k]]`` and
        ``texts[text_entries[k]]`` for each ``k``, block by block."""
        out = np.empty(len(image_entries), dtype=np.float32)
        for start in range(0, len(out), _BLOCK):
            stop = start + _BLOCK
            out[start:stop] = np.einsum(
                "nd,nd->n", self.images[image_entries[start:stop]].astype(np.float32),
                self.texts[text_entries[start:stop]].astype(np.float32))
        return out


@torch.no_grad()
def embed(matcher: nn.Module, features: Features, device: str = "cpu",
          batch_size: int = _EMBED_BATCH, dtype: type = np.float32) -> Embeddings:
    """Embed the images and texts the features use (others stay zero), in eval mode, stored as
    ``dtype`` (see :func:`kept_dtype`)."""
    was_training = matcher.training
    matcher.eval()
    try:
        out = []
        for groups, table_size, encode, inputs in (
            (features.image_group, len(features.image_data), matcher.encode_images,
             features.image_inputs),
            (features.text_group, len(features.text_data), matcher.encode_texts,
             features.text_inputs),
        ):
            used = np.unique(groups)
            vectors = np.zeros((table_size, matcher.embed_dim), dtype=dtype)
            for start in range(0, len(used), batch_size):
                index = used[start:start + batch_size]
                vectors[index] = encode(*inputs(index, device)).float().cpu().numpy()
            out.append(vectors)
    finally:
        matcher.train(was_training)
    return Embeddings(images=out[0], texts=out[1])


def fixed_batches(embeddings: Embeddings, features: Features, batch_size: int,
                  rng: np.random.Generator) -> Iterator[tuple[np.ndarray, torch.Tensor,
                                                               torch.Tensor]]:
    """Every pair once, in batches of a seeded permutation: ``(pairs, sims, mask)`` with the
    batch's pair indices, its ``(B, B)`` cosine matrix and its valid-negative mask."""
    images = torch.from_numpy(embeddings.images)
    texts = torch.from_numpy(embeddings.texts)
    image_group = torch.from_numpy(features.image_group)
    text_group = torch.from_numpy(features.text_group)
    order = rng.permutation(features.n_pairs)
    for start in range(0, len(order), batch_size):
        pairs = order[start:start + batch_size]
        rows = torch.from_numpy(pairs)
        sims = images[image_group[rows]].float() @ texts[text_group[rows]].float().T
        yield pairs, sims, negative_mask(image_group[rows], text_group[rows])


def pair_losses(embeddings: Embeddings, features: Features, *, margin: float = 0.2,
                negatives: str = "pool", pool_size: int = 1024, batch_size: int = 128,
                seed: int = 0) -> np.ndarray:
    """``(n_pairs,) float32``: each pair's mean hinge loss (:func:`mean_hinge`) against fixed
    negatives (``"pool"`` or ``"batches"``, see the module docstring). Deterministic."""
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives must be one of {NEGATIVES}, got {negatives!r}")
    rng = derive_rng(seed, "negative-pool")
    out = np.empty(features.n_pairs, dtype=np.float32)
    if negatives == "batches":
        for pairs, sims, mask in fixed_batches(embeddings, features, batch_size, rng):
            out[pairs] = mean_hinge(sims, mask, margin).numpy()
        return out

    for rows, img, txt, positive, mask, pool_images, pool_texts in pool_blocks(
            embeddings, features, pool_size, rng):
        count = mask.sum(dim=1).clamp(min=1)
        offset, invalid = margin - positive, ~mask
        # In place on each product: the same numbers as (margin - S_ii + S_ij)_+ * mask with
        # three fewer (block, pool) temporaries per direction.
        image_to_text = linear(img, pool_texts).add_(offset).clamp_(min=0) \
            .masked_fill_(invalid, 0.0).sum(1)
        text_to_image = linear(txt, pool_images).add_(offset).clamp_(min=0) \
            .masked_fill_(invalid, 0.0).sum(1)
        out[rows.numpy()] = ((image_to_text + text_to_image) / count).numpy()
    return out


def pool_blocks(embeddings: Embeddings, features: Features, pool_size: int,
                rng: np.random.Generator) -> Iterator[tuple[torch.Tensor, ...]]:
    """Every pair against one fixed pool of ``pool_size`` pairs drawn from ``rng``, in blocks:
    ``(rows, images, texts, positive, mask, pool_images, pool_texts)`` with the block's pair
    indices, their image and text vectors ``(b, d)``, their cosines ``(b, 1)``, the valid-negative
    mask against the pool ``(b, pool)`` (the pair's own image or caption text masked) and the
    pool's vectors."""
    n = features.n_pairs
    images = torch.from_numpy(embeddings.images)
    texts = torch.from_numpy(embeddings.texts)
    image_group = torch.from_numpy(features.image_group)
    text_group = torch.from_numpy(features.text_group)
    pool = torch.from_numpy(np.sort(rng.choice(n, size=min(pool_size, n), replace=False)))
    pool_images, pool_texts = images[image_group[pool]].float(), texts[text_group[pool]].float()
    pool_image_group, pool_text_group = image_group[pool], text_group[pool]
    for start in range(0, n, _BLOCK):
        rows = torch.arange(start, min(n, start + _BLOCK))
        img, txt = images[image_group[rows]].float(), texts[text_group[rows]].float()
        positive = (img * txt).sum(dim=1, keepdim=True)
        mask = (image_group[rows][:, None] != pool_image_group[None, :]) & \
            (text_group[rows][:, None] != pool_text_group[None, :])
        yield rows, img, txt, positive, mask, pool_images, pool_texts


def pool_matching_probability(embeddings: Embeddings, features: Features, temperature: float,
                              pool_size: int = 1024, seed: int = 0) -> np.ndarray:
    """``(n_pairs,) float32``: each pair's matching probability against a fixed pool
    (:func:`pool_blocks`), the mean of the image-to-text and text-to-image softmax probability of
    the positive over the positive and the valid pool negatives at ``temperature``.
    Deterministic."""
    rng = derive_rng(seed, "negative-pool")
    out = np.empty(features.n_pairs, dtype=np.float32)
    for rows, img, txt, positive, mask, pool_images, pool_texts in pool_blocks(
            embeddings, features, pool_size, rng):
        total = torch.zeros(len(rows))
        for sims in (linear(img, pool_texts), linear(txt, pool_images)):
            logits = torch.cat([positive, sims.masked_fill(~mask, float("-inf"))], dim=1)
            total += torch.exp(positive[:, 0] / temperature
                               - torch.logsumexp(logits / temperature, dim=1))
        out[rows.numpy()] = (total / 2).numpy()
    return out
