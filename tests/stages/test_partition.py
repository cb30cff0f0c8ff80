import numpy as np
import pytest

from ncclean.errors import BadOptionError
from ncclean.stages.partition import Cut, caption_counts, partition


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
