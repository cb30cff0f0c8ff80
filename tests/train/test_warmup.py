"""NCR's warm-up has one home: gmm's co-division starts with it and clip and sdd call it."""

import numpy as np
import torch

from ncclean.methods.base import Context
from ncclean.methods.gmm import GMM, CoDivide
from ncclean.models.matcher import Ensemble
from ncclean.testing import tiny_features
from ncclean.train.loop import TrainConfig, train
from ncclean.train.warmup import cycled_batches, encode, warm_up, warmed_matcher, warmup_epochs_for


def test_cycled_batches_cover_every_index_before_repeating():
    batches = cycled_batches(np.arange(10), 4, np.random.default_rng(0), 3)
    assert [len(b) for b in batches] == [4, 4, 4]
    assert sorted(np.concatenate(batches)[:10].tolist()) == list(range(10))
    assert cycled_batches(np.arange(0), 4, np.random.default_rng(0), 2)[1].size == 0


def test_warmup_rule():
    assert warmup_epochs_for(8_000, 128) == 5 and warmup_epochs_for(8_000, 128, True) == 1
    assert warmup_epochs_for(100, 128) == 10


def test_warm_up_trains_as_the_warm_up_of_gmm():
    features, config, _ = tiny_features(n_images=8)
    context = Context(seed=3, matcher_config=config)
    warmed, epochs = warm_up(features, context, 2, 16, 1e-3)
    assert epochs == 2 and not warmed.training and len(warmed.members) == 2

    model = Ensemble([context.new_matcher(0), context.new_matcher(1)])
    objective = CoDivide(features, GMM(batch_size=16, lr=1e-3), 2, 1, "cpu", 3)
    train(model, objective, TrainConfig.from_context(context, epochs=2, lr=1e-3))
    for ours, theirs in zip(warmed.state_dict().values(), model.state_dict().values()):
        assert torch.equal(ours, theirs)

    matcher, embeddings, source = warmed_matcher(features, context, 2, 16, 1e-3)
    assert source == "matcher warmed up for 2 epochs"
    assert np.allclose(embeddings.pair_similarity(features),
                       torch.diagonal(matcher.batch_similarity(
                           features.batch(np.arange(features.n_pairs)))).detach().numpy(),
                       atol=1e-5)


def test_encode_and_batch_similarity_agree():
    features, config, _ = tiny_features(n_images=4)
    member = Context(matcher_config=config).new_matcher(0).eval()
    batch = features.batch(np.arange(6))
    images, texts = encode(member, batch)
    assert torch.allclose(images @ texts.T, member.batch_similarity(batch))
