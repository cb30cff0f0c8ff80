import numpy as np
import pytest
import torch

from ncclean.data.text import Vocabulary
from ncclean.models.checkpoint import CheckpointError, load_matcher, save_matcher
from ncclean.models.matcher import Ensemble, MatcherConfig, build_matcher
from ncclean.models.tables import encode_tokens
from ncclean.models.towers import PixelCNN, TokenGRU, VectorMLP

CONFIG = MatcherConfig(embed_dim=16, image_size=32, cnn_width=8, word_dim=12,
                       vocab=["<pad>", "<unk>", "red", "circle", "blue"])


def inputs(n=4):
    images = torch.randint(0, 256, (n, 32, 32, 3), dtype=torch.uint8)
    ids, lengths = encode_tokens(["red circle", "blue", "", "red red blue circle"][:n],
                                 Vocabulary(CONFIG.vocab), max_tokens=6)
    return images, torch.as_tensor(ids), torch.as_tensor(lengths)


def test_tower_shapes():
    images, ids, lengths = inputs()
    assert PixelCNN(16, 8)(images).shape == (4, 16)
    assert TokenGRU(5, 16, 12)(ids, lengths).shape == (4, 16)
    assert VectorMLP(7, 16)(torch.randn(4, 7)).shape == (4, 16)


def test_gru_ignores_padding():
    gru = TokenGRU(5, 16, 12, dropout=0.0).eval()
    ids = torch.tensor([[2, 3, 0, 0], [2, 3, 4, 4]])
    short = gru(ids, torch.tensor([2, 4]))
    longer_padding = gru(torch.tensor([[2, 3, 0, 0, 0, 0]]), torch.tensor([2]))
    assert torch.allclose(short[0], longer_padding[0], atol=1e-6)


def test_matcher_outputs_unit_vectors_and_same_seed_same_weights():
    images, ids, lengths = inputs()
    a, b, c = build_matcher(CONFIG, 3), build_matcher(CONFIG, 3), build_matcher(CONFIG, 4)
    a.eval(), b.eval()
    out = a.encode_images(images)
    assert torch.allclose(out.norm(dim=1), torch.ones(4))
    assert torch.equal(out, b.encode_images(images))
    assert not torch.equal(a.image_tower.project.weight, c.image_tower.project.weight)
    assert torch.allclose(a.encode_texts(ids, lengths).norm(dim=1), torch.ones(4))


def test_ensemble_similarity_is_the_mean_of_member_cosines():
    images, ids, lengths = inputs()
    members = [build_matcher(CONFIG, k).eval() for k in range(3)]
    ensemble = Ensemble(members).eval()
    with torch.no_grad():
        joint = ensemble.encode_images(images) @ ensemble.encode_texts(ids, lengths).T
        mean = sum(m.encode_images(images) @ m.encode_texts(ids, lengths).T
                   for m in members) / 3
    assert torch.allclose(joint, mean, atol=1e-6)
    assert ensemble.embed_dim == 48


def test_checkpoint_round_trip(tmp_path):
    images, ids, lengths = inputs()
    pair = Ensemble([build_matcher(CONFIG, 0), build_matcher(CONFIG, 1)]).eval()
    path = save_matcher(tmp_path / "m.safetensors", pair, {"seed": 7})
    loaded = load_matcher(path)
    with torch.no_grad():
        assert torch.equal(loaded.encode_texts(ids, lengths), pair.encode_texts(ids, lengths))
        assert torch.equal(loaded.encode_images(images), pair.encode_images(images))
    assert loaded.config.vocab == CONFIG.vocab
    assert (tmp_path / "m.safetensors.json").exists()
    assert path.stat().st_mode & 0o044  # readable by others, as the scored Parquet is


def test_bad_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="no matcher checkpoint"):
        load_matcher(tmp_path / "none.safetensors")
    (tmp_path / "x.safetensors").write_bytes(b"garbage")
    (tmp_path / "x.safetensors.json").write_text('{"format": "ncclean-matcher/1"}')
    with pytest.raises(CheckpointError, match="cannot read"):
        load_matcher(tmp_path / "x.safetensors")


def test_token_encoding_truncates_and_pads():
    ids, lengths = encode_tokens(["red red red red", "nothing known", ""],
                                 Vocabulary(CONFIG.vocab), max_tokens=3)
    assert ids.tolist() == [[2, 2, 2], [1, 1, 0], [0, 0, 0]]
    assert lengths.tolist() == [3, 2, 0]
    assert ids.dtype == np.int64
