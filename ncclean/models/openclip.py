"""Frozen open_clip features: the ``clip`` towers' inputs and ``ncclean embed``'s vectors.

The model is named like open_clip names it (``--clip-model ViT-B-32``, or a model config ``.json``
for a custom architecture) with its weights from a pretrained tag (``--clip-pretrained``, a
download: needs the network) or a local file (``--clip-checkpoint``, ``.safetensors`` or a torch
state dict). Images are decoded with PIL (transparency on white, as everywhere in ncclean) and
go through the model's own evaluation transform; captions through its own tokenizer. Vectors
are unit length, float32, computed once per image group and per distinct caption, and cached by
the model's identity and the inputs' content.

open_clip needs torchvision, imported through :mod:`ncclean.models.guard` (torchvision's
compiled operators do not load against the CPU build of torch here).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from ncclean.errors import BadOptionError, NcCleanError
from ncclean.progress import Progress, no_progress

_CHUNK = 64


def import_open_clip():
    """The ``open_clip`` module, through the torchvision guard (:mod:`ncclean.models.guard`)."""
    from ncclean.models.guard import import_guarded

    try:
        return import_guarded("open_clip")
    except ImportError:
        raise NcCleanError("CLIP encoders need open_clip: pip install 'ncclean[clip]'") from None


@dataclass(frozen=True)
class ClipSpec:
    """Which CLIP: an open_clip model name (or config ``.json``) and its weights, a pretrained
    tag or a local checkpoint (exactly one)."""

    model: str = "ViT-B-32"
    pretrained: str | None = None
    checkpoint: str | None = None

    def check(self) -> ClipSpec:
        """This spec with the checkpoint path made absolute; :class:`BadOptionError` when the
        weights are not given exactly once or a file is missing."""
        if (self.pretrained is None) == (self.checkpoint is None):
            raise BadOptionError("CLIP weights: give --clip-pretrained TAG (downloads) or "
                                 "--clip-checkpoint PATH (a local file), exactly one")
        if self.model.endswith(".json") and not Path(self.model).is_file():
            raise BadOptionError(f"--clip-model: no model config file {self.model}")
        if self.checkpoint is None:
            return self
        path = Path(self.checkpoint).expanduser()
        if not path.is_file():
            raise BadOptionError(f"--clip-checkpoint: no file {self.checkpoint}")
        model = str(Path(self.model).resolve()) if self.model.endswith(".json") else self.model
        return ClipSpec(model, None, str(path.resolve()))

    def identity(self) -> str:
        """What the features depend on, for cache keys: the model, and the tag or the
        checkpoint's path, size and modification time."""
        weights = self.pretrained
        if self.checkpoint is not None:
            stat = os.stat(self.checkpoint)
            weights = f"{self.checkpoint}:{stat.st_size}:{stat.st_mtime_ns}"
        config = ""
        if self.model.endswith(".json"):
            config = Path(self.model).read_text()
        return f"open_clip:{self.model}:{weights}:{config}"


def _model_name(open_clip, spec: ClipSpec) -> str:
    if spec.model.endswith(".json"):
        open_clip.add_model_config(spec.model)
        return Path(spec.model).stem
    if spec.model not in open_clip.list_models():
        raise BadOptionError(f"--clip-model: open_clip has no model {spec.model!r} (see "
                             "open_clip.list_models(), or give a model config .json)")
    return spec.model


def clip_dim(spec: ClipSpec) -> int:
    """The width of the model's embeddings, from its config (no weights loaded)."""
    open_clip = import_open_clip()
    return int(open_clip.get_model_config(_model_name(open_clip, spec))["embed_dim"])


class ClipEncoder:
    """A loaded open_clip model in evaluation mode with its transform and tokenizer."""

    def __init__(self, spec: ClipSpec, device: str = "cpu"):
        import torch

        open_clip = import_open_clip()
        spec = spec.check()
        name = _model_name(open_clip, spec)
        model, transform = load_clip(spec, device)
        self.spec, self.device = spec, device
        self.model = model.eval()
        self.transform = transform
        self.tokenizer = open_clip.get_tokenizer(name)
        self.dim = int(open_clip.get_model_config(name)["embed_dim"])
        self._torch = torch

    @property
    def identity(self) -> str:
        return self.spec.identity()

    def prepare(self, data: bytes, max_pixels: int):
        """Encoded image -> the model's input tensor (runs on decoding threads)."""
        from ncclean.data.images import open_rgb

        return self.transform(open_rgb(data, max_pixels))

    def images(self, prepared: list) -> np.ndarray:
        """``(n, dim) float32`` unit vectors of prepared image tensors."""
        return self._encode(prepared, self._torch.stack, self.model.encode_image)

    def texts(self, captions: list[str]) -> np.ndarray:
        """``(n, dim) float32`` unit vectors of captions (truncated to the context length)."""
        return self._encode(captions, self.tokenizer, self.model.encode_text)

    def _encode(self, items: list, to_batch, encode) -> np.ndarray:
        """``encode(to_batch(chunk), normalize=True)`` over chunks of ``items``, ``(n, dim)``."""
        out = np.empty((len(items), self.dim), dtype=np.float32)
        with self._torch.inference_mode():
            for start in range(0, len(items), _CHUNK):
                batch = to_batch(items[start:start + _CHUNK]).to(self.device)
                out[start:start + len(batch)] = \
                    encode(batch, normalize=True).float().cpu().numpy()
        return out


