"""Named seeds keep the values of the formulas they replaced (same seed, same bytes)."""

import numpy as np

from ncclean.seeds import derive_rng, derive_seed, epoch_rng


def test_derived_seeds_keep_their_old_values():
    assert derive_seed(5, "matcher", 1) == 5 * 1009 + 1
    assert derive_seed(5, "pc2-classifier", 1) == 5 * 1009 + 500 + 1
    assert derive_seed(5, "retrain-matcher") == 5 * 1009 + 77
    assert derive_seed(5, "epoch", 3) == 5 * 100_003 + 3
    assert derive_seed(5, "crcl-piece", 2) == 5 * 7 + 2


def test_derived_generators_keep_their_old_streams():
    for purpose, tag in (("reference-pool", 31), ("negative-pool", 7919), ("donor-sample", 67)):
        assert np.array_equal(derive_rng(4, purpose).random(3),
                              np.random.default_rng([4, tag]).random(3))
    for purpose, tag in (("significance-pass", 53), ("crcl-scoring", 4111)):
        assert np.array_equal(derive_rng(4, purpose, 2).random(3),
                              np.random.default_rng([4, tag, 2]).random(3))
    assert np.array_equal(epoch_rng(4, 2).random(3), np.random.default_rng([4, 2]).random(3))
