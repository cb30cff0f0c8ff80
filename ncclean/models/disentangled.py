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

from ncclean.models.linear import Linear

# name: (first, second, adversarial). F = the matcher's joint embedding, S/X = the heads.
CRITICS = {"VS_FT": ("VS", "FT", False), "TS_FV": ("TS", "FV", False),
           "VX_FV": ("VX", "FV", False), "TX_FT": ("TX", "FT", False),
           "VX_FT": ("VX", "FT", True), "TX_FV": ("TX", "FV", True),
           "VS_VX": ("VS", "VX", True), "TS_TX": ("TS", "TX", True)}
# The critics by the rows they read, each group one :class:`CriticBank`: L_Dis's read the
# clean pairs, L_reg's every pair.
BANKS = {"clean": ("VS_FT", "TS_FV", "VX_FV", "TX_FT", "VX_FT", "TX_FV"),
         "all": ("VS_VX", "TS_TX")}


def mlp(d_in: int, d_out: int, hidden: int = 256) -> nn.Sequential:
    """The paper's 3-layer MLP: Linear, LeakyReLU(0.2), Linear, LeakyReLU(0.2), Linear."""
    return nn.Sequential(Linear(d_in, hidden), nn.LeakyReLU(0.2),
                         Linear(hidden, hidden), nn.LeakyReLU(0.2), Linear(hidden, d_out))


class ResidualMLP(nn.Module):
    """:func:`mlp` beside a bias-free linear map of the same input (ours): the head starts as a
    projection of its input, which a few passes then bend (why and what it measured:
    :mod:`ncclean.methods.disncl`)."""

    def __init__(self, d_in: int, d_out: int, hidden: int = 256):
        super().__init__()
        self.mlp = mlp(d_in, d_out, hidden)
        self.skip = Linear(d_in, d_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x) + self.skip(x)


HEADS = {"mlp": mlp, "residual": ResidualMLP}


def reverse_gradient(x: torch.Tensor) -> torch.Tensor:
    """Identity forward, negated gradient backward: what lies before it (the encoders) descends
    on minus the loss that what lies after it (a discriminator) descends on. Written as
    ``2 x.detach() - x`` (exactly ``x`` for any finite ``x`` below half the float range:
    doubling is exact and so is the difference of numbers within a factor of two), so the
    backward pass stays in torch's engine, with no Python function to call back."""
    return 2 * x.detach() - x


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


class CriticBank(nn.Module):
    """Critics of one shape, stacked: each the paper's :func:`mlp` (LeakyReLU 0.2) on a pair of
    codes, ``d_first + d_second -> hidden -> hidden -> 1``, all of them applied to a batch in
    a few batched products instead of a dozen small ones each. Critic ``i`` starts with the
    weights :func:`mlp` would give it, drawn in the order of ``names``."""

    def __init__(self, names: tuple[str, ...], d_first: int, d_second: int, hidden: int = 256):
        super().__init__()
        self.names = tuple(names)
        critics = [mlp(d_first + d_second, 1, hidden) for _ in self.names]

        def stacked(layer: int, part: str, columns: slice = slice(None)) -> nn.Parameter:
            tensors = [getattr(critic[layer], part).detach() for critic in critics]
            return nn.Parameter(torch.stack([t[:, columns].T.contiguous() if part == "weight"
                                             else t for t in tensors]))

        # The first layer by the half of its input it reads: (n, d_first or d_second, hidden).
        self.w1_first = stacked(0, "weight", slice(0, d_first))
        self.w1_second = stacked(0, "weight", slice(d_first, None))
        self.b1 = stacked(0, "bias")  # (n, hidden)
        self.w2, self.b2 = stacked(2, "weight"), stacked(2, "bias")
        self.w3, self.b3 = stacked(4, "weight"), stacked(4, "bias")  # (n, hidden, 1), (n, 1)

    def forward(self, first: torch.Tensor, second: torch.Tensor,
                apart: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each critic's logits of the joint samples (row ``i`` of ``first`` with row ``i`` of
        ``second``), ``(n, R)``, and of the marginal samples (row ``i`` with row ``i - 1`` of
        ``second``, where ``apart``), ``(n, M)``; ``first`` is ``(n, R, d_first)`` and
        ``second`` ``(n, R, d_second)``. The first layer of a concatenation is the sum of its
        halves' products, so each half is multiplied once for both kinds of sample."""
        a, b = torch.bmm(first, self.w1_first), torch.bmm(second, self.w1_second)
        rows = first.shape[1]
        pre = torch.cat([a + b, (a + b.roll(1, dims=1))[:, apart]], dim=1) + self.b1[:, None]
        hidden = F.leaky_relu(pre, 0.2)
        hidden = F.leaky_relu(torch.baddbmm(self.b2[:, None], hidden, self.w2), 0.2)
        out = torch.baddbmm(self.b3[:, None], hidden, self.w3).squeeze(2)
        return out[:, :rows], out[:, rows:]


class DisNCLNet(nn.Module):
    """What trains: the disentangled matcher and the eight discriminators (:data:`CRITICS`), in
    the banks of :data:`BANKS`."""

    def __init__(self, matcher: DisentangledMatcher, hidden: int = 256):
        super().__init__()
        self.matcher = matcher

        def width(part: str) -> int:
            return matcher.backbone.embed_dim if part[0] == "F" else matcher.head_dim

        banks = {}
        for bank, names in BANKS.items():
            (first, second), = {(width(CRITICS[n][0]), width(CRITICS[n][1])) for n in names}
            banks[bank] = CriticBank(names, first, second, hidden)
        self.critics = nn.ModuleDict(banks)

    def clip_groups(self) -> list[list[nn.Parameter]]:
        """The loop clips the encoder and the discriminators each on its own."""
        return [list(self.matcher.parameters()), list(self.critics.parameters())]


def marginal_partners(groups: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``(B,) bool``: row ``i`` and row ``i - 1`` (the batch rolled by one) show another image
    and another caption, so they make a marginal sample for :func:`jsd_information`."""
    images, texts = groups
    return (images != images.roll(1)) & (texts != texts.roll(1))


def jsd_information(bank: CriticBank, first: torch.Tensor, second: torch.Tensor,
                    groups: tuple[torch.Tensor, torch.Tensor]) \
        -> tuple[torch.Tensor, torch.Tensor, int]:
    """Eq. 9 for each critic of ``bank``: the Jensen-Shannon estimate ``E_joint[log s(d)] +
    E_marginal[log(1 - s(d))]`` of the information between its ``first`` and ``second``
    (``(n, R, d)``, rows paired; the rows show pairs of image and caption ``groups``), with the
    batch rolled by one as marginal samples (partners sharing an image or caption skipped).
    Returns the estimates ``(n,)``, each in ``(-inf, 0]``, how many of its samples each critic
    classified right ``(n,)``, and of how many."""
    joint, marginal = bank(first, second, marginal_partners(groups))
    estimate = -F.softplus(-joint).mean(dim=1)
    if marginal.shape[1]:
        estimate = estimate - F.softplus(marginal).mean(dim=1)
    right = (joint > 0).sum(dim=1) + (marginal < 0).sum(dim=1)
    return estimate, right, joint.shape[1] + marginal.shape[1]
