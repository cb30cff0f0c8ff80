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

from ncclean.models.registry import (
    IMAGE_TOWERS,
    TEXT_TOWERS,
    ImageTower,
    TextTower,
    image_tower,
    needs,
    text_tower,
)

__all__ = ["IMAGE_TOWERS", "TEXT_TOWERS", "Ensemble", "Matcher", "MatcherConfig",
           "build_matcher"]


@dataclass
class MatcherConfig:
    """Everything needed to rebuild a matcher (saved in checkpoints).

    The towers are named (:mod:`ncclean.models.registry`; ``image_spec`` and ``text_spec`` are
    the tower objects). ``image_in_dim`` / ``text_in_dim`` are the widths of the frozen towers'
    vectors; ``vocab`` the tokeniser's vocabulary (``tokens`` tower); ``clip_*`` the
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
    def image_spec(self) -> ImageTower:
        """The image tower's registry entry, bound to this configuration."""
        return image_tower(self)

    @property
    def text_spec(self) -> TextTower:
        """The text tower's registry entry, bound to this configuration."""
        return text_tower(self)

    @property
    def uses_clip(self) -> bool:
        """Whether a tower needs CLIP weights."""
        return needs(self, "clip-weights")

    @property
    def frozen_images(self) -> bool:
        """Whether the image tower is a head on fixed vectors (an embedding column, ImageNet or
        CLIP's frozen features), not a network trained on pixels."""
        return self.image_spec.frozen

    @property
    def starts_pretrained(self) -> bool:
        """Whether the matcher is a whole pretrained network fine-tuned here (a whole CLIP,
        ``finetune="full"``): it starts trained, so a method warms nothing up."""
        return self.finetune == "full"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> MatcherConfig:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in payload.items() if k in known})


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
        self.image_tower = config.image_spec.module()
        self.text_tower = config.text_spec.module()

    @property
    def embed_dim(self) -> int:
        return self.config.embed_dim

    @property
    def same_in_eval(self) -> bool:
        """Whether both towers compute the same in training and eval mode (heads on fixed
        vectors), so that eval-mode similarities can be read off a training forward pass."""
        return all(getattr(tower, "same_in_eval", False)
                   for tower in (self.image_tower, self.text_tower))

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
