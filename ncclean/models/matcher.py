"""The matcher: an image tower and a text tower into one L2-normalised space.

The similarity of an image and a caption is the cosine of their embeddings, so a whole corpus is
scored with matrix products. :class:`Ensemble` averages the similarities of several matchers (NCR's
two co-teaching networks) and is itself a matcher: its embedding is the members' embeddings
concatenated and scaled by ``1/sqrt(k)``, whose dot products are exactly the mean of the members'
cosines.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ncclean.models.towers import PixelCNN, TokenGRU, VectorMLP

IMAGE_TOWERS = ("pixels", "column", "clip")
TEXT_TOWERS = ("tokens", "e5", "column", "clip")


@dataclass
class MatcherConfig:
    """Everything needed to rebuild a matcher (saved in checkpoints).

    ``image_in_dim`` / ``text_in_dim`` are the widths of precomputed vectors (``column``, ``e5``
    and ``clip`` towers); ``vocab`` the tokeniser's vocabulary (``tokens`` tower); ``clip_*`` the
    CLIP model of the ``clip`` towers (:class:`ncclean.models.openclip.ClipSpec`), whose frozen
    features small heads read (``finetune="heads"``) or which is fine-tuned whole
    (``finetune="full"``: both towers ``clip``, pixels and tokens in).
    """

    image_tower: str = "pixels"
    text_tower: str = "tokens"
    embed_dim: int = 256
    image_size: int = 64
    cnn_width: int = 32
    augment: bool = True
    word_dim: int = 300
    max_tokens: int = 16
    image_in_dim: int | None = None
    text_in_dim: int | None = None
    vocab: list[str] | None = field(default=None, repr=False)
    clip_model: str | None = None
    clip_pretrained: str | None = None
    clip_checkpoint: str | None = None
    finetune: str = "heads"

    @property
    def uses_clip(self) -> bool:
        return "clip" in (self.image_tower, self.text_tower)

    @property
    def frozen_images(self) -> bool:
        """Whether the image tower is a head on fixed vectors (an embedding column, or CLIP's
        frozen features), not a network trained on pixels."""
        return self.image_tower in ("column", "clip") and self.finetune == "heads"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> MatcherConfig:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in payload.items() if k in known})


def _image_tower(config: MatcherConfig) -> nn.Module:
    if config.image_tower == "pixels":
        return PixelCNN(config.embed_dim, config.cnn_width, config.augment)
    if config.image_tower in ("column", "clip"):
        return VectorMLP(int(config.image_in_dim or 0), config.embed_dim)
    raise ValueError(f"unknown image tower {config.image_tower!r}")


def _text_tower(config: MatcherConfig) -> nn.Module:
    if config.text_tower == "tokens":
        return TokenGRU(len(config.vocab or ()), config.embed_dim, config.word_dim)
    if config.text_tower in ("e5", "column", "clip"):
        return VectorMLP(int(config.text_in_dim or 0), config.embed_dim)
    raise ValueError(f"unknown text tower {config.text_tower!r}")


class Matcher(nn.Module):
    """Image tower + text tower -> unit vectors; ``similarity`` is their cosine matrix."""

    def __init__(self, config: MatcherConfig):
        super().__init__()
        self.config = config
        if config.finetune == "full":
            from ncclean.models.openclip import ClipSpec, full_clip_towers

            self.image_tower, self.text_tower = full_clip_towers(ClipSpec(
                config.clip_model or "ViT-B-32", config.clip_pretrained,
                config.clip_checkpoint))
            return
        self.image_tower = _image_tower(config)
        self.text_tower = _text_tower(config)

    @property
    def embed_dim(self) -> int:
        return self.config.embed_dim

    def encode_images(self, *inputs: torch.Tensor) -> torch.Tensor:
        """``(B, embed_dim)`` unit vectors."""
        return F.normalize(self.image_tower(*inputs), dim=-1)

    def encode_texts(self, *inputs: torch.Tensor) -> torch.Tensor:
        """``(B, embed_dim)`` unit vectors."""
        return F.normalize(self.text_tower(*inputs), dim=-1)

    def batch_similarity(self, batch: Any) -> torch.Tensor:
        """``(B, B)`` cosines of a :class:`~ncclean.models.features.Batch`: its images (rows)
        against its captions (columns)."""
        return self.encode_images(*batch.images) @ self.encode_texts(*batch.texts).T


class Ensemble(nn.Module):
    """Several matchers scored as one: similarity = mean of the members' cosines."""

    def __init__(self, members: list[Matcher]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one matcher")
        self.members = nn.ModuleList(members)
        self.config = members[0].config

    @property
    def embed_dim(self) -> int:
        return sum(m.embed_dim for m in self.members)

    def _join(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(parts, dim=-1) / len(parts) ** 0.5

    def encode_images(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self._join([m.encode_images(*inputs) for m in self.members])

    def encode_texts(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self._join([m.encode_texts(*inputs) for m in self.members])

    def batch_similarity(self, batch: Any) -> torch.Tensor:
        """``(B, B)``: the members' mean cosine of a batch's images and captions."""
        return self.encode_images(*batch.images) @ self.encode_texts(*batch.texts).T


def build_matcher(config: MatcherConfig, seed: int) -> Matcher:
    """A freshly initialised matcher; the same seed gives the same weights."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return Matcher(config)
    finally:
        torch.random.set_rng_state(generator_state)
