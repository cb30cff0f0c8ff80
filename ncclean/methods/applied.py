"""How a fitted method scores a pair it did not train on: its :class:`Application`.

A fit on a sample (:mod:`ncclean.pipeline.fit`) keeps, for every pair not in the sample, a
per-pair *signal* and a monotone table from that signal to ``clean_prob``. What the signal is,
which space a new pair is embedded in, what the fit must hold to compute it and how the table is
calibrated belong to the method: each :class:`~ncclean.methods.base.Method` names its
application (``Method.application``). The pipeline only calls these hooks.

The default, :class:`MatcherSimilarity`, serves every method that trains a matcher and says
nothing more: the signal is the cosine of the final matcher's embeddings, and ``clean_prob`` is
read by quantile: held-out pairs (never trained on, drawn from the corpus as the sample is)
whose similarity is at the ``q``-th quantile of theirs get the ``q``-th quantile of the sample's
``clean_prob``. A matcher fits the pairs it trained on, noisy ones included, so a table of the
sample's own similarities would read most new pairs as noisy (``gmm``'s case:
``benchmarks/results/scale.md``); the quantile map asks only that the two draws share one noise
rate. Without held-out pairs (a fit of the whole corpus) the table is the isotonic regression of
the sample's ``clean_prob`` on its similarity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ncclean.methods.isotonic import isotonic_fit

if TYPE_CHECKING:
    from ncclean.train.scoring import Embeddings

MIN_HELD_OUT = 50  # fewer held-out pairs than this: the sample's own table is kept


@dataclass
class Kept:
    """What an application keeps from the sample's one pass: ``signal`` and ``prob`` (``(n,)``
    each, the sample pairs' signal and the probability it maps to), ``arrays`` and ``meta`` for
    the fit (``meta["signal"]`` names the signal), and whether the fit keeps the ``matcher``."""

    signal: np.ndarray
    prob: np.ndarray
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    keeps_matcher: bool = True


@dataclass
class Calibrated:
    """A table refitted on held-out pairs: their ``signal`` and ``prob`` (``(n,)`` each), what
    the fit's record gains (``meta``), and whether the sample is put on the same scale
    (``rescale``: the held-out pairs' probabilities are the new scale)."""

    signal: np.ndarray
    prob: np.ndarray
    meta: dict = field(default_factory=dict)
    rescale: bool = False


class Application:
    """How a method's fit scores a new pair (see the module docstring). ``arrays``: what a saved
    fit of the method holds beyond every fit's arrays; ``needs_matcher``: whether it needs the
    trained matcher; ``held_out``: whether a fit sampled from a larger corpus calibrates on
    held-out pairs."""

    arrays: ClassVar[tuple[str, ...]] = ()
    needs_matcher: ClassVar[bool] = True
    held_out: ClassVar[bool] = True

    def sample_embeddings(self, result, features, device: str) -> Embeddings:
        """The sample pairs' embeddings in the space new pairs are embedded in."""
        from ncclean.train.scoring import embed

        if result.matcher is None:
            if result.embeddings is None:
                raise no_matcher()
            return result.embeddings  # a fit of every pair: no new pair to embed
        return embed(result.matcher, features, device, dtype=np.float32)

    def keep(self, method, result, features, embeddings: Embeddings, clean_prob: np.ndarray,
             caption_key: np.ndarray, seed: int) -> Kept:
        """What the fit keeps (``result``: the method's :class:`~ncclean.methods.base.
        MethodResult` on the sample; ``caption_key`` ``(n,) uint64``: each pair's caption)."""
        similarity = embeddings.pair_similarity(features).astype(np.float64)
        return Kept(similarity, isotonic(similarity, clean_prob),
                    meta={"signal": "matcher_sim"})

    def prepared(self, arrays: dict, features):
        """New pairs' ``features`` as the method read its own before fitting (what
        :meth:`embeddings` and :meth:`signal` are given): as they are, unless the method
        transformed its inputs."""
        return features

    def embeddings(self, arrays: dict, matcher, features, device: str) -> Embeddings:
        """New pairs' embeddings (unit vectors, float32)."""
        from ncclean.train.scoring import embed

        if matcher is None:
            raise no_matcher()
        return embed(matcher, features, device, dtype=np.float32)

    def signal(self, arrays: dict, meta: dict, features, embeddings: Embeddings,
               columns: dict[str, np.ndarray], new: np.ndarray,
               caption_key: np.ndarray) -> np.ndarray:
        """``(n,) float64``: the signal of ``features``' pairs; fills the method's columns it
        can compute at ``new`` (the others stay null)."""
        similarity = embeddings.pair_similarity(features)
        name = f"{meta['method']}_sim"
        if name in columns:
            columns[name][new] = similarity
        return similarity.astype(np.float64)

    def calibrate(self, arrays: dict, meta: dict, features, embeddings: Embeddings,
                  columns: dict[str, np.ndarray] | None = None) -> Calibrated:
        """The table refitted on held-out pairs (``features``, embedded in ``embeddings``)."""
        n = features.n_pairs
        signal = self.signal(arrays, meta, features, embeddings, columns or {},
                             np.arange(n), np.zeros(n, dtype=np.uint64))
        return Calibrated(signal, quantile_map(signal, arrays["sample.clean_prob"]),
                          meta={"signal_scale": "held-out quantiles of the signal mapped onto "
                                                "the sample's clean_prob"})


class MatcherSimilarity(Application):
    """The default application: the final matcher's cosine, read by quantile."""


def no_matcher():
    """The one-line refusal for a method that returns no matcher, asked to score new pairs."""
    from ncclean.errors import BadOptionError

    return BadOptionError("this method returns no matcher, so a fit of it cannot score a pair "
                          "it did not train on; score every pair in one pass (--fit-sample all)")


def signal_table(signal: np.ndarray, clean_prob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` float64, ``x`` strictly increasing: each distinct ``signal`` value and the mean
    ``clean_prob`` of its pairs, so ``np.interp(s, x, y)`` gives a pair's clean probability."""
    x, inverse = np.unique(np.asarray(signal, dtype=np.float64), return_inverse=True)
    y = np.bincount(inverse, weights=np.asarray(clean_prob, dtype=np.float64)) / \
        np.bincount(inverse)
    return x, y


def isotonic(signal: np.ndarray, prob: np.ndarray) -> np.ndarray:
    """``(n,) float64``: the non-decreasing fit of ``prob`` on ``signal`` (a higher signal is
    never less clean)."""
    _, fitted, inverse = isotonic_fit(signal, prob)
    return fitted[inverse]


def quantile_map(signal: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``(n,) float64``: each ``signal`` value's mid-rank quantile among ``signal``, read off
    ``reference``'s distribution (tied values stay tied; the map is non-decreasing)."""
    _, inverse, ties = np.unique(np.asarray(signal, np.float64), return_inverse=True,
                                 return_counts=True)
    quantile = (np.cumsum(ties) - ties / 2) / len(signal)
    return np.quantile(np.asarray(reference, np.float64), quantile)[inverse]
