from dataclasses import replace

import numpy as np
import pytest

from ncclean.errors import BadOptionError
from ncclean.options import DEFAULT_CUT, preset_cut
from ncclean.records import as_record
from ncclean.stages.partition import Cut, caption_counts, partition, recall_threshold


def test_default_cut_is_the_single_half():
    out = partition(np.array([0.9, 0.5, 0.49, 0.0]))
    assert out.tolist() == ["clean_significant", "clean_significant", "noisy", "noisy"]


def test_a_band_makes_vague():
    out = partition(np.array([0.9, 0.6, 0.45, 0.2]), Cut(clean_above=0.7, noisy_below=0.3))
    assert out.tolist() == ["clean_significant", "vague", "vague", "noisy"]


def test_cut_by_noise_rate_takes_the_lowest_share_with_stable_ties():
    prob = np.array([0.5, 0.1, 0.5, 0.9, 0.5])
    out = partition(prob, Cut(noise_rate=0.4))
    assert out.tolist() == ["noisy", "noisy", "clean_significant", "clean_significant",
                            "clean_significant"]


def test_caption_counts():
    assert caption_counts(np.array([0, 2, 0, 1, 0])).tolist() == [3, 1, 3, 1, 3]
    assert caption_counts(np.array([], dtype=np.int64)).tolist() == []


def test_rare_captions_are_clean_from_their_own_threshold():
    prob = np.array([0.9, 0.6, 0.3, 0.05, 0.9, 0.6, 0.3, 0.05])
    counts = np.array([1, 1, 2, 2, 3, 3, 3, 50])
    cut = Cut(clean_above=0.8, noisy_below=0.5, rare_clean_above=0.1)
    assert partition(prob, cut, counts).tolist() == [
        "clean_significant", "clean_significant", "clean_significant", "noisy",
        "clean_significant", "vague", "noisy", "noisy"]
    # a rare threshold inside the band keeps the band below it
    banded = partition(prob, Cut(0.8, 0.2, rare_clean_above=0.5), counts)
    assert banded.tolist()[:4] == ["clean_significant", "clean_significant", "vague", "noisy"]
    assert partition(prob, Cut(0.8, 0.5, rare_clean_above=0.1, rare_count=3),
                     counts).tolist()[5] == "clean_significant"
    with pytest.raises(ValueError, match="caption count"):
        partition(prob, cut)


@pytest.mark.parametrize("kwargs", [dict(clean_above=0.3, noisy_below=0.6),
                                    dict(noise_rate=1.5), dict(clean_above=1.2),
                                    dict(clean_above=0.8, rare_clean_above=0.9),
                                    dict(rare_clean_above=0.1, noise_rate=0.3),
                                    dict(rare_count=0)])
def test_bad_cuts(kwargs):
    with pytest.raises(BadOptionError):
        Cut(**kwargs)


def test_recall_threshold_reaches_the_pairs_that_hold_that_share_of_the_expected_noise():
    # expected noisy pairs: 0.9 + 0.5 + 0.4 + 0.2 = 2.0 (the 1.0 adds nothing)
    prob = np.array([0.8, 0.1, 1.0, 0.6, 0.5])
    assert np.flatnonzero(prob < recall_threshold(prob, 0.45)).tolist() == [1]  # 0.9 >= 0.9
    assert np.flatnonzero(prob < recall_threshold(prob, 0.46)).tolist() == [1, 4]  # 1.4
    assert np.flatnonzero(prob < recall_threshold(prob, 0.9)).tolist() == [1, 3, 4]  # 1.8
    assert np.flatnonzero(prob < recall_threshold(prob, 0.95)).tolist() == [0, 1, 3, 4]
    assert np.flatnonzero(prob < recall_threshold(prob, 1.0)).tolist() == [0, 1, 3, 4]
    assert recall_threshold(np.ones(4), 0.9) == 0.0  # no noise expected: nothing flagged
    assert recall_threshold(np.array([]), 0.9) == 0.0
    tied = np.array([0.2, 0.2, 0.9])
    assert np.flatnonzero(tied < recall_threshold(tied, 0.1)).tolist() == [0, 1]


def test_recall_bands_widen_noisy_and_vague_but_never_narrow_them():
    # a corpus whose scores expect little noise, spread thin: the thresholds flag nothing
    prob = np.array([0.55, 0.7, 0.75, 0.85, 0.9, 0.95, 0.99, 0.99, 1.0, 1.0])
    plain = partition(prob, Cut(0.5, 0.5))
    assert (plain == "noisy").sum() == 0
    cut = Cut(0.5, 0.5, noisy_recall=0.5, review_recall=0.9).with_recall(prob)
    out = partition(prob, cut)
    expected = np.cumsum(np.sort(1 - prob)[::-1])  # lowest clean_prob first
    assert out.tolist()[:2] == ["noisy", "noisy"]  # 0.45 + 0.3 >= half of 1.52
    assert expected[1] >= 0.5 * expected[-1] > expected[0]
    assert (out == "vague").sum() == 3  # with noisy they hold >= 90%
    assert cut.thresholds() == (cut.recall_clean_above, cut.recall_noisy_below)
    # where the thresholds reach further, they stand
    wide = Cut(0.96, 0.8, noisy_recall=0.5, review_recall=0.9).with_recall(prob)
    assert wide.thresholds() == (0.96, 0.8)
    # an unresolved cut is resolved on the scores it cuts
    assert partition(prob, Cut(0.5, 0.5, noisy_recall=0.5, review_recall=0.9)).tolist() == \
        out.tolist()


