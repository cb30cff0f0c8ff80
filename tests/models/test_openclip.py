"""CLIP towers and ``ncclean embed`` with a tiny open_clip model (random weights saved to a file),
offline."""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.cli import main
from ncclean.data.parquet import open_pairs
from tests.helpers import write_parquet

TINY = {"embed_dim": 16,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16,
                       "patch_size": 16},
        "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 16, "heads": 2,
                     "layers": 1}}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory) -> tuple[str, str]:
    """``(config .json, checkpoint .safetensors)`` of a 16-d open_clip model."""
    import torch
    from safetensors.torch import save_file

    from ncclean.models.openclip import import_open_clip

    folder = tmp_path_factory.mktemp("clip")
    config = folder / "tiny-clip.json"
    config.write_text(json.dumps(TINY))
    open_clip = import_open_clip()
    open_clip.add_model_config(config)
    torch.manual_seed(0)
    model = open_clip.create_model("tiny-clip")
    checkpoint = folder / "tiny.safetensors"
    save_file(model.state_dict(), checkpoint)
    return str(config), str(checkpoint)


@pytest.fixture(scope="module")
def noisy_shapes(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("clip-shapes")
    api.synth(folder / "shapes.parquet", n_images=12, captions_per_image=3, seed=0)
    api.inject_noise(folder / "shapes.parquet", folder / "noisy.parquet", ratio=0.3, seed=0)
    return str(folder / "noisy.parquet")


def _encoder(tiny_clip):
    from ncclean.models.openclip import ClipSpec, clip_encoder

    return clip_encoder(ClipSpec(tiny_clip[0], checkpoint=tiny_clip[1]))


def _direct_similarity(tiny_clip, path) -> np.ndarray:
    """The cosine of every row's image and caption, encoded one by one."""
    encoder = _encoder(tiny_clip)
    table = pq.read_table(path)
    images = encoder.images([encoder.prepare(b, 10**8) for b in table.column("image").to_pylist()])
    texts = encoder.texts(table.column("caption").to_pylist())
    return (images * texts).sum(axis=1)


def test_the_guard_makes_open_clip_importable():
    from ncclean.models.openclip import import_open_clip

    open_clip = import_open_clip()
    assert callable(open_clip.create_model_and_transforms)
    assert import_open_clip() is open_clip


def test_clip_method_scores_with_a_local_checkpoint(tmp_path, tiny_clip, noisy_shapes):
    out = tmp_path / "scored.parquet"
    summary = api.score(noisy_shapes, out, method="clip", clip_model=tiny_clip[0],
                        clip_checkpoint=tiny_clip[1], cache_dir=tmp_path / "cache")
    assert summary.n_pairs == 36
    scored = pq.read_table(out)
    np.testing.assert_allclose(scored.column("clip_sim").to_numpy(),
                               _direct_similarity(tiny_clip, noisy_shapes), atol=1e-5)
    sidecar = json.loads((tmp_path / "scored.parquet.json").read_text())
    assert sidecar["matcher"]["image_tower"] == "clip"
    assert sidecar["matcher"]["clip_checkpoint"] == tiny_clip[1]
    assert list((tmp_path / "cache" / "clip").glob("*.npy"))  # features cached

    again = tmp_path / "again.parquet"  # from the cache: the same file
    api.score(noisy_shapes, again, method="clip", clip_model=tiny_clip[0],
              clip_checkpoint=tiny_clip[1], cache_dir=tmp_path / "cache")
    assert pq.read_table(again).equals(scored)


def test_training_methods_train_heads_on_clip_features(tmp_path, tiny_clip, noisy_shapes):
    out = tmp_path / "gmm.parquet"
    api.score(noisy_shapes, out, method="gmm", params={"warmup_epochs": "1", "epochs": "1"},
              clip_model=tiny_clip[0], clip_checkpoint=tiny_clip[1], cache_dir=None)
    matcher = json.loads((tmp_path / "gmm.parquet.json").read_text())["matcher"]
    assert (matcher["image_in_dim"], matcher["text_in_dim"]) == (16, 16)
    assert pq.read_table(out).column("clean_prob").null_count == 0


def test_embed_then_score_from_the_columns(tmp_path, tiny_clip, noisy_shapes):
    out = tmp_path / "emb.parquet"
    summary = api.embed(noisy_shapes, out, clip_model=tiny_clip[0],
                        clip_checkpoint=tiny_clip[1], half=True)
    assert (summary.n_rows, summary.dtype, summary.image_dim) == (36, "float16", 16)
    table = pq.read_table(out)
    assert table.column_names[:len(pq.read_schema(noisy_shapes).names)] == \
        pq.read_schema(noisy_shapes).names
    assert str(table.schema.field("image_emb").type) == \
        "fixed_size_list<element: halffloat>[16]"
    images = np.array(table.column("image_emb").to_pylist(), dtype=np.float32)
    texts = np.array(table.column("text_emb").to_pylist(), dtype=np.float32)
    np.testing.assert_allclose((images * texts).sum(axis=1),
                               _direct_similarity(tiny_clip, noisy_shapes), atol=3e-3)

    scored = tmp_path / "scored.parquet"
    from ncclean.data.schema import Columns

    api.score(out, scored, method="clip",
              columns=Columns(image_emb="image_emb", text_emb="text_emb"))
    np.testing.assert_allclose(pq.read_table(scored).column("clip_sim").to_numpy(),
                               _direct_similarity(tiny_clip, noisy_shapes), atol=3e-3)


def test_embed_keeps_rows_it_cannot_embed(tmp_path, tiny_clip):
    from tests.helpers import png_bytes

    path = write_parquet(tmp_path / "pairs.parquet", {
        "image": [png_bytes((200, 0, 0)), b"not an image", png_bytes((0, 0, 200))],
        "caption": ["a red box", "a box", "   "],
    })
    out = tmp_path / "emb.parquet"
    summary = api.embed(path, out, clip_model=tiny_clip[0], clip_checkpoint=tiny_clip[1])
    table = pq.read_table(out)
    assert table.num_rows == 3
    assert table.column("image_emb").is_null().to_pylist() == [False, True, False]
    assert table.column("text_emb").is_null().to_pylist() == [False, False, True]
    problems = table.column("embed_problem").to_pylist()
    assert problems[0] is None and "undecodable image" in problems[1]
    assert problems[2] == "empty caption"
    assert summary.problems == {"empty caption": 1, "undecodable image": 1}


def test_embed_writes_clip_retrievals_layout(tmp_path, tiny_clip, noisy_shapes):
    out = tmp_path / "retrieval"
    api.embed(noisy_shapes, out, clip_model=tiny_clip[0], clip_checkpoint=tiny_clip[1],
              layout="clip-retrieval", shard_rows=20)
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == ["img_emb/img_emb_0.npy", "img_emb/img_emb_1.npy",
                     "metadata/metadata_0.parquet", "metadata/metadata_1.parquet",
                     "ncclean-embed.json",
                     "text_emb/text_emb_0.npy", "text_emb/text_emb_1.npy"]
    images = np.concatenate([np.load(out / "img_emb" / f"img_emb_{i}.npy") for i in (0, 1)])
    texts = np.concatenate([np.load(out / "text_emb" / f"text_emb_{i}.npy") for i in (0, 1)])
    metadata = [pq.read_table(out / "metadata" / f"metadata_{i}.parquet") for i in (0, 1)]
    assert [m.num_rows for m in metadata] == [20, 16]
    assert "image" not in metadata[0].column_names
    rows = np.concatenate([m.column("row").to_numpy() for m in metadata])
    np.testing.assert_array_equal(rows, np.arange(36))
    source = pq.read_table(noisy_shapes)
    assert metadata[1].column("caption").to_pylist() == \
        source.column("caption").to_pylist()[20:]
    np.testing.assert_allclose((images * texts).sum(axis=1),
                               _direct_similarity(tiny_clip, noisy_shapes), atol=1e-5)


def test_named_weights_fail_at_once_offline(tmp_path, capsys, noisy_shapes):
    start = time.perf_counter()
    code = main(["score", noisy_shapes, "-o", str(tmp_path / "x.parquet"), "--method", "clip",
                 "--clip-pretrained", "laion2b_s34b_b79k"])
    err = capsys.readouterr().err
    assert code == 2 and time.perf_counter() - start < 30
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--clip-checkpoint" in lines[0], err
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--image-encoder", "clip"], "needs weights"),
    (["--clip-checkpoint", "nowhere.safetensors"], "no file nowhere.safetensors"),
    (["--clip-pretrained", "x", "--clip-model", "no-such-model"], "no model 'no-such-model'"),
])
def test_clip_option_errors(tmp_path, capsys, noisy_shapes, args, fragment):
    code = main(["score", noisy_shapes, "-o", str(tmp_path / "x.parquet"), *args])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and fragment in err, err


