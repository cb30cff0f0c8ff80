"""The tower registry: what each tower says about itself, and the questions the rest of ncclean
asks it instead of comparing names."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ncclean.data.schema import Columns
from ncclean.errors import BadOptionError
from ncclean.models.matcher import MatcherConfig
from ncclean.models.registry import (
    IMAGE_REGISTRY,
    IMAGE_TOWERS,
    TEXT_REGISTRY,
    TEXT_TOWERS,
    pixel_size,
    raw_source,
)
from ncclean.models.resolve import require_columns, scoring_columns

BASE = MatcherConfig()


def test_every_tower_declares_itself():
    assert IMAGE_TOWERS == ("pixels", "column", "clip", "imagenet")
    assert TEXT_TOWERS == ("tokens", "e5", "column", "clip")
    for registry, modality in ((IMAGE_REGISTRY, "image"), (TEXT_REGISTRY, "text")):
        for name, tower in registry.items():
            assert (tower.name, tower.modality) == (name, modality)
            assert tower.needs <= {"column", "vocab", "clip-weights", "package", "pixels"}


def test_frozen_is_a_head_on_fixed_vectors():
    frozen = {name: replace(BASE, image_tower=name).image_spec.frozen for name in IMAGE_TOWERS}
    assert frozen == {"pixels": False, "column": True, "clip": True, "imagenet": True}
    assert not replace(BASE, image_tower="clip", finetune="full").frozen_images
    assert replace(BASE, image_tower="imagenet").frozen_images
    texts = {name: replace(BASE, text_tower=name).text_spec.frozen for name in TEXT_TOWERS}
    assert texts == {"tokens": False, "e5": True, "column": True, "clip": True}
    assert replace(BASE, image_tower="clip", text_tower="clip", finetune="full").starts_pretrained


def test_only_the_pixels_tower_needs_images_decoded_up_front():
    assert pixel_size(replace(BASE, image_size=48)) == 48
    for name in ("column", "clip", "imagenet"):
        assert pixel_size(replace(BASE, image_tower=name)) is None


def test_raw_source_names_the_pairs_the_clip_method_compares_directly():
    def source(image, text):
        return raw_source(replace(BASE, image_tower=image, text_tower=text,
                                  clip_model="ViT-B-32", clip_checkpoint="w.safetensors"))

    assert source("column", "column") == "precomputed columns"
    assert source("clip", "clip") == "CLIP ViT-B-32 (w.safetensors)"
    assert source("imagenet", "e5") == ("ImageNet EfficientNet-Lite0 image features and "
                                        "multilingual-e5-small caption vectors")
    assert source("imagenet", "column").startswith("ImageNet")
    # Today's other pairs train a matcher, as before the registry.
    for pair in [("pixels", "tokens"), ("column", "e5"), ("clip", "e5"), ("imagenet", "tokens"),
                 ("pixels", "column"), ("column", "clip")]:
        assert source(*pair) is None, pair
    assert raw_source(None) is None


def test_column_towers_need_their_columns_named():
    config = replace(BASE, image_tower="column", text_tower="column")
    with pytest.raises(BadOptionError, match="column image encoder needs --image-emb-col"):
        require_columns(config, Columns())
    with pytest.raises(BadOptionError, match="column text encoder needs --text-emb-col"):
        require_columns(config, Columns(image_emb="i"))
    require_columns(config, Columns(image_emb="i", text_emb="t"))
    require_columns(BASE, Columns())
    filled = scoring_columns(config, Columns(), {"columns": {"image_emb": "i", "text_emb": "t"}})
    assert (filled.image_emb, filled.text_emb) == ("i", "t")
    assert scoring_columns(BASE, Columns(), {"columns": {"image_emb": "i"}}).image_emb is None


def test_no_tower_name_is_compared_outside_models():
    """Adding a tower touches models/ only: no ``== "pixels"``-style test elsewhere."""
    root = Path(__file__).resolve().parents[2] / "ncclean"
    names = set(IMAGE_TOWERS) | set(TEXT_TOWERS)
    offenders = []
    for path in root.rglob("*.py"):
        if "models" in path.relative_to(root).parts[:1]:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            about_towers = "tower" in code or "encoder" in code  # "clip" is a method too
            compares = any(f'{op} "{n}"' in code for n in names for op in ("==", "!="))
            if (about_towers and compares) or "_tower ==" in code or "_tower in (" in code:
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert not offenders


def test_the_registry_imports_no_torch():
    code = "import sys, ncclean.models.registry, ncclean.models.resolve; " \
           "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.strip() == "False"
