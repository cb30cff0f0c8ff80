"""``gmm``'s application (and its descendants'): a new pair's loss against a fixed pool.

NCR divides pairs by a two-component mixture on their per-pair loss. A pair the matchers did
not train on gets the same kind of loss from the final matcher: its mean hinge loss (margin as
the method's) against a fixed pool of 1,024 sample pairs, a pool pair showing the pair's own
image or caption vector left out; ``<method>_sim`` is the pair's cosine and ``<method>_loss``
that loss, while ``<method>_label`` (the rectified label, a training quantity) stays null.
``clean_prob`` is the posterior of the mixture refitted to held-out pairs' pool losses: a
matcher fits the pairs it trained on, so a mixture of their losses reads nearly every new pair
as noisy (measured in ``benchmarks/results/scale.md``), and the sample is then put on the
held-out scale (``Calibrated.rescale``).
"""

from __future__ import annotations

import numpy as np
import torch

from ncclean.methods.applied import Application, Calibrated, Kept
from ncclean.train.scoring import Embeddings

NEGATIVE_POOL = 1024
_BLOCK = 512  # rows per block against the pool


class PoolLoss(Application):
    arrays = ("negatives.images", "negatives.texts", "negatives.image_key",
              "negatives.text_key")

    def sample_embeddings(self, result, features, device: str) -> Embeddings:
        return result.embeddings if result.embeddings is not None else \
            super().sample_embeddings(result, features, device)

    def keep(self, method, result, features, embeddings, clean_prob, caption_key, seed) -> Kept:
        from ncclean.data.shards import vector_keys
        from ncclean.methods.mixture import fit_clean_posterior
        from ncclean.train.scoring import pair_losses

        n = features.n_pairs
        pool = np.sort(np.random.default_rng([seed, 7919]).choice(
            n, size=min(NEGATIVE_POOL, n), replace=False))
        images, texts = features.image_group[pool], features.text_group[pool]
        arrays = {"negatives.images": embeddings.images[images].astype(np.float32),
                  "negatives.texts": embeddings.texts[texts].astype(np.float32),
                  "negatives.image_key": vector_keys(features.image_data[images]),
                  "negatives.text_key": vector_keys(features.text_data[texts])}
        losses = pair_losses(embeddings, features, margin=method.margin, negatives="pool",
                             pool_size=NEGATIVE_POOL, seed=seed)
        posterior, mixture = fit_clean_posterior(losses, "low", seed=seed)
        meta = {"signal": "pool_loss", "margin": float(method.margin),
                "mixture": mixture.as_dict(),
                "calibration": {"pairs": int(n), "on": "the fit sample (no held-out pairs)"}}
        return Kept(losses, posterior, arrays, meta)  # the fitted mixture's posterior

    def signal(self, arrays, meta, features, embeddings, columns, new, caption_key) -> np.ndarray:
        losses = pool_losses(arrays, meta["margin"], features, embeddings)
        name = meta["method"]
        for column, values in ((f"{name}_sim", embeddings.pair_similarity(features)),
                               (f"{name}_loss", losses)):
            if column in columns:
                columns[column][new] = values
        if f"{name}_label" in columns:
            columns[f"{name}_label"][new] = np.nan
        return losses.astype(np.float64)

    def calibrate(self, arrays, meta, features, embeddings, columns=None) -> Calibrated:
        from ncclean.methods.mixture import fit_clean_posterior

        losses = pool_losses(arrays, meta["margin"], features, embeddings)
        posterior, mixture = fit_clean_posterior(losses, "low", seed=meta["seed"])
        return Calibrated(losses, posterior, rescale=True, meta={
            "mixture": mixture.as_dict(),
            "calibration": {"pairs": int(features.n_pairs),
                            "on": "held-out pairs (the next smallest id hashes)"}})


def pool_losses(arrays: dict, margin: float, features, embeddings: Embeddings) -> np.ndarray:
    """``(n,) float32``: each pair's mean hinge loss against the fit's fixed negative pool, a
    pool pair showing the pair's own image or caption vector left out."""
    from ncclean.data.shards import vector_keys

    pool_images = torch.from_numpy(arrays["negatives.images"])
    pool_texts = torch.from_numpy(arrays["negatives.texts"])
    image_key = vector_keys(features.image_data)[features.image_group]
    text_key = vector_keys(features.text_data)[features.text_group]
    losses = np.empty(features.n_pairs, dtype=np.float32)
    for start in range(0, features.n_pairs, _BLOCK):
        rows = slice(start, start + _BLOCK)
        img = torch.from_numpy(embeddings.images[features.image_group[rows]]).float()
        txt = torch.from_numpy(embeddings.texts[features.text_group[rows]]).float()
        positive = (img * txt).sum(dim=1, keepdim=True)
        mask = torch.from_numpy((image_key[rows][:, None] != arrays["negatives.image_key"][None])
                                & (text_key[rows][:, None] != arrays["negatives.text_key"][None]))
        i2t = ((margin - positive + img @ pool_texts.T).clamp(min=0) * mask).sum(1)
        t2i = ((margin - positive + txt @ pool_images.T).clamp(min=0) * mask).sum(1)
        losses[rows] = ((i2t + t2i) / mask.sum(dim=1).clamp(min=1)).numpy()
    return losses