def test_embed_refuses_an_existing_retrieval_folder(tmp_path, capsys, tiny_clip, noisy_shapes):
    (tmp_path / "taken").mkdir()
    code = main(["embed", noisy_shapes, "-o", str(tmp_path / "taken"), "--layout",
                 "clip-retrieval", "--clip-model", tiny_clip[0], "--clip-checkpoint",
                 tiny_clip[1]])
    assert code == 2 and "exists" in capsys.readouterr().err
    assert open_pairs(noisy_shapes).n_rows == 36


def test_finetune_full_trains_the_whole_clip(tmp_path, tiny_clip, noisy_shapes):
    from safetensors.numpy import load_file

    out, saved = tmp_path / "sdd.parquet", tmp_path / "sdd.safetensors"
    api.score(noisy_shapes, out, method="sdd", params={"epochs": "1"}, finetune="full",
              clip_model=tiny_clip[0], clip_checkpoint=tiny_clip[1], cache_dir=None,
              save_matcher=saved)
    sidecar = json.loads((tmp_path / "sdd.parquet.json").read_text())
    assert sidecar["matcher"]["finetune"] == "full"
    assert (sidecar["matcher"]["image_size"], sidecar["matcher"]["embed_dim"]) == (32, 16)
    assert "whole model" in sidecar["report"]["similarity_source"]  # no warm-up
    before, after = load_file(tiny_clip[1]), load_file(saved)
    for name in ("visual.conv1.weight", "token_embedding.weight", "text_projection"):
        trained = next(v for k, v in after.items() if k.endswith("." + name))
        assert trained.shape == before[name].shape
        assert not np.allclose(trained, before[name]), name