def test_recall_bands_check_themselves_and_leave_share_cuts_alone():
    from ncclean.options import DEFAULT_CUT, preset_cut

    with pytest.raises(BadOptionError, match="noisy-recall"):
        Cut(noisy_recall=0.95, review_recall=0.9)
    with pytest.raises(BadOptionError, match="must lie in"):
        Cut(review_recall=0.0)
    with pytest.raises(BadOptionError, match="give one or the other"):
        Cut(noise_rate=0.2, review_recall=0.8)
    from dataclasses import replace

    assert replace(DEFAULT_CUT, noise_rate=0.2).review_recall is None  # the default's bands
    share = replace(DEFAULT_CUT, noise_rate=0.2, review_recall=None)  # one band turned off
    assert (share.noisy_recall, share.review_recall) == (None, None)
    training = replace(DEFAULT_CUT, rare_clean_above=0.3)  # a training cut has none either
    assert (training.noisy_recall, training.review_recall) == (None, None)
    assert replace(training, preset="train") == preset_cut("train")
    with pytest.raises(BadOptionError, match="--rare-clean-above makes another cut"):
        Cut(rare_clean_above=0.3, review_recall=0.7)
    stale = Cut(0.5, 0.5, review_recall=0.9, recall_clean_above=0.97, recall_noisy_below=0.6)
    assert stale.recall_noisy_below is None  # no band, no threshold of one
    assert stale.thresholds() == (0.97, 0.5)
    assert preset_cut("train").review_recall is None  # measured without them
    assert preset_cut("review") == replace(DEFAULT_CUT, preset="review")
    resolved = DEFAULT_CUT.with_recall(np.array([0.1, 0.9, 0.99]))
    from ncclean.records import as_record

    assert Cut.from_record(as_record(resolved) | {"by": "cut"}) == resolved


def test_pairs_are_cut_at_the_precision_the_file_holds():
    # 0.8 - 1e-12 is written as float32 0.8: clean in the file, so clean here
    assert partition(np.array([0.8 - 1e-12, 0.5 - 1e-12]), Cut(0.8, 0.5)).tolist() == [
        "clean_significant", "vague"]
    rng = np.random.default_rng(0)
    prob = rng.beta(8, 1, size=2000)
    cut = Cut(0.5, 0.5, noisy_recall=0.5, review_recall=0.9).with_recall(prob)
    parts = partition(prob, cut)
    written = prob.astype(np.float32).astype(np.float64)  # what a reader of the file sees
    clean_above, noisy_below = cut.thresholds()
    assert (np.isin(parts, ["vague", "noisy"]) == (written < clean_above)).all()
    assert ((parts == "noisy") == (written < noisy_below)).all()
    assert recall_threshold(np.array([2.0, -1.0, 0.5]), 0.9) <= 1.0  # out-of-range scores


def _weakly_separated(rng, n=300, noisy=84):
    """Calibrated-looking scores of a small corpus: noise low, clean spread over the middle, so
    the 0.8 threshold flags far more pairs than are noisy."""
    prob = np.r_[rng.uniform(0.0, 0.6, noisy), rng.uniform(0.45, 1.0, n - noisy)]
    return prob, np.r_[np.ones(noisy, bool), np.zeros(n - noisy, bool)]


def test_the_queue_is_cut_back_to_the_low_end_of_the_estimate_where_the_thresholds_flag_more(rng):
    prob, truth = _weakly_separated(rng)
    default = Cut(0.8, 0.5, noisy_recall=0.5, review_recall=0.9, queue_by_estimate=True)
    before = partition(prob, replace(default, queue_by_estimate=False))
    assert (before != "clean_significant").sum() > 1.6 * truth.sum()  # the long queue
    cut = default.with_recall(prob).with_queue(prob, interval=(0.28, 0.46))
    out = partition(prob, cut)
    queued = out != "clean_significant"
    assert queued.sum() == round(0.28 * len(prob))  # the interval's low end, not the estimate
    assert np.all(prob[queued].max() < prob[~queued].min())  # the lowest pairs
    assert (queued & truth).sum() / truth.sum() > 0.8  # most of the noise still queued
    assert (~queued & ~truth).sum() / (~truth).sum() > 0.9  # and most clean pairs kept
    assert cut.thresholds() == (cut.queue_clean_above, cut.queue_clean_above)  # all noisy here
    assert "queue cut back" in cut.describe_bands()
    # a cut from a record (a saved fit applied to a shard) cuts the same
    assert partition(prob, Cut.from_record(as_record(cut))).tolist() == out.tolist()


