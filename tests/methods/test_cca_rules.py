import numpy as np
import pytest

from ncclean.methods.cca_rules import (
    RIDGE,
    TRUSTED_RIDGE,
    WIDE_DIMS,
    WIDE_RIDGE,
    CorpusShape,
    convention_share,
    ranks_cross_fitted,
)
from ncclean.methods.cca_rules import discounts as discounted

PICTURES = np.arange(1000)
NAMES = np.arange(1000)  # every picture named on its own
COLLECTION = np.r_[np.zeros(100, int), np.arange(1, 901)]  # one label on 10% of the pairs


def has_conventions(text_group):
    return CorpusShape.of(np.arange(len(text_group)), text_group, 1).has_conventions


def discounts(image_group, text_group, width):
    return CorpusShape.of(image_group, text_group, width).discounts


def ridge(image_group, text_group, width):
    return CorpusShape.of(image_group, text_group, width).ridge


def dims(image_group, text_group, width):
    return CorpusShape.of(image_group, text_group, width).dims


def cross_fits(image_group, text_group, width):
    return CorpusShape.of(image_group, text_group, width).cross_fits


def few_entries(image_group, text_group, width):
    return CorpusShape.of(image_group, text_group, width).few_entries


def test_conventions_are_captions_three_or_more_pairs_share():
    twins = np.repeat(np.arange(50), 2)  # each picture drawn twice, one name: no convention
    assert convention_share(twins) == 0.0 and not has_conventions(twins)
    assert convention_share(COLLECTION) == pytest.approx(0.10) and has_conventions(COLLECTION)
    assert not has_conventions(np.r_[np.zeros(4, int), np.arange(1, 97)])  # 4%
    assert convention_share(np.zeros(0, int)) == 0.0


def test_names_that_outnumber_the_dimensions_are_trusted_with_the_weak_ridge():
    assert not discounts(PICTURES, NAMES, width=1000)
    assert ridge(PICTURES, NAMES, 1000) == TRUSTED_RIDGE and dims(PICTURES, NAMES, 1000) == 128
    assert discounts(PICTURES, NAMES, width=1001)  # a quarter to one width: discounted at 30
    assert ridge(PICTURES, NAMES, 1001) == ridge(PICTURES, NAMES, 4000) == TRUSTED_RIDGE
    assert ridge(PICTURES, NAMES, 4001) == RIDGE  # below a quarter: cross-fitted, at 100
    assert discounts(PICTURES % 500, NAMES, width=800)  # 500 distinct pictures
    assert not discounts(PICTURES, np.repeat(np.arange(500), 2), width=500)
    assert discounts(PICTURES, COLLECTION, width=10) and ridge(PICTURES, COLLECTION, 10) == RIDGE


def test_a_small_corpus_of_conventions_or_a_tiny_one_is_cross_fitted():
    assert cross_fits(PICTURES, COLLECTION, width=334)  # 1,000 pairs < 3 x 334
    assert not cross_fits(PICTURES, COLLECTION, width=333)
    assert not cross_fits(PICTURES, NAMES, width=4000)  # names: in sample to a quarter width
    assert cross_fits(PICTURES, NAMES, width=4001)
    assert cross_fits(PICTURES % 200, NAMES, width=1000)  # 200 distinct pictures


def test_a_trusted_fit_keeps_more_directions_from_two_widths_and_a_weaker_ridge_from_three():
    assert dims(PICTURES, NAMES, 500) == WIDE_DIMS and ridge(PICTURES, NAMES, 500) == TRUSTED_RIDGE
    assert dims(PICTURES, NAMES, 501) == 128
    assert ridge(PICTURES, NAMES, 333) == WIDE_RIDGE and ridge(PICTURES, NAMES, 334) == 30.0
    assert dims(PICTURES, COLLECTION, 10) == 128  # conventions: never


def test_fewer_entries_than_the_width_are_few_whatever_the_captions():
    assert not few_entries(PICTURES, NAMES, 1000) and few_entries(PICTURES, NAMES, 1001)
    assert few_entries(PICTURES % 500, NAMES, 800)  # 500 distinct pictures
    assert not few_entries(PICTURES, COLLECTION, 901) and few_entries(PICTURES, COLLECTION, 902)


def test_a_rule_given_overrides_the_shape_and_auto_notes_its_trust():
    names = CorpusShape.of(PICTURES, NAMES, 100)  # ten widths of entries: trusted, in sample
    tiny = CorpusShape.of(PICTURES, NAMES, 10_000)  # a tenth of a width: cross-fitted
    assert not ranks_cross_fitted("auto", names) and ranks_cross_fitted("auto", tiny)
    assert ranks_cross_fitted("cross-fitted", names) and not ranks_cross_fitted("in-sample", tiny)
    report: dict = {}
    assert not discounted("auto", names, report) and report["conventions"]["trusted"]
    report = {}
    assert discounted("auto", tiny, report) and report == {}
    assert discounted("repeated", names, {}) and not discounted("trust", tiny, {})
