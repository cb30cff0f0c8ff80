"""Features: what a matcher consumes, for the usable pairs of a corpus.

Pairs point into two tables by index: ``image_data`` (one entry per image group: decoded pixels or
a precomputed vector) and ``text_data`` (one entry per distinct caption text: token ids or a
vector). Repeated images and captions are stored and encoded once. Invalid rows are left out;
``rows`` maps each pair back to its input row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ncclean.data.corpus import Corpus
from ncclean.data.images import DEFAULT_MAX_PIXELS
from ncclean.data.text import Vocabulary, tokenize
from ncclean.models.matcher import MatcherConfig
from ncclean.progress import Progress, no_progress


@dataclass
class Batch:
    """Tensors for one step: the pairs' images and captions, and their groups (for masking)."""

    pairs: np.ndarray
    images: tuple[torch.Tensor, ...]
    texts: tuple[torch.Tensor, ...]
    image_group: torch.Tensor
    text_group: torch.Tensor


@dataclass
class Features:
    """The usable pairs of a corpus as indices into shared image and text tables.

    - ``rows``, ``image_group``, ``text_group``: ``(n_pairs,) int64``;
    - ``image_data``: ``(n_images, S, S, 3) uint8`` pixels or ``(n_images, d)`` float vectors
      (float16 when the input column is);
    - ``text_data``: ``(n_texts, L) int64`` token ids (with ``text_lengths``, ``(n_texts,)``) or
      ``(n_texts, d)`` float vectors.
    """

    rows: np.ndarray
    image_group: np.ndarray
    text_group: np.ndarray
    image_data: np.ndarray
    text_data: np.ndarray
    text_lengths: np.ndarray | None = None

    @property
    def n_pairs(self) -> int:
        return len(self.rows)

    def subset(self, pairs: np.ndarray) -> Features:
        """The features of ``pairs`` (indices or a boolean mask); the tables are shared."""
        return replace(self, rows=self.rows[pairs], image_group=self.image_group[pairs],
                       text_group=self.text_group[pairs])

    def image_inputs(self, index: np.ndarray, device: str | torch.device = "cpu") \
            -> tuple[torch.Tensor, ...]:
        """Tower inputs for entries ``index`` of ``image_data``."""
        return (torch.as_tensor(self.image_data[index]).to(device),)

    def text_inputs(self, index: np.ndarray, device: str | torch.device = "cpu") \
            -> tuple[torch.Tensor, ...]:
        """Tower inputs for entries ``index`` of ``text_data``."""
        data = torch.as_tensor(self.text_data[index]).to(device)
        if self.text_lengths is None:
            return (data,)
        lengths = self.text_lengths[index]
        width = max(1, int(lengths.max())) if len(lengths) else 1
        return data[:, :width], torch.as_tensor(lengths)

    def batch(self, pairs: np.ndarray, device: str | torch.device = "cpu") -> Batch:
        """The tensors of ``pairs`` (indices into this object's pairs)."""
        return Batch(
            pairs=pairs,
            images=self.image_inputs(self.image_group[pairs], device),
            texts=self.text_inputs(self.text_group[pairs], device),
            image_group=torch.as_tensor(self.image_group[pairs], device=device),
            text_group=torch.as_tensor(self.text_group[pairs], device=device),
        )


def build_vocabulary(captions: list[str], min_freq: int = 2) -> Vocabulary:
    """The tokeniser's vocabulary of ``captions``: words seen at least ``min_freq`` times, so that
    ``<unk>`` is learned from the rare ones."""
    return Vocabulary.build((tokenize(c) for c in captions), min_freq=min_freq)


def _first_rows(groups: np.ndarray) -> np.ndarray:
    return np.unique(groups, return_index=True)[1]