@contextlib.contextmanager
def _quiet():
    """open_clip logs its failures on the root logger before raising; the raise is enough."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _hub_reachable(timeout: float = 3.0) -> bool:
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname, port), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _offline_unless_reachable(downloads: bool):
    """Hugging Face's offline mode while loading, when a download is asked for and the hub does
    not answer within seconds: weights in the local cache still load, missing ones fail at once
    instead of after a minute of retries (measured here: 50 s)."""
    if not downloads:
        yield
        return
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    if not before and not _hub_reachable():
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


_encoders: dict[tuple[ClipSpec, str], ClipEncoder] = {}


def clip_encoder(spec: ClipSpec, device: str = "cpu") -> ClipEncoder:
    """The encoder of ``spec``, loaded once per process."""
    key = (spec.check(), device)
    if key not in _encoders:
        _encoders[key] = ClipEncoder(*key)
    return _encoders[key]


def clip_image_vectors(corpus, spec: ClipSpec, *, max_pixels: int, device: str = "cpu",
                       cache_dir: Path | None = None, progress: Progress = no_progress) \
        -> np.ndarray:
    """``(n_images, dim) float32`` CLIP vectors of every image group of ``corpus``; rows of
    images that cannot be used are marked invalid (their vectors are zero)."""
    from ncclean.models.vectors import frozen_image_vectors

    spec = spec.check()
    return frozen_image_vectors(corpus, lambda: clip_encoder(spec, device), kind="clip",
                                identity=spec.identity(), dim=clip_dim(spec),
                                label="encoding images (CLIP)", max_pixels=max_pixels,
                                cache_dir=cache_dir, progress=progress)


def clip_text_vectors(texts: list[str], spec: ClipSpec, *, device: str = "cpu",
                      cache_dir: Path | None = None, progress: Progress = no_progress) \
        -> np.ndarray:
    """``(len(texts), dim) float32`` CLIP vectors of ``texts``."""
    spec = spec.check()

    def fill(out: np.ndarray) -> dict:
        encoder = clip_encoder(spec, device)
        progress("encoding captions (CLIP)", 0, len(texts))
        for start in range(0, len(texts), 1024):
            chunk = texts[start:start + 1024]
            out[start:start + len(chunk)] = encoder.texts(chunk)
            progress("encoding captions (CLIP)", start + len(chunk), len(texts))
        return {"encoder": spec.identity(), "n_texts": len(texts)}

    shape = (len(texts), clip_dim(spec))
    if cache_dir is None:
        vectors = np.empty(shape, dtype=np.float32)
        fill(vectors)
        return vectors
    from ncclean.data.cache import cached_array, content_key

    key = content_key(["clip-texts", spec.identity(), *texts])
    return cached_array(Path(cache_dir) / "clip", key, shape, np.float32, fill)[0]


def load_clip(spec: ClipSpec, device: str = "cpu"):
    """A fresh ``(model, evaluation transform)`` of ``spec`` with its weights (training mode);
    :class:`NcCleanError` in one line when the weights cannot be had."""
    open_clip = import_open_clip()
    spec = spec.check()
    name = _model_name(open_clip, spec)
    try:
        with _quiet(), _offline_unless_reachable(spec.pretrained is not None):
            model, _, transform = open_clip.create_model_and_transforms(
                name, pretrained=spec.checkpoint or spec.pretrained, device=device)
    except Exception as error:  # open_clip and huggingface_hub raise many kinds
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else \
            type(error).__name__
        if spec.checkpoint is not None:
            raise NcCleanError(f"cannot load CLIP weights {spec.checkpoint} into {name}: "
                               f"{reason}") from None
        raise NcCleanError(
            f"cannot get CLIP weights {name}/{spec.pretrained} (named weights are "
            "downloaded, and they are neither reachable nor in the local Hugging Face "
            "cache): use --clip-checkpoint PATH with local weights; HF_HUB_OFFLINE=1 says "
            f"there is no network. ({reason})") from None
    return model, transform


def clip_input_size(spec: ClipSpec) -> int:
    """The side of the model's square input images, from its config."""
    open_clip = import_open_clip()
    size = open_clip.get_model_config(_model_name(open_clip, spec.check()))["vision_cfg"] \
        .get("image_size", 224)
    return int(size if isinstance(size, int) else max(size))


def clip_tokens(texts: list[str], spec: ClipSpec) -> np.ndarray:
    """``(len(texts), context_length) int64`` token ids from the model's own tokenizer."""
    open_clip = import_open_clip()
    tokenizer = open_clip.get_tokenizer(_model_name(open_clip, spec.check()))
    parts = [tokenizer(texts[i:i + 4096]).numpy() for i in range(0, len(texts), 4096)]
    return np.concatenate(parts) if parts else np.zeros((0, 1), dtype=np.int64)


def full_clip_towers(spec: ClipSpec):
    """``(image tower, text tower)`` of a whole pretrained CLIP, every weight trainable
    (``--finetune full``): the image tower takes ``(B, S, S, 3) uint8`` pixels (decoded at the
    model's input size, padded with white like every ncclean image) and applies the model's
    normalisation; the text tower takes token ids. The towers share no parameters: the visual
    encoder is moved out of the model the text tower keeps."""
    import torch
    from torch import nn

    model, _ = load_clip(spec)
    visual = model.visual
    model.visual = nn.Identity()
    config = getattr(visual, "preprocess_cfg", {}) or {}
    mean = torch.tensor(config.get("mean", (0.48145466, 0.4578275, 0.40821073)))
    std = torch.tensor(config.get("std", (0.26862954, 0.26130258, 0.27577711)))

    class ImageTower(nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = visual
            self.register_buffer("mean", mean.view(1, 3, 1, 1), persistent=False)
            self.register_buffer("std", std.view(1, 3, 1, 1), persistent=False)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            x = images.permute(0, 3, 1, 2).float().div_(255.0)
            return self.visual((x - self.mean) / self.std)

    class TextTower(nn.Module):
        def __init__(self):
            super().__init__()
            self.clip = model

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.clip.encode_text(tokens)

    return ImageTower(), TextTower()
