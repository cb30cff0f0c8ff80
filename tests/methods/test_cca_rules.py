import numpy as np
import pytest

from ncclean.methods.cca_rules import (
    RIDGE,
    WEAK_RIDGE,
    convention_share,
    cross_fits,
    discounts,
    ridge,
)

NAMES = np.arange(1000)  # every picture named on its own
COLLECTION = np.r_[np.zeros(100, int), np.arange(1, 901)]  # one label on 10% of the pairs


def test_conventions_are_captions_three_or_more_pairs_share():
    twins = np.repeat(np.arange(50), 2)  # each picture drawn twice, one name: no convention
    assert convention_share(twins) == 0.0 and not discounts(twins)
    assert convention_share(COLLECTION) == pytest.approx(0.10) and discounts(COLLECTION)
    assert not discounts(np.r_[np.zeros(4, int), np.arange(1, 97)])  # 4%
    assert convention_share(np.zeros(0, int)) == 0.0


def test_only_a_small_corpus_of_conventions_is_cross_fitted():
    assert cross_fits(COLLECTION, width=334)  # 1,000 pairs < 3 x 334
    assert not cross_fits(COLLECTION, width=333)
    assert not cross_fits(NAMES, width=10_000)  # names: in sample at any size


def test_the_weak_ridge_is_for_names_that_outnumber_the_dimensions():
    pictures = np.arange(1000)
    assert ridge(pictures, NAMES, width=1000) == WEAK_RIDGE
    assert ridge(pictures, NAMES, width=1001) == RIDGE  # fewer names than dimensions
    assert ridge(pictures % 500, NAMES, width=800) == RIDGE  # 500 distinct pictures
    assert ridge(pictures, np.repeat(np.arange(500), 2), width=500) == WEAK_RIDGE
    assert ridge(pictures, COLLECTION, width=10) == RIDGE