def test_the_queue_is_left_to_the_bands_where_the_thresholds_flag_no_more_than_it_can_hold():
    # noise hidden among near misses (clip art as it is): the bands widen, the estimate does not
    # narrow, also where the thresholds flag more than the estimate (3 of 10 against, say, 2.6)
    # but not more than the upper end of its interval
    prob = np.array([0.55, 0.7, 0.75, 0.85, 0.9, 0.95, 0.99, 0.99, 1.0, 1.0])
    cut = Cut(0.8, 0.5, noisy_recall=0.5, review_recall=0.9, queue_by_estimate=True)
    for interval in ((0.2, 0.5), (0.2, 0.32)):
        resolved = cut.with_recall(prob).with_queue(prob, interval=interval)
        assert resolved.queue_clean_above is None
        assert resolved.thresholds() == cut.with_recall(prob).thresholds()
    resolved = cut.with_recall(prob).with_queue(prob, interval=(0.2, 0.28))  # 3 > 2.8: cut
    assert (partition(prob, resolved) != "clean_significant").sum() == 2


def test_the_queue_needs_an_interval_and_belongs_to_the_review_cut(rng):
    prob, _ = _weakly_separated(rng)
    cut = Cut(0.8, 0.5, queue_by_estimate=True)
    assert cut.with_queue(prob, None).queue_clean_above is None  # no interval: as before
    assert Cut(0.8, 0.5).with_queue(prob, (0.28, 0.46)).queue_clean_above is None
    assert not replace(DEFAULT_CUT, noise_rate=0.3).queue_by_estimate
    assert not preset_cut("train").queue_by_estimate and DEFAULT_CUT.queue_by_estimate


def test_thresholds_given_turn_the_queue_off_unless_it_is_given_too(rng):
    from ncclean.options import fold_keywords

    prob, _ = _weakly_separated(rng)
    assert DEFAULT_CUT.with_queue(prob, (0.28, 0.46)).queue_clean_above is not None
    for given in ({"clean_above": 0.7}, {"noisy_below": 0.3}, {"clean_above": 0.8}):
        cut = DEFAULT_CUT.with_options(**given)
        assert not cut.queue_by_estimate
        assert cut.with_queue(prob, (0.28, 0.46)).queue_clean_above is None
        assert fold_keywords({"cut": DEFAULT_CUT}, given)["cut"] == cut  # api.score's keywords
    assert DEFAULT_CUT.with_options(clean_above=0.7, queue_by_estimate=True).queue_by_estimate
    assert DEFAULT_CUT.with_options(noisy_recall=None) == replace(DEFAULT_CUT, noisy_recall=None)


def test_a_rule_that_moves_a_threshold_given_says_so_and_none_else(rng):
    prob, _ = _weakly_separated(rng)
    bands = DEFAULT_CUT.with_options(clean_above=0.6).with_recall(prob)
    assert bands.thresholds()[0] > 0.6
    assert "recall bands raised --clean-above 0.6 to" in bands.moved()
    assert bands.moved() == bands.moved(frozenset({"clean_above"}))
    queued = DEFAULT_CUT.with_options(clean_above=0.85, queue_by_estimate=True) \
        .with_recall(prob).with_queue(prob, (0.28, 0.46))
    assert queued.queue_clean_above is not None
    assert "(--queue-by-estimate) moved --clean-above 0.85 to" in queued.moved()
    default = DEFAULT_CUT.with_recall(prob).with_queue(prob, (0.28, 0.46))
    assert default.moved() is None  # nothing given, nothing said
    assert "--clean-above 0.8 to" in default.moved(frozenset({"clean_above"}))  # typed, default
    assert Cut(0.7, 0.3).moved() is None  # no rule to move them


def test_the_cut_options_a_user_set_are_named_as_the_command_line_writes_them():
    assert DEFAULT_CUT.named() == [] and Cut().named() == []
    assert DEFAULT_CUT.named(frozenset({"clean_above"})) == ["--clean-above 0.8"]
    assert preset_cut("train").named(frozenset({"preset"}))[0] == "--preset train"
    assert preset_cut("gate").named()[0] == "--preset gate"
    assert replace(DEFAULT_CUT, noise_rate="auto").named() == ["--noise-rate auto"]
    assert replace(DEFAULT_CUT, review_recall=None).named(frozenset({"review_recall"})) == [
        "--review-recall 0"]
    assert DEFAULT_CUT.named(frozenset({"queue_by_estimate"})) == ["--queue-by-estimate"]
    assert replace(DEFAULT_CUT, rare_count=5).named() == []  # significance reads it too