def _rows_of(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``table[rows]``, without a copy when ``rows`` is every row in order (every pair its own
    image or caption: the usual case for large embedding corpora)."""
    if len(rows) == len(table) and (len(rows) == 0 or rows[-1] == len(rows) - 1):
        return table  # first-appearance rows are increasing, so this is arange(len(table))
    return table[rows]


def encode_tokens(texts: list[str], vocab: Vocabulary, max_tokens: int) \
        -> tuple[np.ndarray, np.ndarray]:
    """``(n, max_tokens) int64`` padded ids and ``(n,) int64`` lengths (truncated)."""
    ids = np.zeros((len(texts), max_tokens), dtype=np.int64)
    lengths = np.zeros(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        encoded = vocab.encode(tokenize(text))[:max_tokens]
        ids[i, : len(encoded)] = encoded
        lengths[i] = len(encoded)
    return ids, lengths


def complete_config(config: MatcherConfig, corpus: Corpus) -> MatcherConfig:
    """Fill what the corpus decides: the vocabulary of its valid captions (unless loaded) and
    the widths of precomputed vectors. Changes and returns ``config``."""
    from ncclean.models.e5 import E5_DIM

    valid = corpus.valid
    if config.text_tower == "tokens" and config.vocab is None:
        config.vocab = build_vocabulary([c for c, ok in zip(corpus.captions, valid) if ok]).tokens
    if config.image_tower == "column" and config.image_in_dim is None:
        config.image_in_dim = corpus.image_emb.shape[1]
    if config.text_tower == "column" and config.text_in_dim is None:
        config.text_in_dim = corpus.text_emb.shape[1]
    if config.text_tower == "e5":
        config.text_in_dim = E5_DIM
    if config.uses_clip:
        from ncclean.models.openclip import clip_dim

        spec = clip_spec(config)
        config.clip_checkpoint = spec.checkpoint  # absolute, for the sidecar and retraining
        config.clip_model = spec.model
        width = clip_dim(spec)
        if config.finetune == "full":
            from ncclean.models.openclip import clip_input_size

            config.image_size, config.embed_dim = clip_input_size(spec), width
        if config.image_tower == "clip":
            config.image_in_dim = width
        if config.text_tower == "clip":
            config.text_in_dim = width
    return config


def clip_spec(config: MatcherConfig):
    """The checked :class:`ncclean.models.openclip.ClipSpec` of ``config``'s ``clip`` towers."""
    from ncclean.models.openclip import ClipSpec

    return ClipSpec(config.clip_model or "ViT-B-32", config.clip_pretrained,
                    config.clip_checkpoint).check()


def build_features(corpus: Corpus, config: MatcherConfig, *, cache_dir: Path | None = None,
                   device: str = "cpu", max_pixels: int = DEFAULT_MAX_PIXELS,
                   progress: Progress = no_progress) -> Features:
    """Features of the valid pairs of ``corpus`` for a matcher with ``config``.

    ``pixels`` needs ``corpus.images`` decoded at ``config.image_size``; ``column`` towers need the
    corpus's embedding columns; ``tokens`` needs ``config.vocab``; ``e5`` computes (and caches)
    multilingual-e5-small vectors of every distinct caption; ``clip`` computes (and caches) the
    frozen CLIP vectors of every image group (marking the rows of unusable images) or caption.
    """
    if config.finetune == "full":  # the whole CLIP trains: pixels and tokens in
        from ncclean.data.corpus import load_images
        from ncclean.models.openclip import clip_tokens

        image_data = load_images(corpus, config.image_size, max_pixels=max_pixels,
                                 cache_dir=cache_dir, progress=progress)
    elif config.image_tower == "clip":
        from ncclean.models.openclip import clip_image_vectors

        image_data = clip_image_vectors(corpus, clip_spec(config), max_pixels=max_pixels,
                                        device=device, cache_dir=cache_dir, progress=progress)
    elif config.image_tower == "pixels":
        if corpus.images is None:
            raise ValueError("the pixels tower needs the corpus's images decoded")
        image_data = corpus.images
    else:
        image_data = _rows_of(corpus.image_emb, _first_rows(corpus.image_group))
    valid = np.flatnonzero(corpus.valid)

    text_group = corpus.text_group
    first_text_rows = _first_rows(text_group)
    texts = [corpus.captions[row] for row in first_text_rows]
    lengths = None
    if config.text_tower == "tokens":
        text_data, lengths = encode_tokens(texts, Vocabulary(config.vocab or []), config.max_tokens)
    elif config.text_tower == "e5":
        from ncclean.models.e5 import e5_vectors

        text_data = e5_vectors(texts, cache_dir=cache_dir, progress=progress)
    elif config.finetune == "full":
        text_data = clip_tokens(texts, clip_spec(config))
    elif config.text_tower == "clip":
        from ncclean.models.openclip import clip_text_vectors

        text_data = clip_text_vectors(texts, clip_spec(config), device=device,
                                      cache_dir=cache_dir, progress=progress)
    else:
        text_data = _rows_of(corpus.text_emb, first_text_rows)
    return Features(rows=valid, image_group=corpus.image_group[valid],
                    text_group=text_group[valid], image_data=image_data, text_data=text_data,
                    text_lengths=lengths)
