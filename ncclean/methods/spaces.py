"""The spaces ``clip`` scores pairs in, each a function of the pairs it is fitted on
(:data:`~ncclean.methods.null_rate.Space`), so that shuffled pairs and cross-fitted folds are
scored out of the fit: the embeddings' own, a ridge CCA fitted on the corpus, and either less
its captions' convention discount."""

from __future__ import annotations

import numpy as np

from ncclean.methods.align import alignment_from_sums, pair_sums, unalignable
from ncclean.methods.null_rate import Cosine, Space
from ncclean.models.features import Features
from ncclean.train.scoring import Embeddings


def discounted(space: Space, caption_discount: np.ndarray) -> Space:
    """``space`` with each cosine less its caption entry's discount."""
    def fitted(fit: np.ndarray | None) -> Cosine | None:
        cosine = space(fit)
        if cosine is None:
            return None
        return lambda images, texts: cosine(images, texts) - caption_discount[texts]
    return fitted


def fixed_space(embeddings: Embeddings) -> Space:
    """The embeddings' own space, fitted on nothing in the corpus: its shuffled pairs are a
    null as they are (:mod:`ncclean.methods.null_rate`)."""
    return lambda fit: embeddings.similarity


def cca_space(raw: Embeddings, features: Features, dims: int, ridge: float) -> Space:
    """A CCA space fitted on the pairs ``fit`` only, so that the other pairs and their shuffles
    are scored out of sample (:meth:`~ncclean.methods.align.Alignment.pair_cosine`); ``None``
    where those pairs cannot be aligned (:func:`~ncclean.methods.align.unalignable`)."""
    fitted: dict[tuple | None, Cosine | None] = {}  # the null is read twice on the same folds

    def space(fit: np.ndarray | None) -> Cosine | None:
        rows = None if fit is None else np.asarray(fit)
        key = None if rows is None else (rows.dtype.str, rows.shape, rows.tobytes())
        if key not in fitted:
            fitted[key] = fit_space(fit)
        return fitted[key]

    def fit_space(fit: np.ndarray | None) -> Cosine | None:
        moments = pair_sums(raw.images, raw.texts, features.image_group[fit],
                            features.text_group[fit])
        if unalignable(moments) is not None:
            return None
        alignment = alignment_from_sums(moments, dims, ridge)

        return lambda image_entries, text_entries: alignment.pair_cosine(
            raw.images, raw.texts, image_entries, text_entries)
    return space