def test_the_whole_model_scores_like_its_frozen_features(tmp_path, tiny_clip, noisy_shapes):
    out = tmp_path / "clip.parquet"
    api.score(noisy_shapes, out, method="clip", finetune="full", clip_model=tiny_clip[0],
              clip_checkpoint=tiny_clip[1], cache_dir=None)
    whole = pq.read_table(out).column("clip_sim").to_numpy()
    frozen = _direct_similarity(tiny_clip, noisy_shapes)
    # Pixels differ only by resampling (ncclean pads to a square, open_clip crops).
    assert np.corrcoef(whole, frozen)[0, 1] > 0.99


def test_finetune_full_needs_clip_on_both_sides(tmp_path, capsys, tiny_clip, noisy_shapes):
    code = main(["score", noisy_shapes, "-o", str(tmp_path / "x.parquet"), "--finetune", "full",
                 "--text-encoder", "tokens", "--clip-model", tiny_clip[0], "--clip-checkpoint",
                 tiny_clip[1]])
    err = capsys.readouterr().err
    assert code == 2 and "both encoders must be clip" in err, err


def test_embed_with_e5_writes_caption_vectors_only(tmp_path):
    from ncclean.models.e5 import e5_vectors
    from tests.helpers import png_bytes

    path = write_parquet(tmp_path / "pairs.parquet", {
        "image": [png_bytes((200, 0, 0))] * 3,
        "caption": ["a red box", "", "une boîte rouge"],
    })
    out = tmp_path / "emb.parquet"
    summary = api.embed(path, out, encoder="e5", half=True)
    table = pq.read_table(out)
    assert summary.image_col is None and "image_emb" not in table.column_names
    assert str(table.schema.field("text_emb").type) == "fixed_size_list<element: halffloat>[384]"
    assert table.column("text_emb").is_null().to_pylist() == [False, True, False]
    written = np.array([table.column("text_emb")[i].as_py() for i in (0, 2)], dtype=np.float32)
    np.testing.assert_allclose(written, e5_vectors(["a red box", "une boîte rouge"]), atol=2e-3)
