"""DisNCL's networks (:mod:`ncclean.methods.disncl` has the method and which piece is whose).

:class:`DisentangledMatcher` wraps a matcher with four heads that split its joint embeddings into
modality-invariant and modality-exclusive parts and encodes into the invariant one;
:class:`ExclusiveView` encodes into the exclusive one; :class:`DisNCLNet` adds the eight critics
(:data:`CRITICS`) whose Jensen-Shannon estimates (:func:`jsd_information`) train through a gradient
reversal (:func:`reverse_gradient`) where encoders and critics play against each other.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# name: (first, second, adversarial). F = the matcher's joint embedding, S/X = the heads.
CRITICS = {"VS_FT": ("VS", "FT", False), "TS_FV": ("TS", "FV", False),
           "VX_FV": ("VX", "FV", False), "TX_FT": ("TX", "FT", False),
           "VX_FT": ("VX", "FT", True), "TX_FV": ("TX", "FV", True),
           "VS_VX": ("VS", "VX", True), "TS_TX": ("TS", "TX", True)}


def mlp(d_in: int, d_out: int, hidden: int = 256) -> nn.Sequential:
    """The paper's 3-layer MLP: Linear, LeakyReLU(0.2), Linear, LeakyReLU(0.2), Linear."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.LeakyReLU(0.2),
                         nn.Linear(hidden, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, d_out))


class ResidualMLP(nn.Module):
    """:func:`mlp` beside a bias-free linear map of the same input (ours): the head starts as a
    projection of its input, which a few passes then bend (why and what it measured:
    :mod:`ncclean.methods.disncl`)."""

    def __init__(self, d_in: int, d_out: int, hidden: int = 256):
        super().__init__()
        self.mlp = mlp(d_in, d_out, hidden)
        self.skip = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x) + self.skip(x)


HEADS = {"mlp": mlp, "residual": ResidualMLP}


class _Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: ARG004 - autograd's signature
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
        return -grad


def reverse_gradient(x: torch.Tensor) -> torch.Tensor:
    """Identity forward, negated gradient backward: what lies before it (the encoders) descends
    on minus the loss that what lies after it (a discriminator) descends on."""
    return _Reverse.apply(x)


class DisentangledMatcher(nn.Module):
    """A matcher (anything with ``encode_images``, ``encode_texts``, ``embed_dim``, ``config``)
    and the four heads ``f_S``, ``f_X``, ``g_S``, ``g_X`` (:data:`HEADS`; a checkpoint without
    ``heads`` predates the residual heads). ``encode_*`` give ``(B, head_dim)`` unit vectors of
    the invariant part; ``split_*`` give ``(F, S, X)``: the joint embedding and the raw invariant
    and exclusive head outputs."""

    def __init__(self, backbone: nn.Module, head_dim: int, hidden: int = 256,
                 heads: str = "mlp"):
        super().__init__()
        self.backbone = backbone
        self.config = backbone.config
        self.head_dim, self.hidden, self.heads = head_dim, hidden, heads
        d = backbone.embed_dim
        # Unit vectors have coordinates of size 1/sqrt(d): scaled to size 1, the heads' inputs
        # outweigh their biases at initialisation (else every output is nearly the bias).
        self.scale = math.sqrt(d)
        self.image_invariant, self.image_exclusive, self.text_invariant, self.text_exclusive = (
            HEADS[heads](d, head_dim, hidden) for _ in range(4))

    @property
    def embed_dim(self) -> int:
        return self.head_dim

    def split_images(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        joint = self.backbone.encode_images(*inputs) * self.scale
        return joint, self.image_invariant(joint), self.image_exclusive(joint)

    def split_texts(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        joint = self.backbone.encode_texts(*inputs) * self.scale
        return joint, self.text_invariant(joint), self.text_exclusive(joint)

    def encode_images(self, *inputs: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.split_images(*inputs)[1], dim=-1)

    def encode_texts(self, *inputs: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.split_texts(*inputs)[1], dim=-1)

    def checkpoint_args(self) -> dict[str, int | str]:
        """What :mod:`ncclean.models.checkpoint` rebuilds the heads from, around the backbone."""
        return {"head_dim": self.head_dim, "hidden": self.hidden, "heads": self.heads}


class ExclusiveView(nn.Module):
    """The exclusive space of a :class:`DisentangledMatcher` as a matcher, for
    :func:`ncclean.train.scoring.embed`: ``encode_*`` give unit vectors of ``V_X``, ``T_X``."""

    def __init__(self, matcher: DisentangledMatcher):
        super().__init__()
        self.matcher = matcher
        self.embed_dim = matcher.head_dim

    def encode_images(self, *inputs: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.matcher.split_images(*inputs)[2], dim=-1)

    def encode_texts(self, *inputs: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.matcher.split_texts(*inputs)[2], dim=-1)


class DisNCLNet(nn.Module):
    """What trains: the disentangled matcher and the eight discriminators (:data:`CRITICS`)."""

    def __init__(self, matcher: DisentangledMatcher, hidden: int = 256):
        super().__init__()
        self.matcher = matcher
        def width(part: str) -> int:
            return matcher.backbone.embed_dim if part[0] == "F" else matcher.head_dim

        self.critics = nn.ModuleDict({name: mlp(width(a) + width(b), 1, hidden)
                                      for name, (a, b, _) in CRITICS.items()})

    def clip_groups(self) -> list[list[nn.Parameter]]:
        """The loop clips the encoder and the discriminators each on its own."""
        return [list(self.matcher.parameters()), list(self.critics.parameters())]


def jsd_information(critic: nn.Module, first: torch.Tensor, second: torch.Tensor,
                    groups: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
    """Eq. 9: the Jensen-Shannon estimate ``E_joint[log s(d)] + E_marginal[log(1 - s(d))]`` of
    the information between ``first`` and ``second`` (rows paired), with the batch rolled by
    one as marginal samples (partners sharing an image or caption skipped). Returns the estimate
    (a scalar in ``(-inf, 0]``) and how many of the samples the critic classified right, of how
    many."""
    joint = critic(torch.cat([first, second], dim=1)).squeeze(1)
    images, texts = groups
    apart = (images != images.roll(1)) & (texts != texts.roll(1))
    marginal = critic(torch.cat([first, second.roll(1, dims=0)], dim=1)).squeeze(1)[apart]
    estimate = -F.softplus(-joint).mean()
    if len(marginal):
        estimate = estimate - F.softplus(marginal).mean()
    right = int((joint > 0).sum()) + int((marginal < 0).sum())
    return estimate, right, len(joint) + len(marginal)
