"""Which towers a run's matcher uses: the options' encoders resolved against the corpus's columns
and the CLIP weights given, or a scoring run's matcher with towers replaced for a retrain."""

from __future__ import annotations

import os

from ncclean.data.schema import Columns
from ncclean.models.registry import pixel_size

__all__ = ["matcher_config", "override_towers", "pixel_size", "require_columns",
           "scoring_columns"]

PathLike = str | os.PathLike


_EMB = {"image": ("image_emb", "--image-emb-col"), "text": ("text_emb", "--text-emb-col")}


def _column_towers(config):
    """The towers of ``config`` that read an embedding column, with that column's field name
    in :class:`Columns` and its option."""
    from ncclean.models.registry import towers

    return [(t, *_EMB[t.modality]) for t in towers(config) if "column" in t.needs]


def scoring_columns(config, columns: Columns, sidecar: dict) -> Columns:
    """``columns`` with the embedding columns the scoring run read (its sidecar's ``columns``)
    filled in where a tower needs one and none is named."""
    from dataclasses import replace

    used = sidecar.get("columns") or {}
    for _, field, _ in _column_towers(config):
        if not getattr(columns, field) and used.get(field):
            columns = replace(columns, **{field: used[field]})
    return columns


def require_columns(config, columns: Columns) -> None:
    """A tower that reads its vectors from a named column: say so when none is named."""
    from ncclean.errors import BadOptionError

    for tower, field, option in _column_towers(config):
        if not getattr(columns, field):
            raise BadOptionError(f"the {tower.name} {tower.modality} encoder needs {option}")


def column_tower(encoder: str, column: str | None) -> str:
    """``auto`` picks the vector column of its side when one is named; any other choice, or
    ``auto`` with no column named, stays as it is."""
    return "column" if encoder == "auto" and column else encoder


def matcher_config(columns: Columns, image_encoder: str, text_encoder: str, embed_dim: int,
                    image_size: int, load_matcher: PathLike | None, device: str,
                    clip: dict | None = None):
    """The matcher configuration (and the loaded matcher, if any) the options ask for. ``clip``:
    ``model``, ``pretrained``, ``checkpoint`` of the ``clip`` towers; giving weights makes
    ``auto`` pick them where no embedding column is named."""
    from ncclean.errors import BadOptionError
    from ncclean.models.checkpoint import load_matcher as load_checkpoint
    from ncclean.models.matcher import MatcherConfig
    from ncclean.models.registry import IMAGE_TOWERS, TEXT_TOWERS, default_towers

    clip = {k: v for k, v in (clip or {}).items() if v is not None}
    has_clip = bool(clip.get("pretrained") or clip.get("checkpoint"))
    initial = None
    if load_matcher is not None:
        initial = load_checkpoint(load_matcher, device, plain=True)
        config = initial.config
    else:
        fallback = default_towers()
        image_tower = column_tower(image_encoder, columns.image_emb)
        text_tower = column_tower(text_encoder, columns.text_emb)
        if image_tower == "auto":
            image_tower = "clip" if has_clip else fallback[0]
        if text_tower == "auto":
            text_tower = "clip" if has_clip else fallback[1]
        if image_tower not in IMAGE_TOWERS or text_tower not in TEXT_TOWERS:
            raise BadOptionError(f"encoders: image one of {IMAGE_TOWERS}, text one of "
                                 f"{TEXT_TOWERS}; got {image_encoder!r}, {text_encoder!r}")
        config = MatcherConfig(image_tower=image_tower, text_tower=text_tower,
                               embed_dim=embed_dim, image_size=image_size,
                               clip_model=clip.get("model"),
                               clip_pretrained=clip.get("pretrained"),
                               clip_checkpoint=str(clip["checkpoint"]) if clip.get("checkpoint")
                               else None)
    require_columns(config, columns)
    if clip.get("finetune", "heads") != "heads" and load_matcher is None:
        if clip["finetune"] != "full":
            raise BadOptionError(f"--finetune must be heads or full, got {clip['finetune']!r}")
        if not all("clip-weights" in t.needs for t in (config.image_spec, config.text_spec)):
            raise BadOptionError("--finetune full fine-tunes a whole CLIP: both encoders must be "
                                 "clip (give --clip-pretrained or --clip-checkpoint)")
        config.finetune = "full"
    if config.uses_clip and not (config.clip_pretrained or config.clip_checkpoint):
        raise BadOptionError("the clip encoder needs weights: --clip-pretrained TAG (downloads) "
                             "or --clip-checkpoint PATH")
    return config, initial


def override_towers(config, image_encoder: str, text_encoder: str):
    """``config`` (a scoring run's matcher) with the towers that are not ``auto`` replaced and
    what the replaced towers had learned from the corpus (vocabulary, vector widths) dropped."""
    from ncclean.errors import BadOptionError
    from ncclean.models.registry import IMAGE_TOWERS, TEXT_TOWERS

    if image_encoder not in ("auto", *IMAGE_TOWERS) or text_encoder not in ("auto", *TEXT_TOWERS):
        raise BadOptionError(f"encoders: image auto or one of {IMAGE_TOWERS}, text auto or one "
                             f"of {TEXT_TOWERS}; got {image_encoder!r}, {text_encoder!r}")
    if image_encoder not in ("auto", config.image_tower):
        config.image_tower, config.image_in_dim = image_encoder, None
    if text_encoder not in ("auto", config.text_tower):
        config.text_tower, config.text_in_dim, config.vocab = text_encoder, None, None
    if config.uses_clip and not (config.clip_pretrained or config.clip_checkpoint):
        raise BadOptionError("the clip encoder needs CLIP weights, and the scoring run used none: "
                             "score with --clip-pretrained or --clip-checkpoint")
    if config.finetune == "full" and not all("clip-weights" in t.needs
                                             for t in (config.image_spec, config.text_spec)):
        config.finetune = "heads"
    return config
