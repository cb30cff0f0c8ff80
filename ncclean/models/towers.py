"""Encoder towers: each maps one modality's batch to ``(batch, embed_dim)`` vectors.

- :class:`PixelCNN`: a small CNN trained from scratch on decoded ``uint8`` images.
- :class:`TokenGRU`: word embeddings and a bidirectional GRU over token ids (NCR's text encoder,
  directions averaged), mean-pooled over the caption's words.
- :class:`VectorMLP`: precomputed vectors (an embedding column, frozen e5 or CLIP features)
  through a two-layer MLP.

The :class:`ncclean.models.matcher.Matcher` normalises their outputs; towers do not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ncclean.models.gru import caption_means
from ncclean.models.linear import Linear


def _conv(c_in: int, c_out: int, kernel: int, stride: int) -> nn.Sequential:
    # GroupNorm, not BatchNorm: BatchNorm's running statistics made the eval-mode losses swing
    # from epoch to epoch (detection AUROC 0.77-0.90 on clip art with augmentation), and the
    # division depends on eval-mode losses.
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.GroupNorm(min(8, c_out), c_out),
        nn.ReLU(inplace=True),
    )


def random_affine(images: torch.Tensor, shift: float = 0.1, scale: float = 0.1) -> torch.Tensor:
    """Shift each image by up to ``shift`` of its side and scale it by up to ``1 +- scale``,
    filling with white. ``images``: ``(B, 3, H, W)`` in [-1, 1]. No flips: captions say "left"."""
    n = images.shape[0]
    device = images.device
    zoom = 1 + (torch.rand(n, device=device) * 2 - 1) * scale
    theta = torch.zeros(n, 2, 3, device=device)
    theta[:, 0, 0] = zoom
    theta[:, 1, 1] = zoom
    theta[:, :, 2] = (torch.rand(n, 2, device=device) * 2 - 1) * 2 * shift
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    # White is 1: shift to 0 so that grid_sample's zero padding reads as white.
    return F.grid_sample(images - 1, grid, align_corners=False, padding_mode="zeros") + 1


class PixelCNN(nn.Module):
    """``(B, S, S, 3) uint8`` images -> ``(B, embed_dim)``.

    Four stride-2 convolution stages (S -> S/16), global average pooling and a linear
    projection: about 17 MMAC per 64 px image, so an epoch over ten thousand pairs takes seconds
    on two CPU cores (0.08 s per batch of 128, forward and backward). In training mode each image
    is randomly shifted and scaled (:func:`random_affine`): a network trained from scratch on a
    noisy corpus memorises the mismatched pairs within a few epochs, and augmentation slows that
    down (clip art, 50% noise: the warm-up loss fell 6x in 10 epochs without it, 1.5x with it, and
    the plain loss-GMM's AUROC held near 0.89-0.90 instead of peaking at 0.88 and decaying).
    """

    def __init__(self, embed_dim: int = 256, width: int = 32, augment: bool = True):
        super().__init__()
        w = width
        self.augment = augment
        self.same_in_eval = not augment  # see VectorMLP.same_in_eval
        self.features = nn.Sequential(
            _conv(3, w, 5, 2),
            _conv(w, 2 * w, 3, 2),
            _conv(2 * w, 4 * w, 3, 2),
            _conv(4 * w, 8 * w, 3, 2),
        )
        self.project = Linear(8 * w, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
        if self.training and self.augment:
            x = random_affine(x)
        if x.device.type == "cpu":
            # oneDNN's convolutions run on channels-last activations: the image tower's forward
            # and backward took a fifth less time than on NCHW (results/throughput.md, "the
            # CNN's step on oneDNN's layout").
            x = x.contiguous(memory_format=torch.channels_last)
        x = self.features(x).mean(dim=(2, 3))
        return self.project(x)


class TokenGRU(nn.Module):
    """``(B, L) int64`` token ids with ``(B,)`` lengths -> ``(B, embed_dim)``.

    Id 0 is padding. A one-layer bidirectional GRU whose two directions are averaged (NCR's
    ``EncoderText``), then the mean over the caption's words. Captions with no tokens (length 0)
    read as a single ``<unk>``. On the CPU the GRU runs through
    :func:`ncclean.models.gru.caption_means` (the same values in 0.62x the time), elsewhere through
    ``nn.GRU``.
    """

    def __init__(self, vocab_size: int, embed_dim: int = 256, word_dim: int = 300,
                 dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.gru = nn.GRU(word_dim, embed_dim, batch_first=True, bidirectional=True)
        self.embed_dim = embed_dim
        self.same_in_eval = dropout == 0  # see VectorMLP.same_in_eval

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        lengths = lengths.clamp(min=1)  # packing reads them on the CPU, the mask on the device
        tokens = tokens.clone()
        tokens[:, 0] = torch.where(tokens[:, 0] == 0, torch.ones_like(tokens[:, 0]), tokens[:, 0])
        if tokens.device.type == "cpu" and self.gru.weight_hh_l0.dtype == torch.float32:
            return caption_means(self.gru, self.embed, self.dropout, tokens,
                                 lengths.cpu().numpy())
        return self.packed_forward(tokens, lengths)

    def packed_forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` through ``nn.GRU`` over packed sequences (``lengths`` at least 1):
        the path on GPUs, and the reference for the CPU's."""
        words = self.dropout(self.embed(tokens))
        packed = pack_padded_sequence(words, lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        output, _ = self.gru(packed)
        output, _ = pad_packed_sequence(output, batch_first=True, total_length=tokens.shape[1])
        output = (output[..., : self.embed_dim] + output[..., self.embed_dim:]) / 2
        on_device = lengths.to(tokens.device)
        mask = (torch.arange(tokens.shape[1], device=tokens.device)[None, :]
                < on_device[:, None]).unsqueeze(-1)
        return (output * mask).sum(dim=1) / on_device[:, None].to(output.dtype)


class VectorMLP(nn.Module):
    """``(B, in_dim)`` float vectors -> ``(B, embed_dim)``: Linear, GELU, Linear, with a linear
    skip path so that the raw geometry of good features is available from the first step."""

    #: Whether the forward pass is the same in training and eval mode (no dropout, no
    #: augmentation), so that an eval-mode result can be read off a training forward.
    same_in_eval = True

    def __init__(self, in_dim: int, embed_dim: int = 256, hidden: int = 512):
        super().__init__()
        self.mlp = nn.Sequential(Linear(in_dim, hidden), nn.GELU(), Linear(hidden, embed_dim))
        self.skip = Linear(in_dim, embed_dim, bias=False)

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        vectors = vectors.float()
        return self.mlp(vectors) + self.skip(vectors)
