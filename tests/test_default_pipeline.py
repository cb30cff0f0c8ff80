"""The pipeline a user gets with no encoder or method option: pretrained towers and ``clip``
where the pretrained packages are installed (the suite itself runs with NCCLEAN_TOWERS=scratch
for speed; these tests lift it)."""

import json
from pathlib import Path

import pytest

from ncclean import api
from ncclean.methods.choose import auto_method
from ncclean.models.matcher import MatcherConfig
from ncclean.models.registry import DEFAULT_TOWERS, default_towers


def test_auto_towers_are_the_pretrained_ones_when_installed(monkeypatch):
    monkeypatch.delenv("NCCLEAN_TOWERS", raising=False)
    chosen = default_towers()
    for tower, pretrained, scratch in zip(chosen, *DEFAULT_TOWERS.values()):
        assert tower in (pretrained, scratch)
    monkeypatch.setenv("NCCLEAN_TOWERS", "scratch")
    assert default_towers() == DEFAULT_TOWERS["scratch"]


@pytest.mark.parametrize(("image", "text", "method"), [
    ("imagenet", "e5", "clip"), ("column", "column", "clip"), ("imagenet", "column", "clip"),
    ("pixels", "tokens", "gmm"), ("pixels", "e5", "gmm"), ("imagenet", "tokens", "gmm"),
])
def test_auto_method_is_clip_on_fixed_vectors_and_gmm_on_trained_towers(image, text, method):
    assert auto_method(MatcherConfig(image_tower=image, text_tower=text), None) == method


def test_no_options_scores_with_pretrained_towers_and_clip(tmp_path, shapes, monkeypatch):
    monkeypatch.delenv("NCCLEAN_TOWERS", raising=False)
    if default_towers() != DEFAULT_TOWERS["pretrained"]:
        pytest.skip("the imagenet and e5 extras are not installed")
    summary = api.score(shapes, tmp_path / "scored.parquet", cache_dir=tmp_path / "cache")
    sidecar = json.loads(Path(f"{summary.output}.json").read_text())
    assert summary.method == "clip" and sidecar["method_chosen_by"] == "auto"
    assert (sidecar["matcher"]["image_tower"], sidecar["matcher"]["text_tower"]) == \
        ("imagenet", "e5")
    assert "aligned by a ridge CCA" in sidecar["report"]["embeddings"]


def test_a_method_parameter_that_auto_cannot_take_says_what_auto_chose(tmp_path, shapes):
    from ncclean.errors import BadOptionError

    with pytest.raises(BadOptionError, match="--method auto chose gmm for the pixels and tokens"):
        api.score(shapes, tmp_path / "o.parquet", params={"align": "cca"}, cache_dir=False)
