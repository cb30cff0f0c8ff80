import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from ncclean.data.text import Vocabulary
from ncclean.methods.base import Context
from ncclean.methods.disncl import DisentangledMatcher, DisNCL
from ncclean.models.checkpoint import (
    FORMAT,
    WRAPPED_FORMAT,
    CheckpointError,
    load_matcher,
    save_matcher,
)
from ncclean.models.matcher import Ensemble, MatcherConfig, build_matcher
from ncclean.models.tables import encode_tokens
from ncclean.testing import tiny_features
from ncclean.train.scoring import embed

DATA = Path(__file__).parent / "data"
#: The configuration of ``data/matcher-v1.safetensors``, written by ncclean at 63665c9 (before
#: wrappers) from ``Ensemble([build_matcher(OLD, 0), build_matcher(OLD, 1)])``.
OLD = MatcherConfig(embed_dim=4, image_size=8, cnn_width=2, word_dim=3,
                    vocab=["<pad>", "<unk>", "red", "circle", "blue"])
SMALL = dict(warmup_epochs=1, epochs=1, batch_size=16, pool_size=32, keep_passes=1)


def _inputs(config: MatcherConfig, n: int = 4):
    images = torch.randint(0, 256, (n, config.image_size, config.image_size, 3),
                           dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    ids, lengths = encode_tokens(["red circle", "blue", "", "red red blue circle"][:n],
                                 Vocabulary(config.vocab), max_tokens=6)
    return images, torch.as_tensor(ids), torch.as_tensor(lengths)


@pytest.fixture(scope="module")
def trained():
    """A DisNCL matcher trained a few steps on a tiny corpus, and that corpus's features."""
    features, config, _ = tiny_features(n_images=12, captions_per_image=2)
    result = DisNCL(**SMALL).fit(features, Context(seed=0, matcher_config=config))
    assert isinstance(result.matcher, DisentangledMatcher)
    return result.matcher, features


def test_a_saved_disncl_matcher_reloads_and_encodes_identically(trained, tmp_path):
    matcher, features = trained
    path = save_matcher(tmp_path / "d.safetensors", matcher, {"method": "disncl"})
    meta = json.loads((tmp_path / "d.safetensors.json").read_text())
    assert meta["format"] == WRAPPED_FORMAT and meta["method"] == "disncl"
    assert meta["wrapper"] == {"name": "disentangled", "backbone_members": None,
                               "args": {"head_dim": matcher.head_dim, "hidden": matcher.hidden,
                                        "heads": "residual"}}
    loaded = load_matcher(path)
    (member,) = loaded.members
    assert isinstance(member, DisentangledMatcher) and not loaded.training
    assert member.heads == "residual"
    assert loaded.embed_dim == matcher.head_dim == matcher.backbone.embed_dim
    before, after = embed(matcher, features), embed(loaded, features)
    assert np.array_equal(before.images, after.images)  # the invariant space, bit for bit
    assert np.array_equal(before.texts, after.texts)
    with torch.no_grad():  # the exclusive heads came back too
        inputs = features.text_inputs(np.arange(3))
        assert torch.equal(member.split_texts(*inputs)[2], matcher.split_texts(*inputs)[2])


def test_same_seed_same_bytes(trained, tmp_path):
    matcher, features = trained
    config = matcher.config
    again = DisNCL(**SMALL).fit(features, Context(seed=0, matcher_config=config)).matcher
    first = save_matcher(tmp_path / "a.safetensors", matcher, {"seed": 0})
    second = save_matcher(tmp_path / "b.safetensors", again, {"seed": 0})
    assert first.read_bytes() == second.read_bytes()
    assert (tmp_path / "a.safetensors.json").read_bytes() == \
        (tmp_path / "b.safetensors.json").read_bytes()


def test_an_old_checkpoint_loads_and_plain_matchers_are_written_as_before(tmp_path):
    images, ids, lengths = _inputs(OLD)
    old = load_matcher(DATA / "matcher-v1.safetensors")
    fresh = Ensemble([build_matcher(OLD, 0), build_matcher(OLD, 1)]).eval()
    with torch.no_grad():
        assert torch.equal(old.encode_images(images), fresh.encode_images(images))
        assert torch.equal(old.encode_texts(ids, lengths), fresh.encode_texts(ids, lengths))
    old_meta = json.loads((DATA / "matcher-v1.safetensors.json").read_text())
    path = save_matcher(tmp_path / "m.safetensors", fresh,
                        {k: old_meta[k] for k in ("seed", "written_by")})
    assert path.read_bytes() == (DATA / "matcher-v1.safetensors").read_bytes()
    meta = json.loads((tmp_path / "m.safetensors.json").read_text())
    assert meta["format"] == FORMAT and "wrapper" not in meta
    assert {k: v for k, v in meta.items() if k != "versions"} == \
        {k: v for k, v in old_meta.items() if k != "versions"}


def test_heads_around_an_ensemble_round_trip(tmp_path):
    images, ids, lengths = _inputs(OLD)
    torch.manual_seed(0)
    wrapped = DisentangledMatcher(Ensemble([build_matcher(OLD, 0), build_matcher(OLD, 1)]), 3,
                                  hidden=5).eval()
    loaded = load_matcher(save_matcher(tmp_path / "e.safetensors", wrapped))
    assert loaded.members[0].backbone.embed_dim == 8
    with torch.no_grad():
        assert torch.equal(loaded.encode_images(images), wrapped.encode_images(images))
        assert torch.equal(loaded.encode_texts(ids, lengths), wrapped.encode_texts(ids, lengths))


def test_what_a_checkpoint_cannot_hold_or_rebuild(tmp_path):
    with pytest.raises(CheckpointError, match="cannot save a Linear"):
        save_matcher(tmp_path / "x.safetensors", torch.nn.Linear(2, 2))
    torch.manual_seed(0)
    wrapped = DisentangledMatcher(build_matcher(OLD, 0), 3, hidden=5)
    with pytest.raises(CheckpointError, match="differently built"):
        save_matcher(tmp_path / "x.safetensors", Ensemble([build_matcher(OLD, 0), wrapped]))
    path = save_matcher(tmp_path / "w.safetensors", wrapped)
    sidecar = tmp_path / "w.safetensors.json"
    meta = json.loads(sidecar.read_text())
    for wrapper, message in ((dict(meta["wrapper"], name="os.system"), "cannot rebuild"),
                             (dict(meta["wrapper"], args={"head_dim": 3}), "do not fit"),
                             (dict(meta["wrapper"], args={"depth": 3}), "cannot rebuild"),
                             (None, "without its wrapper")):
        sidecar.write_text(json.dumps(dict(meta, wrapper=wrapper)))
        with pytest.raises(CheckpointError, match=message):
            load_matcher(path)
    # a plain /1 reader's view: the weights of a wrapper do not fit a plain matcher
    shutil.copy(path, tmp_path / "p.safetensors")
    (tmp_path / "p.safetensors.json").write_text(
        json.dumps({k: v for k, v in dict(meta, format=FORMAT).items() if k != "wrapper"}))
    with pytest.raises(CheckpointError, match="do not fit"):
        load_matcher(tmp_path / "p.safetensors")


def test_a_method_cannot_start_from_a_wrapped_matcher(trained, tmp_path, capsys):
    from ncclean import api
    from ncclean.cli import main

    matcher, _ = trained
    path = save_matcher(tmp_path / "d.safetensors", matcher)
    with pytest.raises(CheckpointError, match="'disentangled' matcher"):
        load_matcher(path, plain=True)
    api.synth(tmp_path / "c.parquet", n_images=8, captions_per_image=2, seed=0)
    code = main(["score", str(tmp_path / "c.parquet"), "-o", str(tmp_path / "s.parquet"),
                 "--method", "gmm", "--load-matcher", str(path), "--no-cache"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "plain matcher only" in err
    assert not (tmp_path / "s.parquet").exists()
